"""Discord media through the real discord.py client and core, against the fake Discord (attachments on a
signed loopback CDN, voice messages, stickers) and the fake model server (image input, transcription)."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from adapters.llm.openai_compat import OpenAICompatibleProvider
from adapters.llm.transcribe import OpenAICompatibleTranscriber
from adapters.storage.stores import Stores
from bot.bootstrap import build_companion
from core.delivery.outbox import Outbox
from core.ports.clock import SystemClock
from core.turn.config import CompanionConfig
from core.values import copy
from tests.conftest import PASSPHRASE
from tests.helpers import engines
from tests.helpers.adapters import PlatformRun, discord_adapter
from tests.helpers.fake_discord import FakeDiscordServer
from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.media import AUDIO_CANARY, IMAGE_CANARY, leaked, ogg_with, png_with

FRIEND = 111
CAT = "what do you think of my cat?"


@pytest.fixture
async def discord_server() -> AsyncIterator[FakeDiscordServer]:
    async with FakeDiscordServer() as server:
        yield server


@pytest.fixture
async def model() -> AsyncIterator[FakeOpenAIServer]:
    async with FakeOpenAIServer(strict=True) as server:
        yield server


Start = Callable[..., Awaitable[PlatformRun]]


@pytest.fixture
async def start(
    discord_server: FakeDiscordServer, model: FakeOpenAIServer, stores: Stores, passphrase_hash: str
) -> AsyncIterator[Start]:
    closers: list[Callable[[], Awaitable[None]]] = []

    async def make(*, vision: bool = False, stt: bool = False) -> PlatformRun:
        provider = OpenAICompatibleProvider(model.base_url, max_retries=0, timeout=5.0)
        transcriber = OpenAICompatibleTranscriber(model.base_url, None, "whisper-test", timeout=5.0) if stt else None
        companion = build_companion(
            stores,
            provider,
            CompanionConfig(
                allowed_accounts=frozenset({f"discord:{FRIEND}"}), passphrase_hash=passphrase_hash, vision=vision
            ),
            outbox=Outbox(stores.outbox, SystemClock()),
            transcriber=transcriber,
        )
        await companion.start()
        adapter = discord_adapter(discord_server, companion)
        await adapter.start()
        closers.extend([provider.aclose, companion.drain, adapter.aclose])
        if transcriber is not None:
            closers.append(transcriber.aclose)
        return adapter

    yield make
    for close in reversed(closers):
        await close()


async def answer(server: FakeDiscordServer, send: Callable[[], Awaitable[int]]) -> str:
    """Do `send` and return the content of the one reply it gets."""
    before = len(server.sent)
    await send()
    await server.wait_for_sent(before + 1)
    return server.sent[before].content


def stored_user_texts(stores: Stores) -> list[str]:
    with sqlite3.connect(engines.sqlite_file(stores)) as db:
        return [row[0] for row in db.execute("SELECT text FROM messages WHERE role = 'user' ORDER BY id")]


def newest_user_content(request: dict) -> object:
    return [m for m in request["messages"] if m["role"] == "user"][-1]["content"]


async def test_an_image_attachment_with_text_reaches_a_vision_model_and_its_text_is_marked_photo(
    start: Start, discord_server: FakeDiscordServer, model: FakeOpenAIServer, stores: Stores
) -> None:
    await start(vision=True)
    image = png_with()
    model.reply_text("A fine cat.")
    files = [("cat.png", image, "image/png")]
    assert await answer(discord_server, lambda: discord_server.send_dm_media(FRIEND, CAT, files=files)) == "A fine cat."
    content = newest_user_content(model.requests[-1])
    assert isinstance(content, list) and content[0] == {"type": "text", "text": f"[photo] {CAT}"}
    assert model.images == [("image/png", image)]
    assert len(discord_server.cdn_downloads) == 1
    assert stored_user_texts(stores) == [f"[photo] {CAT}"]
    assert not leaked(engines.stored_bytes(stores), image, IMAGE_CANARY)


async def test_an_image_attachment_without_vision_is_not_fetched_and_the_person_is_told(
    start: Start, discord_server: FakeDiscordServer, model: FakeOpenAIServer
) -> None:
    await start(vision=False)
    files = [("cat.png", png_with(), "image/png")]
    reply = await answer(discord_server, lambda: discord_server.send_dm_media(FRIEND, "", files=files))
    assert reply == copy.IMAGE_NOT_READ_ALONE
    assert model.requests == [] and discord_server.cdn_downloads == []


async def test_a_voice_message_is_transcribed_and_the_transcript_is_the_message(
    start: Start, discord_server: FakeDiscordServer, model: FakeOpenAIServer, stores: Stores
) -> None:
    await start(stt=True)
    audio = ogg_with()
    model.transcripts.append("how long do I boil an egg")
    model.reply_text("About seven minutes.")
    assert await answer(discord_server, lambda: discord_server.send_dm_media(FRIEND, voice=audio)) == (
        "About seven minutes."
    )
    (sent,) = model.transcriptions
    assert (sent["data"], sent["filename"], sent["model"]) == (audio, "voice-message.ogg", "whisper-test")
    assert newest_user_content(model.requests[-1]) == "[voice] how long do I boil an egg"
    assert stored_user_texts(stores) == ["[voice] how long do I boil an egg"]
    assert not leaked(engines.stored_bytes(stores), audio, AUDIO_CANARY)


async def test_an_audio_file_is_transcribed_like_a_voice_message(
    start: Start, discord_server: FakeDiscordServer, model: FakeOpenAIServer
) -> None:
    await start(stt=True)
    model.transcripts.append("a song I wrote")
    files = [("song.mp3", b"ID3" + AUDIO_CANARY, "audio/mpeg")]
    await answer(discord_server, lambda: discord_server.send_dm_media(FRIEND, "listen", files=files))
    assert newest_user_content(model.requests[-1]) == "[audio] listen\na song I wrote"


async def test_without_speech_to_text_a_voice_message_gets_the_constant_reply(
    start: Start, discord_server: FakeDiscordServer, model: FakeOpenAIServer, stores: Stores
) -> None:
    await start(stt=False)
    reply = await answer(discord_server, lambda: discord_server.send_dm_media(FRIEND, voice=ogg_with()))
    assert reply == copy.VOICE_NOT_SET_UP
    assert model.requests == [] and discord_server.cdn_downloads == []
    assert stored_user_texts(stores) == ["[voice]"]


@pytest.mark.parametrize(
    ("kind", "files", "stickers"),
    [
        ("document", [("notes.pdf", b"%PDF-1.7", "application/pdf")], 0),
        ("document", [("data.bin", b"\x00\x01", None)], 0),  # no content type: a file
        ("video", [("clip.mp4", b"\x00\x00\x00\x18ftypmp42", "video/mp4")], 0),
        ("sticker", [], 1),
    ],
)
async def test_every_other_kind_gets_a_short_honest_reply_and_only_its_marker_is_stored(
    start: Start,
    discord_server: FakeDiscordServer,
    model: FakeOpenAIServer,
    stores: Stores,
    kind: str,
    files: list,
    stickers: int,
) -> None:
    await start()
    reply = await answer(discord_server, lambda: discord_server.send_dm_media(FRIEND, files=files, stickers=stickers))
    assert reply == copy.MEDIA_NOT_READ[kind].format(also="")
    assert model.requests == [] and discord_server.cdn_downloads == []
    assert stored_user_texts(stores) == [f"[{kind}]"]


async def test_in_a_guild_an_image_is_answered_when_the_message_mentions_the_bot(
    start: Start, discord_server: FakeDiscordServer, model: FakeOpenAIServer
) -> None:
    await start(vision=True)
    image = png_with()
    model.reply_text("Cute!")
    files = [("cat.png", image, "image/png")]
    assert await answer(discord_server, lambda: discord_server.send_guild_media(FRIEND, CAT, files=files)) == "Cute!"
    assert model.images == [("image/png", image)]


async def test_several_attachments_are_each_marked_and_every_image_is_sent(
    start: Start, discord_server: FakeDiscordServer, model: FakeOpenAIServer
) -> None:
    await start(vision=True)
    first, second = png_with(b"first-image"), png_with(b"second-image")
    files = [("a.png", first, "image/png"), ("b.png", second, "image/png"), ("c.pdf", b"%PDF", "application/pdf")]
    reply = await answer(discord_server, lambda: discord_server.send_dm_media(FRIEND, "both of us", files=files))
    assert reply.startswith(copy.MEDIA_NOT_READ["document"].format(also=" and photos"))
    content = newest_user_content(model.requests[-1])
    assert content[0] == {"type": "text", "text": "[photo] [photo] [document] both of us"}
    assert model.images == [("image/png", first), ("image/png", second)]


async def test_a_private_voice_transcript_never_reaches_a_later_normal_request(
    start: Start, discord_server: FakeDiscordServer, model: FakeOpenAIServer
) -> None:
    await start(stt=True)
    secret = "transcript-canary-77e0 what I told no one"
    assert (await answer(discord_server, lambda: discord_server.send_dm(FRIEND, f"/private {PASSPHRASE}"))).startswith(
        "Private mode is on"
    )
    model.transcripts.append(secret)
    await answer(discord_server, lambda: discord_server.send_dm_media(FRIEND, voice=ogg_with()))
    assert secret in model.raw_requests[-1].decode()
    await answer(discord_server, lambda: discord_server.send_dm(FRIEND, "/normal"))
    first_normal = len(model.raw_requests)
    await answer(discord_server, lambda: discord_server.send_dm(FRIEND, "where were we?"))
    assert len(model.raw_requests) == first_normal + 1
    assert secret.encode() not in model.raw_requests[-1]


async def test_an_attachment_over_20_mb_is_refused_with_the_reason_without_fetching_it(
    start: Start, discord_server: FakeDiscordServer, model: FakeOpenAIServer
) -> None:
    await start(vision=True)
    files = [("huge.png", b"\x89PNG" + b"\x00" * (20 * 1024 * 1024), "image/png")]
    reply = await answer(discord_server, lambda: discord_server.send_dm_media(FRIEND, "", files=files))
    assert reply == copy.MEDIA_TOO_LARGE
    assert discord_server.cdn_downloads == [] and model.requests == []


async def test_the_fake_cdn_serves_an_attachment_only_at_its_signed_url(discord_server: FakeDiscordServer) -> None:
    import aiohttp

    url = discord_server.attachment(discord_server.guild_channel_id, "a.png", b"bytes", "image/png")["url"]
    async with aiohttp.ClientSession() as session:
        async with session.get(url) as signed:
            assert (signed.status, await signed.read()) == (200, b"bytes")
        async with session.get(url.split("?")[0]) as unsigned:
            assert unsigned.status == 404
