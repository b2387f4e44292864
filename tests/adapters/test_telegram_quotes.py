"""Quotes, forwards, speakers, edits and bursts on Telegram (issue 15), on the wire: the real
python-telegram-bot Application and core against the fake Bot API and model servers."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from adapters.llm.openai_compat import OpenAICompatibleProvider
from adapters.storage.stores import Stores
from bot.bootstrap import build_companion, core_entry
from core.delivery.outbox import Outbox
from core.ports.clock import SystemClock
from core.privacy.secrets import hash_passphrase
from core.turn.companion import Companion
from core.turn.config import CompanionConfig
from core.values import copy
from tests.helpers import engines
from tests.helpers.adapters import AttachedPlatform, telegram_adapter
from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.fake_telegram import FakeTelegramServer

USER, OTHER, GROUP = 111, 333, -100500
BOT = "companion_test_bot"
CANARY = "CANARY-quote-0b7d2"


class ReleasedSleep:
    """The burst window's sleep: waits until the test releases it (no test waits on the clock)."""

    def __init__(self) -> None:
        self._released = asyncio.Event()

    async def __call__(self, seconds: float) -> None:
        await self._released.wait()

    def release(self) -> None:
        self._released.set()


@pytest.fixture
async def telegram() -> AsyncIterator[FakeTelegramServer]:
    async with FakeTelegramServer(username=BOT) as server:
        yield server


@pytest.fixture
def window() -> ReleasedSleep:
    return ReleasedSleep()


Start = Callable[..., Awaitable[Companion]]


@pytest.fixture
async def start(
    telegram: FakeTelegramServer, model: FakeOpenAIServer, stores: Stores, window: ReleasedSleep
) -> AsyncIterator[Start]:
    """A companion and its Telegram adapter on the fake servers (`burst_seconds` 0 unless given)."""
    opened: list[tuple[AttachedPlatform, Companion, OpenAICompatibleProvider]] = []

    async def make(burst_seconds: float = 0.0) -> Companion:
        provider = OpenAICompatibleProvider(model.base_url, "sk-test", "test-model", timeout=5.0)
        companion = build_companion(
            stores,
            provider,
            CompanionConfig(
                allowed_accounts=frozenset({f"telegram:{USER}", f"telegram:{OTHER}"}),
                passphrase_hash=hash_passphrase("sesame"),
                burst_seconds=burst_seconds,
            ),
            outbox=Outbox(stores.outbox, SystemClock()),
            burst_sleep=window,
        )
        await companion.start()
        adapter = telegram_adapter(telegram, core_entry(companion))
        await adapter.start()
        opened.append((adapter, companion, provider))
        return companion

    yield make
    for adapter, companion, provider in opened:
        await adapter.aclose()
        await companion.drain()
        await provider.aclose()


async def say(telegram: FakeTelegramServer, text: str, *, chat: int = USER, user: int = USER, **kwargs) -> int:
    """Send `text` as a user, wait for the one reply it gets; returns the user's message id."""
    before = len(telegram.sent)
    message_id = telegram.send_text(chat, user, text, chat_type="private" if chat > 0 else "supergroup", **kwargs)
    await telegram.wait_for_sent(before + 1)
    return message_id


def user_texts(request: dict) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "user"]


async def rows(stores: Stores, sql: str) -> list[tuple]:
    return [tuple(r) for r in await engines.rows(stores, sql)]


async def test_a_normal_mode_reply_quoting_a_private_message_sends_no_canary_to_the_model(
    start: Start, telegram: FakeTelegramServer, model: FakeOpenAIServer
) -> None:
    await start()
    await say(telegram, "hello")
    await say(telegram, "/private sesame")
    private_id = await say(telegram, f"my secret is {CANARY}")
    private_reply = telegram.sent[-1].message_id
    await say(telegram, "/normal")
    assert any(CANARY in raw.decode() for raw in model.raw_requests)  # private mode did read it
    before = len(model.raw_requests)

    model.reply_text("I can't see that one.")
    await say(telegram, "what did I say here?", reply_to=private_id, quote=CANARY)
    # The bot's own private reply, quoted: Telegram sends its words along; none may pass either.
    await say(telegram, "and what did you say?", reply_to=private_reply)
    after = model.raw_requests[before:]
    assert len(after) == 2
    assert all(CANARY not in raw.decode() for raw in after)
    first, second = (user_texts(json.loads(raw))[-1] for raw in after)
    assert first == copy.QUOTE_LINE.format(text=copy.PLACEHOLDER) + "\nwhat did I say here?"
    assert second == copy.QUOTE_WITHHELD_LINE + "\nand what did you say?"


async def test_quotes_of_normal_messages_and_forwards_reach_the_model_named(
    start: Start, telegram: FakeTelegramServer, model: FakeOpenAIServer
) -> None:
    await start()
    model.reply_text("Porto has a famous bridge, the Dom Luís I.")
    first = await say(telegram, "tell me about Porto")
    bot_reply = telegram.sent[-1].message_id
    await say(telegram, "why?", reply_to=first)
    assert user_texts(model.requests[-1])[-1] == "(replying to: tell me about Porto)\nwhy?"
    await say(telegram, "who built it?", reply_to=bot_reply, quote="the Dom Luís I")
    assert user_texts(model.requests[-1])[-1] == "(replying to: the Dom Luís I)\nwho built it?"

    origins = [
        ({"type": "user", "date": 1, "sender_user": {"id": 5, "is_bot": False, "first_name": "Bob", "last_name": "Ray"}}, "Bob Ray"),
        ({"type": "hidden_user", "date": 1, "sender_user_name": "Hidden Hal"}, "Hidden Hal"),
        ({"type": "channel", "date": 1, "chat": {"id": -1007, "type": "channel", "title": "News"}, "message_id": 9}, "News"),
        ({"type": "chat", "date": 1, "sender_chat": {"id": -1008, "type": "supergroup", "title": "Club"}, "author_signature": "Ann"}, "Club (Ann)"),
    ]  # fmt: skip
    for origin, name in origins:
        await say(telegram, "look at this", forward_origin=origin)
        assert user_texts(model.requests[-1])[-1] == f"(forwarded from {name})\nlook at this"


async def test_in_a_group_the_model_reads_each_speakers_name_in_the_history_too(
    start: Start, telegram: FakeTelegramServer, model: FakeOpenAIServer
) -> None:
    await start()
    await say(telegram, f"@{BOT} hi, I'm new", chat=GROUP, user=USER, first_name="Ann")
    await say(telegram, f"@{BOT} and I'm Bea", chat=GROUP, user=OTHER, first_name="Bea")
    assert user_texts(model.requests[-1]) == ["Ann: hi, I'm new", "Bea: and I'm Bea"]
    model.reply_text("Welcome, both.")
    await say(telegram, "thanks!", chat=GROUP, user=OTHER, first_name="Bea", reply_to_bot=True)
    assert user_texts(model.requests[-1])[-1] == "Bea: (replying to: fake reply #2)\nthanks!"


async def test_an_edit_of_the_newest_message_is_answered_once_as_a_correction(
    start: Start, telegram: FakeTelegramServer, model: FakeOpenAIServer, stores: Stores
) -> None:
    await start()
    model.reply_text("Noted: Tuesday.")
    first = await say(telegram, "dinner on Tuesday")
    second = await say(telegram, "at seven")
    model.reply_text("Noted: eight, then.")
    before = len(telegram.sent)
    telegram.edit_text(USER, second, "at eight")
    await telegram.wait_for_sent(before + 1)
    assert telegram.sent[-1].text == "Noted: eight, then."
    assert model.requests[-1]["messages"][-1]["content"] == copy.EDIT_CORRECTION
    assert user_texts(model.requests[-1])[-2:] == ["dinner on Tuesday", "at eight"]
    # An edit of an older message only changes what is stored: the next turn shows nothing else was sent.
    telegram.edit_text(USER, first, "dinner on Wednesday")
    await say(telegram, "/mode")
    assert len(telegram.sent) == before + 2 and len(model.requests) == 3
    assert await rows(stores, "SELECT text FROM messages WHERE role = 'user' AND kind = 'chat' ORDER BY id") == [
        ("dinner on Wednesday",),
        ("at eight",),
    ]


async def test_a_burst_of_five_messages_is_one_model_call_and_one_reply_with_five_stored(
    start: Start, telegram: FakeTelegramServer, model: FakeOpenAIServer, stores: Stores, window: ReleasedSleep
) -> None:
    await start(burst_seconds=1.5)
    words = ["hey", "so", "I got the job", "starting Monday", "what should I bring?"]
    model.reply_text("Congratulations! Bring a notebook.")
    for text in words:
        telegram.send_text(USER, USER, text)
    # Every message is stored (and its update confirmed) before the burst is answered.
    await telegram.wait_for(lambda: telegram.pending_updates == 0 and len(telegram.calls_of("getUpdates")) > 1)
    deadline = asyncio.get_running_loop().time() + 10
    while await rows(stores, "SELECT count(*) FROM messages WHERE role = 'user'") != [(5,)]:
        assert asyncio.get_running_loop().time() < deadline, "five messages were not stored"
        await asyncio.sleep(0.02)
    assert model.requests == [] and telegram.sent == []
    window.release()
    await telegram.wait_for_sent(1)
    assert [m.text for m in telegram.sent] == ["Congratulations! Bring a notebook."]
    assert len(model.requests) == 1 and user_texts(model.requests[0]) == words
    assert await rows(stores, "SELECT text, turn FROM messages WHERE role = 'user' ORDER BY id") == [
        (text, "done") for text in words
    ]
    # No second reply comes: a later turn's answer is the next thing sent.
    await say(telegram, "/mode")
    assert len(telegram.sent) == 2 and len(model.requests) == 1


async def test_an_edited_caption_replaces_the_stored_caption_and_is_answered_as_a_correction(
    start: Start, telegram: FakeTelegramServer, model: FakeOpenAIServer, stores: Stores
) -> None:
    await start()
    model.reply_text("A fine cat, Tom.")
    before = len(telegram.sent)
    photo = telegram.send_photo(USER, USER, b"\xff\xd8 not read without vision", caption="my cat Tom")
    await telegram.wait_for_sent(before + 1)
    model.reply_text("A fine cat, Tim.")
    telegram.edit_caption(USER, photo, "my cat Tim")
    await telegram.wait_for_sent(before + 2)
    assert telegram.sent[-1].text == "A fine cat, Tim."
    assert model.requests[-1]["messages"][-1]["content"] == copy.EDIT_CORRECTION
    assert user_texts(model.requests[-1])[-1] == "[photo] my cat Tim"
    assert await rows(stores, "SELECT text FROM messages WHERE role = 'user' AND kind = 'chat'") == [
        ("[photo] my cat Tim",)
    ]
