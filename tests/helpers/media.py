"""Media for tests: real images and audio-shaped bytes that carry a distinctive canary, and the
database files' bytes to look for it in."""

from __future__ import annotations

import base64
import io
from pathlib import Path

# Distinctive bytes inside an image's comment and inside a recording: found anywhere, they leaked.
IMAGE_CANARY = b"img-canary-9f3c1e-never-stored"
AUDIO_CANARY = b"aud-canary-4b7d20-never-stored"


def jpeg_with(canary: bytes = IMAGE_CANARY, size: tuple[int, int] = (64, 48)) -> bytes:
    """A real JPEG (as Telegram photos are) whose comment segment holds `canary`."""
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", size, (200, 120, 40)).save(out, "JPEG", comment=canary)
    return out.getvalue()


def png_with(canary: bytes = IMAGE_CANARY, size: tuple[int, int] = (64, 48)) -> bytes:
    """A real PNG whose text chunk holds `canary`."""
    from PIL import Image, PngImagePlugin

    info = PngImagePlugin.PngInfo()
    info.add_text("Comment", canary.decode())
    out = io.BytesIO()
    Image.new("RGB", size, (40, 120, 200)).save(out, "PNG", pnginfo=info)
    return out.getvalue()


def ogg_with(canary: bytes = AUDIO_CANARY) -> bytes:
    """Bytes shaped like an Ogg Opus voice note (the fake transcription server reads no audio)."""
    return b"OggS\x00\x02" + b"\x00" * 20 + b"OpusHead" + canary + bytes(range(256)) * 4


def database_bytes(db_path: Path) -> bytes:
    """The database file and its -wal and -shm files, as they are on disk."""
    return b"".join(p.read_bytes() for p in sorted(db_path.parent.iterdir()) if p.name.startswith(db_path.name))


def traces_of(data: bytes, canary: bytes) -> list[str]:
    """How `data` (a media file carrying `canary`) shows up in `haystack`-like bytes: the canary,
    and the base64 of the whole file (what a data URL carries)."""
    return [canary.decode(), base64.b64encode(data).decode()[:80]]


def leaked(haystack: bytes, data: bytes, canary: bytes) -> list[str]:
    """Which traces of the media file `data` are in `haystack` (none: nothing leaked)."""
    return [trace for trace in traces_of(data, canary) if trace.encode() in haystack]
