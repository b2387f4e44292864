"""Media of inbound messages: the text a photo, voice note or sticker stands for, and the images of one request.

What is stored of a media message is its text only: a marker per item (`[photo]`, `[voice]`), the
caption, and a voice note's transcript, in the mode and segment the message came in (so a private
transcript is private like any private text). The bytes are fetched by the adapter's loader only
when they are read (an image for a vision model, audio for transcription), held in memory for that
one request, and never written anywhere.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from core.ports.model import Transcriber
from core.values import copy
from core.values.edge import IMAGE_MIME_TYPES, MAX_MEDIA_BYTES
from core.values.errors import MediaUnavailable, TranscriptionFailed
from core.values.model import ChatMessage, ImageInput, InboundMessage, Media

log = logging.getLogger(__name__)

IMAGE_KINDS = frozenset({"photo"})
AUDIO_KINDS = frozenset({"voice", "audio"})


@dataclass(frozen=True, slots=True)
class ReadMedia:
    """What the core makes of a media message.

    `text` is what is stored and what the model reads; `images` go with this one request only;
    `notes` are constant lines said before the answer (never stored); `answerable` is False when
    there is nothing for the model to answer (a sticker, a photo without a caption and no vision),
    and the notes are then the whole reply.
    """

    text: str
    images: tuple[ImageInput, ...] = ()
    notes: tuple[str, ...] = ()
    answerable: bool = True

    @property
    def reply(self) -> str:
        """The reply when there is nothing to answer: the notes (never empty)."""
        return "\n\n".join(self.notes) or copy.MEDIA_NOT_READ_OTHER.format(also="")

    def noted(self, answer: str) -> str:
        """`answer` with the notes before it."""
        return "\n\n".join((*self.notes, answer))


class MediaReader:
    """Turns an inbound message's media into text (and images), as configured.

    Args:
        vision: the model reads images (COMPANION_LLM_VISION): they go to it as image input.
        transcriber: speech to text for voice notes and audio; None: voice is not set up.
    """

    def __init__(self, *, vision: bool = False, transcriber: Transcriber | None = None) -> None:
        self.vision = vision
        self.transcriber = transcriber
        # Conversations told (in this run) that their captioned images are not read: told once,
        # since the caption is answered anyway. An uncaptioned image still gets its line each time,
        # as that line is its whole answer. Ids only, with whether a private turn was told: a
        # private turn reads what normal turns were told, never the other way round.
        self._told_images_unread: set[tuple[int, bool]] = set()

    async def read(
        self, message: InboundMessage, conversation_id: int | None = None, *, private: bool = False
    ) -> ReadMedia:
        """Read `message.media`: fetch what this configuration reads, transcribe voice notes.
        Never raises for a media item: what cannot be read becomes a constant note.
        `conversation_id`: where it was said (the captioned-image note is said once there, once
        for normal mode and once for private mode: `private`, the gate's answer for the message)."""
        caption = message.text.strip()
        markers: list[str] = []
        images: list[ImageInput] = []
        transcripts: list[str] = []
        notes: list[str] = []
        for item in message.media:
            markers.append(f"[{item.kind}]")
            if item.kind in IMAGE_KINDS:
                note, image = await self._image(item, alone=not caption)
                images += [image] if image is not None else []
            elif item.kind in AUDIO_KINDS:
                note, transcript = await self._audio(item)
                transcripts += [transcript] if transcript else []
            else:
                note = copy.MEDIA_NOT_READ.get(item.kind, copy.MEDIA_NOT_READ_OTHER).format(also=self._also())
            if note == copy.IMAGES_NOT_READ and conversation_id is not None:
                told = {(conversation_id, False), (conversation_id, True)} if private else {(conversation_id, False)}
                if told & self._told_images_unread:
                    note = None  # told once already
                else:
                    self._told_images_unread.add((conversation_id, private))
            if note is not None and note not in notes:
                notes.append(note)
        body = "\n".join(part for part in (caption, *transcripts) if part)
        head = " ".join(markers)
        log.info(
            "media: %s; %d images read, %d transcripts",
            ", ".join(f"{m.kind} ({m.size if m.size is not None else '?'} bytes)" for m in message.media),
            len(images),
            len(transcripts),
        )
        return ReadMedia(
            text=f"{head} {body}" if body else head,
            images=tuple(images),
            notes=tuple(notes),
            answerable=bool(body or images),
        )

    def _also(self) -> str:
        if self.vision and self.transcriber is not None:
            return copy.ALSO_IMAGES_AND_VOICE
        if self.vision:
            return copy.ALSO_IMAGES
        return copy.ALSO_VOICE if self.transcriber is not None else ""

    async def _image(self, item: Media, *, alone: bool) -> tuple[str | None, ImageInput | None]:
        if not self.vision:
            return (copy.IMAGE_NOT_READ_ALONE if alone else copy.IMAGES_NOT_READ), None
        try:
            data = await _fetch(item)
        except MediaUnavailable as exc:
            return (copy.MEDIA_TOO_LARGE if exc.too_large else copy.MEDIA_FETCH_FAILED), None
        mime = (item.mime_type or "image/jpeg").lower()
        if mime not in IMAGE_MIME_TYPES:
            return copy.MEDIA_NOT_READ_OTHER.format(also=self._also()), None
        return None, ImageInput(mime, data)

    async def _audio(self, item: Media) -> tuple[str | None, str | None]:
        if self.transcriber is None:
            return copy.VOICE_NOT_SET_UP, None
        try:
            data = await _fetch(item)
        except MediaUnavailable as exc:
            return (copy.MEDIA_TOO_LARGE if exc.too_large else copy.MEDIA_FETCH_FAILED), None
        try:
            text = await self.transcriber.transcribe(
                data, filename=item.filename or f"{item.kind}.ogg", mime_type=item.mime_type or "audio/ogg"
            )
        except TranscriptionFailed as exc:
            log.warning("media: transcribing a %s of %d bytes failed (%s)", item.kind, len(data), type(exc).__name__)
            return copy.VOICE_FAILED, None
        text = text.strip()
        return (None, text) if text else (copy.VOICE_NO_WORDS, None)


def unread_text(message: InboundMessage) -> str:
    """What is stored of a media message that is kept unread (one sent before a restart closed its
    private interval): the markers and the caption; nothing is fetched or transcribed."""
    head = " ".join(f"[{item.kind}]" for item in message.media)
    caption = message.text.strip()
    return f"{head} {caption}".strip() if head else message.text


async def _fetch(item: Media) -> bytes:
    """The item's bytes, within the cap, or MediaUnavailable."""
    if item.size is not None and item.size > MAX_MEDIA_BYTES:
        raise MediaUnavailable(item.kind, too_large=True)
    if item.load is None:
        raise MediaUnavailable(item.kind)
    data = await item.load()
    if len(data) > MAX_MEDIA_BYTES:  # a size the platform did not declare, or declared wrong
        raise MediaUnavailable(item.kind, too_large=True)
    return data


def with_images(messages: Sequence[ChatMessage], images: tuple[ImageInput, ...]) -> list[ChatMessage]:
    """The request's messages with `images` on its newest user message (the one being answered)."""
    out = list(messages)
    if not images:
        return out
    for index in range(len(out) - 1, -1, -1):
        if out[index].role == "user":
            out[index] = dataclasses.replace(out[index], images=images)
            break
    return out
