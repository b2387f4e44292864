"""Telegram media at the edge: which messages carry media, and each item as a core.values.model.Media whose
loader fetches the file (getFile, then the file URL) into memory, never onto disk."""

from __future__ import annotations

import logging

from telegram import Message, PhotoSize
from telegram.error import TelegramError
from telegram.ext import ExtBot, filters

from core.values.edge import IMAGE_MIME_TYPES, MAX_MEDIA_BYTES
from core.values.errors import MediaUnavailable
from core.values.model import Media, MediaLoader

log = logging.getLogger(__name__)

# Messages with something to answer besides text (service messages, such as a member joining, are not).
MEDIA = (
    filters.PHOTO
    | filters.VOICE
    | filters.AUDIO
    | filters.VIDEO
    | filters.VIDEO_NOTE
    | filters.ANIMATION
    | filters.Sticker.ALL
    | filters.Document.ALL
    | filters.LOCATION
    | filters.VENUE
    | filters.CONTACT
    | filters.POLL
    | filters.Dice.ALL
)
# The photo size sent to a vision model: the largest one Telegram made that is not larger than this.
PHOTO_SIDE = 1600


def media_of(message: Message, bot: ExtBot) -> tuple[Media, ...]:
    """The media of `message` (at most one item: a Telegram message carries one), without bytes."""
    if message.photo:
        photo = _photo_size(message.photo)
        return (Media("photo", "image/jpeg", photo.file_size, None, _loader(bot, photo.file_id, "photo")),)
    if message.voice:
        voice = message.voice
        mime = voice.mime_type or "audio/ogg"
        return (Media("voice", mime, voice.file_size, "voice.ogg", _loader(bot, voice.file_id, "voice")),)
    if message.audio:
        audio = message.audio
        name = audio.file_name or "audio.mp3"
        return (Media("audio", audio.mime_type, audio.file_size, name, _loader(bot, audio.file_id, "audio")),)
    if message.video_note:
        return (Media("video_note", "video/mp4", message.video_note.file_size),)
    if message.video:
        return (Media("video", message.video.mime_type, message.video.file_size),)
    if message.animation:  # before document: Telegram sends a GIF as both
        return (Media("animation", message.animation.mime_type, message.animation.file_size),)
    if message.sticker:
        return (Media("sticker", None, message.sticker.file_size),)
    if message.document:
        document = message.document
        mime = (document.mime_type or "").lower()
        if mime in IMAGE_MIME_TYPES:  # a photo sent "as a file", uncompressed
            loader = _loader(bot, document.file_id, "photo")
            return (Media("photo", mime, document.file_size, document.file_name, loader),)
        return (Media("document", document.mime_type, document.file_size, document.file_name),)
    if message.venue or message.location:
        return (Media("location"),)
    if message.contact:
        return (Media("contact"),)
    if message.poll:
        return (Media("poll"),)
    if message.dice:
        return (Media("dice"),)
    return ()


def _photo_size(sizes: tuple[PhotoSize, ...]) -> PhotoSize:
    """The largest size within PHOTO_SIDE and the cap; the smallest when none is."""
    fitting = [s for s in sizes if max(s.width, s.height) <= PHOTO_SIDE and (s.file_size or 0) <= MAX_MEDIA_BYTES]
    if fitting:
        return max(fitting, key=lambda s: s.width * s.height)
    return min(sizes, key=lambda s: s.width * s.height)


def _loader(bot: ExtBot, file_id: str, kind: str) -> MediaLoader:
    async def load() -> bytes:
        try:
            file = await bot.get_file(file_id)
            if file.file_size is not None and file.file_size > MAX_MEDIA_BYTES:
                raise MediaUnavailable(kind, too_large=True)
            data = bytes(await file.download_as_bytearray())
        except TelegramError as exc:
            # getFile answers 400 "file is too big" past 20 MB.
            too_large = "too big" in str(exc).lower()
            log.warning("telegram: fetching a %s failed (%s)", kind, type(exc).__name__)
            raise MediaUnavailable(kind, too_large=too_large) from exc
        if len(data) > MAX_MEDIA_BYTES:
            raise MediaUnavailable(kind, too_large=True)
        return data

    return load
