"""Discord media at the edge: a message's attachments and stickers as core.values.model.Media, each with a
loader that fetches the attachment URL into memory (never onto disk), within the size cap."""

from __future__ import annotations

import logging

import aiohttp
import discord

from core.values.edge import IMAGE_MIME_TYPES, MAX_MEDIA_BYTES
from core.values.errors import MediaUnavailable
from core.values.model import Media, MediaLoader

log = logging.getLogger(__name__)


def media_of(message: discord.Message) -> tuple[Media, ...]:
    """The attachments (photo, voice, audio, video, document) and stickers of `message`, without bytes."""
    items = [_attachment(a) for a in message.attachments]
    items += [Media("sticker") for _ in message.stickers]
    return tuple(items)


def _attachment(attachment: discord.Attachment) -> Media:
    mime = (attachment.content_type or "").split(";")[0].strip().lower()
    if attachment.is_voice_message():
        kind = "voice"
    elif mime in IMAGE_MIME_TYPES:
        kind = "photo"
    elif mime.startswith("audio/"):
        kind = "audio"
    elif mime.startswith("video/"):
        kind = "video"
    else:
        return Media("document", mime or None, attachment.size, attachment.filename)
    return Media(kind, mime or None, attachment.size, attachment.filename, _loader(attachment, kind))


def _loader(attachment: discord.Attachment, kind: str) -> MediaLoader:
    async def load() -> bytes:
        if attachment.size > MAX_MEDIA_BYTES:
            raise MediaUnavailable(kind, too_large=True)
        try:
            data = await attachment.read()
        except (TimeoutError, discord.HTTPException, aiohttp.ClientError, OSError) as exc:
            log.warning("discord: fetching attachment %s failed (%s)", attachment.id, type(exc).__name__)
            raise MediaUnavailable(kind) from exc
        if len(data) > MAX_MEDIA_BYTES:
            raise MediaUnavailable(kind, too_large=True)
        return data

    return load
