"""Images for a vision model: sized down with Pillow (imported here only) and written as `data:` URLs."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import io
import logging
import re

import httpx

from core.values import copy
from core.values.errors import ProviderRejected
from core.values.model import ChatMessage, CompletionRequest, ImageInput

log = logging.getLogger(__name__)

# Larger images are sized down before they are sent: models scale them to about this anyway, and a
# base64 body of several megabytes only costs time (OpenAI's high detail works at 2048 px at most).
MAX_IMAGE_SIDE = 1568
MAX_IMAGE_BYTES = 3 * 1024 * 1024
# More pixels than this is not a photo but a decompression bomb: refused, not decoded.
MAX_PIXELS = 64_000_000
PASSED_AS_THEY_ARE = frozenset({"image/jpeg", "image/png", "image/webp", "image/gif"})


# How servers refuse image input (classification only; the text never reaches a log or an error):
# OpenAI "image_url is only supported by certain models", llama.cpp "image input is not supported
# ... mmproj", vLLM "... is not a multimodal model". An image the server could not decode is not
# this: images stay on for the next turn then.
_IMAGES_REFUSED = re.compile(
    r"image.{0,60}(not|only) supported|does not support.{0,30}(image|vision)|multi-?modal|mmproj", re.IGNORECASE
)


class ImageUnreadable(ValueError):
    """The bytes are no image Pillow can read (or a decompression bomb)."""


def data_url(image: ImageInput) -> str:
    return f"data:{image.mime_type};base64,{base64.b64encode(image.data).decode('ascii')}"


async def fitted(request: CompletionRequest) -> CompletionRequest:
    """`request` with every image within MAX_IMAGE_SIDE and MAX_IMAGE_BYTES (decoded in a thread);
    an image that cannot be read is left out and the model reads the text alone."""
    if not any(m.images for m in request.messages):
        return request
    messages: list[ChatMessage] = []
    for message in request.messages:
        if message.images:
            images = []
            for image in message.images:
                try:
                    images.append(await asyncio.to_thread(fit_image, image))
                except ImageUnreadable as exc:
                    log.warning("an image of %d bytes was left out of the request (%s)", len(image.data), exc)
            message = dataclasses.replace(message, images=tuple(images))
        messages.append(message)
    return dataclasses.replace(request, messages=tuple(messages))


def fit_image(image: ImageInput) -> ImageInput:
    """The image as it is when it fits; else sized down (aspect kept) and saved as JPEG.

    Raises:
        ImageUnreadable: not an image, or more than MAX_PIXELS.
    """
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(image.data)) as opened:
            width, height = opened.size
            if width * height > MAX_PIXELS:
                raise ImageUnreadable(f"{width}x{height} pixels")
            fits = max(width, height) <= MAX_IMAGE_SIDE and len(image.data) <= MAX_IMAGE_BYTES
            mime = Image.MIME.get(opened.format or "", "")
            if fits and mime in PASSED_AS_THEY_ARE:
                return ImageInput(mime, image.data)
            opened.draft("RGB", (MAX_IMAGE_SIDE, MAX_IMAGE_SIDE))  # JPEG: decode at a smaller scale
            picture = opened.convert("RGB")
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as exc:
        raise ImageUnreadable(type(exc).__name__) from None
    picture.thumbnail((MAX_IMAGE_SIDE, MAX_IMAGE_SIDE))
    out = io.BytesIO()
    quality = 85
    picture.save(out, "JPEG", quality=quality)
    while out.tell() > MAX_IMAGE_BYTES and quality > 40:
        quality -= 15
        out = io.BytesIO()
        picture.save(out, "JPEG", quality=quality)
    log.info(
        "an image of %dx%d (%d bytes) was sized down to %dx%d (%d bytes)",
        width,
        height,
        len(image.data),
        picture.width,
        picture.height,
        out.tell(),
    )
    return ImageInput("image/jpeg", out.getvalue())


def refuses_images(exc: ProviderRejected) -> bool:
    """Whether a rejection is the server refusing image input (not a refused key or a bad request)."""
    cause = exc.__cause__
    if exc.status not in (400, 422, 500) or not isinstance(cause, httpx.HTTPStatusError):
        return False
    return bool(_IMAGES_REFUSED.search(cause.response.text[:2000]))


def without_images(request: CompletionRequest) -> CompletionRequest:
    """`request` with its images left out, each message that had some saying so in a constant line."""
    if not any(m.images for m in request.messages):
        return request
    messages = tuple(
        dataclasses.replace(m, content=f"{m.content or ''}\n{copy.IMAGE_NOT_SENT_TO_MODEL}".strip(), images=())
        if m.images
        else m
        for m in request.messages
    )
    return dataclasses.replace(request, messages=messages)
