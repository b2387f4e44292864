"""Telegram media through the real python-telegram-bot and core, against the fake Bot API (getFile, file
downloads) and the fake model server (image input, /audio/transcriptions): every kind gets an answer,
captions and transcripts are the text, and the media's bytes never reach the database files."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from adapters.llm.openai_compat import OpenAICompatibleProvider
from adapters.llm.transcribe import OpenAICompatibleTranscriber
from adapters.storage.stores import Stores
from bot.bootstrap import build_companion, core_entry
from core.delivery.outbox import Outbox
from core.ports.clock import SystemClock
from core.turn.config import CompanionConfig
from core.values import copy
from tests.conftest import PASSPHRASE
from tests.helpers import engines
from tests.helpers.adapters import AttachedPlatform, telegram_adapter
from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.fake_telegram import FakeTelegramServer
from tests.helpers.media import AUDIO_CANARY, IMAGE_CANARY, jpeg_with, leaked, ogg_with

USER, GROUP = 111, -100500
BOT = "companion_test_bot"
CAT = "what do you think of my cat?"


@pytest.fixture
async def telegram() -> AsyncIterator[FakeTelegramServer]:
    async with FakeTelegramServer(username=BOT) as server:
        yield server


@pytest.fixture
async def model() -> AsyncIterator[FakeOpenAIServer]:
    # Strict as llama.cpp: a text-only message whose content is not a string is refused.
    async with FakeOpenAIServer(strict=True) as server:
        yield server


Start = Callable[..., Awaitable[AttachedPlatform]]


@pytest.fixture
async def start(
    telegram: FakeTelegramServer, model: FakeOpenAIServer, stores: Stores, passphrase_hash: str
) -> AsyncIterator[Start]:
    """Start the companion and its Telegram adapter, with vision and speech to text as asked."""
    closers: list[Callable[[], Awaitable[None]]] = []

    async def make(*, vision: bool = False, stt: bool = False) -> AttachedPlatform:
        provider = OpenAICompatibleProvider(model.base_url, "sk-test", "test-model", timeout=5.0)
        transcriber = (
            OpenAICompatibleTranscriber(model.base_url, "sk-stt", "whisper-test", timeout=5.0) if stt else None
        )
        companion = build_companion(
            stores,
            provider,
            CompanionConfig(
                allowed_accounts=frozenset({f"telegram:{USER}"}), passphrase_hash=passphrase_hash, vision=vision
            ),
            outbox=Outbox(stores.outbox, SystemClock()),
            transcriber=transcriber,
        )
        await companion.start()
        adapter = telegram_adapter(telegram, core_entry(companion))
        await adapter.start()
        closers.extend([provider.aclose, companion.drain, adapter.aclose])
        if transcriber is not None:
            closers.append(transcriber.aclose)
        return adapter

    yield make
    for close in reversed(closers):
        await close()


async def answer(telegram: FakeTelegramServer, send: Callable[[], int], chat: int = USER) -> str:
    """Do `send` (a user's message) and return the text of the one reply it gets."""
    before = len(telegram.texts_to(chat))
    send()
    await telegram.wait_for(lambda: len(telegram.texts_to(chat)) > before)
    return telegram.texts_to(chat)[before]


async def say(telegram: FakeTelegramServer, text: str) -> str:
    return await answer(telegram, lambda: telegram.send_text(USER, USER, text))


def stored_user_texts(stores: Stores) -> list[str]:
    with sqlite3.connect(engines.sqlite_file(stores)) as db:
        return [row[0] for row in db.execute("SELECT text FROM messages WHERE role = 'user' ORDER BY id")]


def newest_user_content(request: dict) -> object:
    return [m for m in request["messages"] if m["role"] == "user"][-1]["content"]


# --- photos -------------------------------------------------------------------------


async def test_a_photo_caption_is_the_text_marked_photo_and_the_image_reaches_a_vision_model(
    start: Start, telegram: FakeTelegramServer, model: FakeOpenAIServer, stores: Stores
) -> None:
    await start(vision=True)
    photo = jpeg_with()
    model.reply_text("What a handsome cat!")
    assert await answer(telegram, lambda: telegram.send_photo(USER, USER, photo, caption=CAT)) == "What a handsome cat!"

    content = newest_user_content(model.requests[-1])
    assert isinstance(content, list)
    assert content[0] == {"type": "text", "text": f"[photo] {CAT}"}
    assert content[1]["type"] == "image_url" and content[1]["image_url"]["url"].startswith("data:image/jpeg;base64,")
    assert model.images == [("image/jpeg", photo)]  # the full size, not the thumbnail, byte for byte
    assert stored_user_texts(stores) == [f"[photo] {CAT}"]
    assert not leaked(engines.stored_bytes(stores), photo, IMAGE_CANARY)


async def test_without_vision_the_caption_is_answered_and_the_person_is_told_images_are_not_read(
    start: Start, telegram: FakeTelegramServer, model: FakeOpenAIServer, stores: Stores
) -> None:
    await start(vision=False)
    model.reply_text("Tell me about your cat!")
    reply = await answer(telegram, lambda: telegram.send_photo(USER, USER, jpeg_with(), caption=CAT))
    assert reply == f"{copy.IMAGES_NOT_READ}\n\nTell me about your cat!"
    assert newest_user_content(model.requests[-1]) == f"[photo] {CAT}"  # a string: no image part
    assert telegram.downloads == []  # nothing the model cannot read is fetched
    assert stored_user_texts(stores) == [f"[photo] {CAT}"]


async def test_a_photo_without_a_caption_and_without_vision_gets_the_constant_line_and_no_model_call(
    start: Start, telegram: FakeTelegramServer, model: FakeOpenAIServer, stores: Stores
) -> None:
    await start(vision=False)
    assert await answer(telegram, lambda: telegram.send_photo(USER, USER, jpeg_with())) == copy.IMAGE_NOT_READ_ALONE
    assert model.requests == []
    assert stored_user_texts(stores) == ["[photo]"]


async def test_a_photo_over_20_mb_is_refused_with_the_reason_without_fetching_it(
    start: Start, telegram: FakeTelegramServer, model: FakeOpenAIServer
) -> None:
    await start(vision=True)
    huge = {"file_id": "AgACbig", "file_unique_id": "AQADbig", "width": 1280, "height": 960}
    sizes = [{**huge, "file_size": 21 * 1024 * 1024}]
    reply = await answer(telegram, lambda: telegram.send_media(USER, USER, {"photo": sizes}, caption=CAT))
    assert reply.startswith(copy.MEDIA_TOO_LARGE)
    assert telegram.calls_of("getFile") == [] and telegram.downloads == []
    assert all(not isinstance(newest_user_content(r), list) for r in model.requests)


async def test_an_image_sent_as_a_file_is_read_as_a_photo(
    start: Start, telegram: FakeTelegramServer, model: FakeOpenAIServer
) -> None:
    await start(vision=True)
    image = jpeg_with()
    document = {**telegram.add_file(image, "document"), "file_name": "cat.jpg", "mime_type": "image/jpeg"}
    await answer(telegram, lambda: telegram.send_media(USER, USER, {"document": document}, caption=CAT))
    assert model.images == [("image/jpeg", image)]


# --- voice ---------------------------------------------------------------------------


async def test_a_voice_note_is_transcribed_and_the_transcript_is_the_message(
    start: Start, telegram: FakeTelegramServer, model: FakeOpenAIServer, stores: Stores
) -> None:
    await start(stt=True)
    audio = ogg_with()
    model.transcripts.append("remind me to water the plants")
    model.reply_text("I will!")
    assert await answer(telegram, lambda: telegram.send_voice(USER, USER, audio)) == "I will!"

    (sent,) = model.transcriptions
    assert (sent["model"], sent["data"], sent["content_type"]) == ("whisper-test", audio, "audio/ogg")
    assert newest_user_content(model.requests[-1]) == "[voice] remind me to water the plants"
    assert stored_user_texts(stores) == ["[voice] remind me to water the plants"]
    assert not leaked(engines.stored_bytes(stores), audio, AUDIO_CANARY)


async def test_without_speech_to_text_a_voice_note_gets_the_constant_reply_and_no_model_call(
    start: Start, telegram: FakeTelegramServer, model: FakeOpenAIServer, stores: Stores
) -> None:
    await start(stt=False)
    assert await answer(telegram, lambda: telegram.send_voice(USER, USER, ogg_with())) == copy.VOICE_NOT_SET_UP
    assert model.requests == [] and telegram.downloads == []
    assert stored_user_texts(stores) == ["[voice]"]


async def test_a_failed_transcription_says_so_and_keeps_only_the_marker(
    start: Start, telegram: FakeTelegramServer, model: FakeOpenAIServer, stores: Stores
) -> None:
    from tests.helpers.fake_openai import ScriptedResponse

    await start(stt=True)
    model.transcripts.append(ScriptedResponse(status=400, body={"error": {"message": "bad audio"}}))
    assert await answer(telegram, lambda: telegram.send_voice(USER, USER, ogg_with())) == copy.VOICE_FAILED
    assert model.requests == []
    assert stored_user_texts(stores) == ["[voice]"]


# --- what it does not read --------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "fields"),
    [
        (
            "sticker",
            {
                "sticker": {
                    "type": "regular",
                    "width": 512,
                    "height": 512,
                    "is_animated": False,
                    "is_video": False,
                    "emoji": "🐱",
                }
            },
        ),
        ("document", {"document": {"file_name": "cv.pdf", "mime_type": "application/pdf"}}),
        ("location", {"location": {"latitude": 52.52, "longitude": 13.405}}),
        ("video_note", {"video_note": {"length": 240, "duration": 4}}),
        ("video", {"video": {"width": 640, "height": 360, "duration": 4, "mime_type": "video/mp4"}}),
        ("audio", {"audio": {"duration": 30, "mime_type": "audio/mpeg", "file_name": "song.mp3"}}),
        # A GIF comes as both `animation` and `document`, as Telegram sends it.
        (
            "animation",
            {
                "animation": {"width": 320, "height": 240, "duration": 2, "mime_type": "video/mp4"},
                "document": {"file_name": "cat.gif.mp4", "mime_type": "video/mp4"},
            },
        ),
        # A venue comes with its `location` too.
        (
            "location",
            {
                "venue": {"location": {"latitude": 52.5, "longitude": 13.4}, "title": "Cafe", "address": "Main St 1"},
                "location": {"latitude": 52.5, "longitude": 13.4},
            },
        ),
        ("contact", {"contact": {"phone_number": "+4930123456", "first_name": "Ann"}}),
        (
            "poll",
            {
                "poll": {
                    "id": "5",
                    "question": "Pizza?",
                    "options": [
                        {"persistent_id": "a1", "text": "yes", "voter_count": 0},
                        {"persistent_id": "a2", "text": "no", "voter_count": 0},
                    ],
                    "total_voter_count": 0,
                    "is_closed": False,
                    "is_anonymous": True,
                    "type": "regular",
                    "allows_multiple_answers": False,
                    "allows_revoting": False,
                    "members_only": False,
                }
            },
        ),
    ],
)
async def test_every_other_kind_gets_a_short_honest_reply_and_only_its_marker_is_stored(
    start: Start,
    telegram: FakeTelegramServer,
    model: FakeOpenAIServer,
    stores: Stores,
    kind: str,
    fields: dict,
) -> None:
    await start()
    payload = {name: {**value} for name, value in fields.items()}
    for name, value in payload.items():
        if name in ("sticker", "document", "video_note", "video", "audio", "animation"):
            value.update(telegram.add_file(b"\x00media-bytes" + kind.encode(), kind))
    reply = await answer(telegram, lambda: telegram.send_media(USER, USER, payload))
    expected = copy.VOICE_NOT_SET_UP if kind == "audio" else copy.MEDIA_NOT_READ[kind].format(also="")
    assert reply == expected
    assert model.requests == [] and telegram.downloads == []
    assert stored_user_texts(stores) == [f"[{kind}]"]


async def test_a_caption_beside_a_kind_it_cannot_read_is_still_answered(
    start: Start, telegram: FakeTelegramServer, model: FakeOpenAIServer
) -> None:
    await start()
    document = {**telegram.add_file(b"%PDF-1.7", "document"), "file_name": "cv.pdf", "mime_type": "application/pdf"}
    model.reply_text("Good luck with the application!")
    reply = await answer(telegram, lambda: telegram.send_media(USER, USER, {"document": document}, caption="my new CV"))
    assert reply == f"{copy.MEDIA_NOT_READ['document'].format(also='')}\n\nGood luck with the application!"
    assert newest_user_content(model.requests[-1]) == "[document] my new CV"


async def test_in_a_group_a_photo_is_answered_only_when_its_caption_mentions_the_bot(
    start: Start, telegram: FakeTelegramServer, model: FakeOpenAIServer
) -> None:
    await start(vision=True)
    photo = jpeg_with()
    telegram.send_media(
        GROUP,
        USER,
        {"photo": [{**telegram.add_file(photo, "photo"), "width": 64, "height": 48}]},
        caption="look at this",
        chat_type="supergroup",
    )
    model.reply_text("Nice picture.")
    reply = await answer(
        telegram,
        lambda: telegram.send_media(
            GROUP,
            USER,
            {"photo": [{**telegram.add_file(photo, "photo"), "width": 64, "height": 48}]},
            caption=f"@{BOT} {CAT}",
            chat_type="supergroup",
        ),
        chat=GROUP,
    )
    assert reply == "Nice picture."
    assert len(model.requests) == 1  # the first photo, not addressed to the bot, was not answered
    # In a group each line is headed with its speaker (core/turn/quotes.py).
    assert newest_user_content(model.requests[0])[0] == {"type": "text", "text": f"User111: [photo] {CAT}"}


# --- privacy ------------------------------------------------------------------------------


async def test_a_private_voice_transcript_is_masked_in_a_later_normal_turn(
    start: Start, telegram: FakeTelegramServer, model: FakeOpenAIServer, stores: Stores
) -> None:
    await start(stt=True)
    secret = "transcript-canary-51c2 my sister's diagnosis"
    assert (await say(telegram, f"/private {PASSPHRASE}")).startswith("Private mode is on")
    model.transcripts.append(secret)
    await answer(telegram, lambda: telegram.send_voice(USER, USER, ogg_with()))
    assert secret in model.raw_requests[-1].decode()  # the wire check can see it at all
    assert await say(telegram, "/normal") == copy.TRANSITION_FALLBACK
    first_normal = len(model.raw_requests)
    await say(telegram, "what were we talking about?")
    normal = model.raw_requests[first_normal:]
    assert len(normal) == 1
    assert secret.encode() not in normal[0]
    assert copy.PLACEHOLDER in json.dumps(json.loads(normal[0]))


async def test_media_bytes_never_reach_the_database_files_in_either_mode(
    start: Start, telegram: FakeTelegramServer, model: FakeOpenAIServer, stores: Stores
) -> None:
    await start(vision=True, stt=True)
    photo, audio = jpeg_with(), ogg_with()
    await answer(telegram, lambda: telegram.send_photo(USER, USER, photo, caption=CAT))
    await answer(telegram, lambda: telegram.send_voice(USER, USER, audio))
    assert (await say(telegram, f"/private {PASSPHRASE}")).startswith("Private mode is on")
    await answer(telegram, lambda: telegram.send_photo(USER, USER, photo, caption="and in private"))
    await answer(telegram, lambda: telegram.send_voice(USER, USER, audio))
    assert (await say(telegram, "/mode")).startswith("You are in private mode")

    assert [mime for mime, _ in model.images] == ["image/jpeg", "image/jpeg"]  # both reached the model
    assert [t["data"] for t in model.transcriptions] == [audio, audio]
    files = engines.stored_bytes(stores)
    assert not leaked(files, photo, IMAGE_CANARY)
    assert not leaked(files, audio, AUDIO_CANARY)
    with sqlite3.connect(engines.sqlite_file(stores)) as db:
        rows = " ".join(
            str(row)
            for table in ("messages", "agent_runs", "agent_events", "deliveries")
            for row in db.execute(f"SELECT * FROM {table}")
        )
    assert "base64" not in rows and IMAGE_CANARY.decode() not in rows


async def test_a_passphrase_in_a_photo_caption_is_a_command_never_stored_or_sent(
    start: Start, telegram: FakeTelegramServer, model: FakeOpenAIServer, stores: Stores
) -> None:
    await start(vision=True)
    message = telegram.send_photo(USER, USER, jpeg_with(), caption=f"/private {PASSPHRASE}")
    await telegram.wait_for(lambda: bool(telegram.texts_to(USER)))
    assert telegram.texts_to(USER)[0].startswith("Private mode is on")
    assert (USER, message) in telegram.deleted
    assert model.requests == []
    assert all(PASSPHRASE not in text for text in stored_user_texts(stores))


async def test_a_photo_getfile_refuses_as_too_big_is_answered_with_the_reason(
    start: Start, telegram: FakeTelegramServer, model: FakeOpenAIServer
) -> None:
    await start(vision=True)
    big = telegram.add_file(b"\xff" * (20 * 1024 * 1024 + 1), "photo")
    del big["file_size"]  # optional in a PhotoSize: only getFile finds out
    reply = await answer(
        telegram, lambda: telegram.send_media(USER, USER, {"photo": [{**big, "width": 1280, "height": 960}]})
    )
    assert reply == copy.MEDIA_TOO_LARGE
    assert len(telegram.calls_of("getFile")) == 1 and telegram.downloads == []
    assert model.requests == []


async def test_neither_captions_transcripts_nor_media_bytes_nor_the_token_reach_the_logs(
    start: Start, telegram: FakeTelegramServer, model: FakeOpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    from tests.helpers.logs import logging_policy

    caplog.set_level(logging.DEBUG)
    caption, spoken = "caption-canary-0d4e", "spoken-canary-a9b3"
    with logging_policy("DEBUG"):  # COMPANION_LOG_LEVEL=DEBUG
        logging.getLogger("httpx").setLevel(logging.DEBUG)  # request URLs logged: the token must be redacted
        await start(vision=True, stt=True)
        await answer(telegram, lambda: telegram.send_photo(USER, USER, jpeg_with(), caption=caption))
        model.transcripts.append(spoken)
        await answer(telegram, lambda: telegram.send_voice(USER, USER, ogg_with()))
    lines = "\n".join(r.getMessage() for r in caplog.records if not r.name.startswith("aiosqlite"))
    assert "/file/bot<token>/" in lines  # the downloads were logged, with the token redacted
    assert "media: photo" in lines and "media: voice" in lines  # kinds and sizes are
    token = telegram.token.split(":")[1]  # in any encoding of the token
    for secret in (caption, spoken, IMAGE_CANARY.decode(), AUDIO_CANARY.decode(), token):
        assert secret not in lines
