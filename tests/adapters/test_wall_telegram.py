"""The wall at the edges on Telegram (issue 22): edits, forwards, unknown commands and pending sends
never carry words typed in private mode past their interval. The real python-telegram-bot
Application and core against the fake Bot API and model servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from adapters.llm.openai_compat import OpenAICompatibleProvider
from adapters.storage.backup import backup
from adapters.storage.outbox import SqliteOutboxStore
from adapters.storage.sqlite import SqliteStore
from bot.bootstrap import build_companion, core_entry
from core.delivery.outbox import Outbox
from core.privacy.secrets import hash_passphrase
from core.turn.companion import Companion
from core.turn.config import CompanionConfig
from core.values import copy
from tests.helpers.adapters import AttachedPlatform, telegram_adapter
from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.fake_telegram import FakeTelegramServer
from tests.helpers.reader import files_holding
from tests.helpers.wall import ShiftedClock, last_delivery, left_of_the_interval, traces

USER = 111
BOT = "companion_test_bot"
CANARY = "wallcanary4e1b"  # one lowercase word: it can be a command's name, a search term, a caption


@pytest.fixture(scope="module")
def passphrase_hash() -> str:
    return hash_passphrase("sesame")


@pytest.fixture
async def telegram() -> AsyncIterator[FakeTelegramServer]:
    async with FakeTelegramServer(username=BOT) as server:
        yield server


@pytest.fixture
def clock() -> ShiftedClock:
    return ShiftedClock()


class Gateway:
    """A companion and its Telegram adapter on the fake servers, on `clock` (real time, movable);
    `start` again after `stop` is a restart on the same store."""

    def __init__(self, telegram, model, store, clock, passphrase_hash) -> None:
        self.telegram, self.model, self.store, self.clock = telegram, model, store, clock
        self.passphrase_hash = passphrase_hash
        self.running: list[tuple[AttachedPlatform, Companion, OpenAICompatibleProvider]] = []

    async def start(self, **config: Any) -> Companion:
        provider = OpenAICompatibleProvider(self.model.base_url, "sk-test", "test-model", timeout=5.0, max_retries=0)
        outbox = Outbox(SqliteOutboxStore(self.store.database), self.clock, base_delay=0.01, max_delay=0.01)
        companion = build_companion(
            self.store,
            provider,
            CompanionConfig(
                allowed_accounts=frozenset({f"telegram:{USER}"}), passphrase_hash=self.passphrase_hash, **config
            ),
            clock=self.clock,
            outbox=outbox,
        )
        await companion.start()
        adapter = telegram_adapter(self.telegram, core_entry(companion))
        await adapter.start()
        self.running.append((adapter, companion, provider))
        return companion

    async def stop(self) -> None:
        while self.running:
            adapter, companion, provider = self.running.pop()
            await adapter.aclose()
            await companion.drain()
            await provider.aclose()


@pytest.fixture
async def gateway(
    telegram: FakeTelegramServer, model: FakeOpenAIServer, store: SqliteStore, clock: ShiftedClock, passphrase_hash: str
) -> AsyncIterator[Gateway]:
    gateway = Gateway(telegram, model, store, clock, passphrase_hash)
    yield gateway
    await gateway.stop()


@pytest.fixture
async def start(gateway: Gateway) -> Callable[[], Awaitable[Companion]]:
    return gateway.start


Start = Callable[[], Awaitable[Companion]]


async def say(telegram: FakeTelegramServer, text: str, **kwargs) -> int:
    """Send `text` as the user and wait for the one reply it gets; returns the user's message id."""
    before = len(telegram.texts_to(USER))
    message_id = telegram.send_text(USER, USER, text, **kwargs)
    await telegram.wait_for(lambda: len(telegram.texts_to(USER)) > before)
    return message_id


def last_user_text(model: FakeOpenAIServer) -> str:
    return [m["content"] for m in model.requests[-1]["messages"] if m["role"] == "user"][-1]


# --- 1. an edit typed while private ----------------------------------------------------------------


async def test_an_edit_typed_while_private_never_reaches_the_normal_request_row_recall_or_a_recall_answer(
    start: Start, telegram: FakeTelegramServer, model: FakeOpenAIServer, store: SqliteStore
) -> None:
    await start()
    first = await say(telegram, "lunch on Friday with Ana")
    await say(telegram, "/private sesame")
    telegram.edit_text(USER, first, f"lunch on Friday with {CANARY}")
    await say(telegram, "/normal")  # one chat's updates run in order: the edit was handled before it
    await say(telegram, "who is lunch with on Friday?")
    assert CANARY not in model.raw_requests[-1].decode()
    assert "lunch on Friday with Ana" in model.raw_requests[-1].decode()
    await say(telegram, "/recall Friday")
    assert "Ana" in telegram.texts_to(USER)[-1] and CANARY not in telegram.texts_to(USER)[-1]
    found = await traces(store, CANARY)
    assert found.normal_rows == [] and found.recall == []


async def test_an_edit_made_after_a_restart_is_read_in_the_mode_of_its_own_moment(
    gateway: Gateway, telegram: FakeTelegramServer, store: SqliteStore
) -> None:
    await gateway.start()
    first = await say(telegram, "lunch on Friday")
    await say(telegram, "/private sesame")
    await gateway.stop()
    await gateway.start()  # the restart closes the interval; the message it edits is older still
    await asyncio.sleep(1.6)  # Telegram's dates are whole seconds: past the restart's margin
    telegram.edit_text(USER, first, "lunch on Saturday")  # made now, in normal mode
    await say(telegram, "/mode")
    rows = await store._all("SELECT text FROM messages WHERE platform_message_id = ?", (str(first),))
    assert [r[0] for r in rows] == ["lunch on Saturday"]


# --- 2. an unknown command typed while private, its answer pending ---------------------------------


@pytest.mark.parametrize("ending", ["forget private", "expiry"])
async def test_an_unknown_commands_pending_answer_typed_while_private_goes_with_its_interval(
    gateway: Gateway, telegram: FakeTelegramServer, store: SqliteStore, clock: ShiftedClock, tmp_path, ending: str
) -> None:
    companion = await gateway.start()
    await say(telegram, "/private sesame 1h")
    sends = len(telegram.calls_of("sendMessage"))
    telegram.fail_next("sendMessage", 502, times=5)  # every one of the adapter's own tries
    telegram.send_text(USER, USER, f"/diary_{CANARY} the day was long")
    await telegram.wait_for(lambda: len(telegram.calls_of("sendMessage")) >= sends + 5)
    await companion.outbox.settle(10)
    (segment,) = [r[0] for r in await store._all("SELECT id FROM segments WHERE ended_at IS NULL")]
    pending = await store._all("SELECT segment_id, status FROM deliveries WHERE text LIKE ?", (f"%{CANARY}%",))
    assert [tuple(r) for r in pending] == [(segment, "pending")]  # the answer is the interval's own
    # A backup taken now holds no private row, so not this one either.
    assert files_holding([backup(store.path, tmp_path / "backups", retention_days=14).path], CANARY.encode()) == []
    telegram.fail_next("sendMessage", 502, times=5)  # the platform is still down
    if ending == "forget private":
        telegram.send_text(USER, USER, "/forget private")
        await telegram.wait_for(lambda: len(telegram.calls_of("sendMessage")) >= sends + 10)
        await companion.outbox.settle(10)
    else:
        clock.advance(3601)
        await companion.sweep()
    assert not (await traces(store, CANARY)).anywhere
    assert await store._all("SELECT id FROM deliveries WHERE segment_id IS NOT NULL") == []
    files = [p for p in (store.path, store.path.with_name(store.path.name + "-wal")) if p.exists()]
    assert files_holding(files, CANARY.encode()) == []
    clock.advance(60)  # Telegram is back: what is still pending goes out, and none of it is the canary
    await companion.outbox.dispatch_due()
    assert all(CANARY not in m.text for m in telegram.sent)


# --- 4. a private answer left pending past its interval's expiry -----------------------------------


async def test_a_private_answer_left_pending_is_never_sent_after_its_interval_expired(
    gateway: Gateway, telegram: FakeTelegramServer, model: FakeOpenAIServer, store: SqliteStore, clock: ShiftedClock
) -> None:
    companion = await gateway.start()
    await say(telegram, "/private sesame 1m")
    sends = len(telegram.calls_of("sendMessage"))
    telegram.fail_next("sendMessage", 502, times=5)  # every one of the adapter's own tries
    model.reply_text(f"Between us: {CANARY}.")
    telegram.send_text(USER, USER, "how am I doing, really?")
    await telegram.wait_for(lambda: len(telegram.calls_of("sendMessage")) >= sends + 5)
    await companion.outbox.settle(10)
    (conversation, delivery) = tuple(
        (await store._all("SELECT conversation_id, id FROM deliveries WHERE status = 'pending'"))[0]
    )
    clock.advance(61)  # the interval expired a moment ago; the minute's sweep has not run yet
    await companion.outbox.dispatch_due()  # the scheduler's dispatch, Telegram back up
    await companion.outbox.deliver(conversation, delivery)  # and the lane sent directly
    assert all(CANARY not in m.text for m in telegram.sent)
    assert len(telegram.calls_of("sendMessage")) == sends + 5  # not even tried again
    await companion.sweep()
    assert not (await traces(store, CANARY)).anywhere


# --- 3. a mirror is never told a private interval existed ------------------------------------------

MIRROR_CHAT = -100777  # a Telegram group this DM is mirrored to


async def test_a_mirror_gets_only_the_words_typed_in_normal_mode_never_a_quote_of_a_private_message(
    gateway: Gateway, telegram: FakeTelegramServer, model: FakeOpenAIServer, store: SqliteStore
) -> None:
    await gateway.start()
    await say(telegram, f"/mirror telegram:{MIRROR_CHAT}")
    assert telegram.texts_to(USER)[-1].startswith("Mirror 1 is on")
    model.reply_text("Porto it is.")
    normal_id = await say(telegram, "let's go to Porto")
    await say(telegram, "/private sesame")
    private_id = await say(telegram, f"my secret is {CANARY}")
    await say(telegram, "/normal")
    model.reply_text("I can't see that one.")
    await say(telegram, "what did I say here?", reply_to=private_id, quote=CANARY)
    model.reply_text("Because of the bridges.")
    await say(telegram, "why Porto?", reply_to=normal_id)
    # The model read the placeholder for the private quote; the mirror reads the words typed.
    assert copy.QUOTE_LINE.format(text=copy.PLACEHOLDER) in model.raw_requests[-2].decode()
    model.reply_text("I won't read that here.")
    sent_at = telegram._messages[(USER, private_id)]["date"]
    own = {"type": "user", "date": sent_at, "sender_user": {"id": USER, "is_bot": False, "first_name": "Me"}}
    await say(telegram, f"my secret is {CANARY}", forward_origin=own)
    assert telegram.texts_to(USER)[-1].startswith(copy.FORWARD_NOT_READ)  # told in the DM only
    await telegram.wait_for(lambda: len(telegram.texts_to(MIRROR_CHAT)) >= 5)
    assert telegram.texts_to(MIRROR_CHAT) == [
        copy.MIRROR_HELLO.format(source="telegram DM"),
        "[telegram DM] you: let's go to Porto\ncompanion: Porto it is.",
        "[telegram DM] you: what did I say here?\ncompanion: I can't see that one.",
        "[telegram DM] you: why Porto?\ncompanion: Because of the bridges.",
        f"[telegram DM] you: {copy.FORWARD_UNREAD_SAID}\ncompanion: I won't read that here.",
    ]
    assert not (await traces(store, CANARY)).mirrors


# --- 5. a forward of a private message -------------------------------------------------------------


async def test_a_forward_of_a_private_message_is_the_placeholder_in_normal_mode_and_the_person_is_told_once(
    gateway: Gateway, telegram: FakeTelegramServer, model: FakeOpenAIServer, store: SqliteStore
) -> None:
    await gateway.start()
    await say(telegram, "/private sesame")
    private_id = await say(telegram, f"my secret is {CANARY}")
    bot_reply = telegram.sent[-1]
    await say(telegram, "/normal")
    sent_at = telegram._messages[(USER, private_id)]["date"]  # what Telegram puts in forward_origin
    own = {"type": "user", "date": sent_at, "sender_user": {"id": USER, "is_bot": False, "first_name": "Me"}}
    await say(telegram, f"my secret is {CANARY}", forward_origin=own)
    first = telegram.texts_to(USER)[-1]
    assert CANARY not in model.raw_requests[-1].decode()
    assert last_user_text(model) == f"{copy.FORWARD_LINE.format(name='Me')}\n{copy.PLACEHOLDER}"
    assert first.startswith(copy.FORWARD_NOT_READ)
    # The companion's own private answer, forwarded: the same, and the person is not told again.
    bots = {"type": "user", "date": sent_at, "sender_user": {"id": telegram.bot_id, "is_bot": True, "first_name": "C"}}
    await say(telegram, bot_reply.text, forward_origin=bots)
    assert last_user_text(model) == f"{copy.FORWARD_LINE.format(name='C')}\n{copy.PLACEHOLDER}"
    assert not telegram.texts_to(USER)[-1].startswith(copy.FORWARD_NOT_READ)
    # Someone else's message sent at that moment is no private interval's: it is read.
    others = {"type": "user", "date": sent_at, "sender_user": {"id": 5, "is_bot": False, "first_name": "Bob"}}
    await say(telegram, "the meeting moved to Friday", forward_origin=others)
    assert last_user_text(model) == "(forwarded from Bob)\nthe meeting moved to Friday"
    # The same message quoted gets the placeholder, as before.
    await say(telegram, "and this?", reply_to=private_id)
    assert CANARY not in model.raw_requests[-1].decode()
    found = await traces(store, CANARY)
    assert found.normal_rows == [] and found.recall == []


# --- every kind of inbound event: a canary typed while private leaves no trace ---------------------

KINDS = [
    "message",
    "edit",
    "forward",
    "quote",
    "media",
    "known command",
    "unknown command",
    "mistyped command",
    "button press",
    "caught-up message",
    "caught-up command",
]


async def type_while_private(kind: str, gateway: Gateway, telegram: FakeTelegramServer, first: int) -> None:
    """Do `kind` of event, carrying the canary, while the conversation is private."""
    if kind == "message":
        await say(telegram, f"note this: {CANARY}")
    elif kind == "edit":
        telegram.edit_text(USER, first, f"lunch on Friday with {CANARY}")
    elif kind == "forward":
        origin = {"type": "user", "date": 1, "sender_user": {"id": 5, "is_bot": False, "first_name": "Bob"}}
        await say(telegram, f"Bob says {CANARY}", forward_origin=origin)
    elif kind == "quote":
        await say(telegram, f"about {CANARY}", reply_to=first, quote="lunch on Friday")
    elif kind == "media":
        before = len(telegram.texts_to(USER))
        telegram.send_photo(USER, USER, b"\xff\xd8 a photo", caption=f"a photo of {CANARY}")
        await telegram.wait_for(lambda: len(telegram.texts_to(USER)) > before)
    elif kind == "known command":
        await say(telegram, f"/remember {CANARY}")
    elif kind == "unknown command":
        await say(telegram, f"/diary_{CANARY} today")
    elif kind == "mistyped command":
        await say(telegram, f"/privte {CANARY}")
    elif kind == "button press":
        await say(telegram, f"note this: {CANARY}")
        await say(telegram, "/export")
        asked = telegram.sent[-1]
        before = len(telegram.texts_to(USER))
        telegram.press_button(USER, USER, asked.message_id, "companion:/export confirm")
        await telegram.wait_for(lambda: len(telegram.texts_to(USER)) >= before + 2)  # the answer and its file
    elif kind in ("caught-up message", "caught-up command"):
        await gateway.stop()
        if kind == "caught-up command":
            telegram.send_text(USER, USER, f"/remember {CANARY}")
        else:
            telegram.send_text(USER, USER, f"sent while you were down: {CANARY}")
        await gateway.start(allow_private_export=True)  # the restart closes the interval it belongs to
        await telegram.wait_for(lambda: copy.RESTART_KEPT_PRIVATE in telegram.texts_to(USER))
        await asyncio.sleep(1.6)  # Telegram's dates are whole seconds: what follows is after the restart
    else:
        raise AssertionError(kind)


@pytest.mark.parametrize("kind", KINDS)
async def test_a_canary_typed_while_private_in_any_kind_of_event_leaves_no_trace_in_normal_mode(
    gateway: Gateway,
    telegram: FakeTelegramServer,
    model: FakeOpenAIServer,
    store: SqliteStore,
    kind: str,
) -> None:
    await gateway.start(allow_private_export=True)
    await say(telegram, f"/mirror telegram:{MIRROR_CHAT}")
    first = await say(telegram, "lunch on Friday with Ana")
    before_private = await last_delivery(store)
    await say(telegram, "/private sesame 1h")
    await type_while_private(kind, gateway, telegram, first)
    while_private = await last_delivery(store)
    await say(telegram, "/normal")
    model.reply_text("Noted.")
    await say(telegram, "what's new?")
    assert telegram.texts_to(USER)[-1] == "Noted."
    # The next normal request, the normal rows, the recall index: no canary.
    assert CANARY not in model.raw_requests[-1].decode()
    assert "lunch on Friday with Ana" in model.raw_requests[-1].decode()
    found = await traces(store, CANARY)
    assert found.normal_rows == [] and found.recall == []
    await say(telegram, "/forget private")
    await telegram.wait_for(lambda: len(telegram.texts_to(MIRROR_CHAT)) >= 3)  # hello and two exchanges
    await gateway.running[-1][1].outbox.settle(10)
    # Every mirror body, and every delivery row: none holds it, and none written while private is left.
    assert all(CANARY not in text for text in telegram.texts_to(MIRROR_CHAT))
    assert not (await traces(store, CANARY)).anywhere
    restarted = kind.startswith("caught-up")
    assert await left_of_the_interval(store, before_private, while_private, restarted=restarted) == []
