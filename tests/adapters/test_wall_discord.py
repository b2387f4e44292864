"""The wall at the edges on Discord (issue 22): edits, forwards, unknown commands and pending sends
never carry words typed in private mode past their interval. The real discord.py client and core
against the fake Discord (REST and gateway) and model servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from adapters.llm.openai_compat import OpenAICompatibleProvider
from adapters.storage.backup import backup
from adapters.storage.outbox import SqliteOutboxStore
from adapters.storage.sqlite import SqliteStore
from bot.bootstrap import build_companion
from core.delivery.outbox import Outbox
from core.turn.companion import Companion
from core.turn.config import CompanionConfig
from core.turn.recovery import SENT_AT_MARGIN
from core.values import copy
from tests.conftest import PASSPHRASE
from tests.helpers.adapters import PlatformRun, discord_adapter
from tests.helpers.fake_discord import FakeDiscordServer
from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.reader import files_holding
from tests.helpers.wall import ShiftedClock, last_delivery, left_of_the_interval, traces

FRIEND = 111
CANARY = "wallcanary9c2d"  # one lowercase word: it can be a command's name, a search term, a caption


@pytest.fixture
async def discord_server() -> AsyncIterator[FakeDiscordServer]:
    async with FakeDiscordServer() as server:
        yield server


@pytest.fixture
def clock() -> ShiftedClock:
    return ShiftedClock()


class Gateway:
    """A companion and its Discord adapter on the fake servers, on `clock` (real time, movable);
    `start` again after `stop` is a restart on the same store (DMs sent meanwhile are caught up)."""

    def __init__(self, discord_server, model, store, clock, passphrase_hash) -> None:
        self.discord_server, self.model, self.store, self.clock = discord_server, model, store, clock
        self.passphrase_hash = passphrase_hash
        self.running: list[tuple[PlatformRun, Companion, OpenAICompatibleProvider]] = []

    async def start(self, **config: Any) -> Companion:
        provider = OpenAICompatibleProvider(self.model.base_url, max_retries=0)
        companion = build_companion(
            self.store,
            provider,
            CompanionConfig(
                allowed_accounts=frozenset({f"discord:{FRIEND}"}), passphrase_hash=self.passphrase_hash, **config
            ),
            clock=self.clock,
            outbox=Outbox(SqliteOutboxStore(self.store.database), self.clock, base_delay=0.01, max_delay=0.01),
        )
        await companion.start()
        adapter = discord_adapter(self.discord_server, companion)
        self.running.append((adapter, companion, provider))
        await adapter.start()
        return companion

    async def stop(self) -> None:
        while self.running:
            adapter, companion, provider = self.running.pop()
            await adapter.aclose()
            await companion.drain()
            await provider.aclose()


@pytest.fixture
async def gateway(
    discord_server: FakeDiscordServer, model: FakeOpenAIServer, store: SqliteStore, clock: ShiftedClock, passphrase_hash
) -> AsyncIterator[Gateway]:
    gateway = Gateway(discord_server, model, store, clock, passphrase_hash)
    yield gateway
    await gateway.stop()


@pytest.fixture
async def companion(gateway: Gateway) -> Companion:
    return await gateway.start()


async def say(server: FakeDiscordServer, text: str, **kwargs) -> int:
    """Send `text` as the friend in their DM and wait for the one reply; returns the message id."""
    before = len(dm_texts(server))
    message_id = await server.send_dm(FRIEND, text, **kwargs)
    await server.wait_until(lambda: len(dm_texts(server)) > before, what="the reply")
    return message_id


def dm_texts(server: FakeDiscordServer) -> list[str]:
    channel = server.dm_channel_id(FRIEND)
    return [m.content or "" for m in server.sent if m.channel_id == channel]


def channel_texts(server: FakeDiscordServer) -> list[str]:
    return [m.content or "" for m in server.sent if m.channel_id == server.guild_channel_id]


# --- 1. an edit typed while private ----------------------------------------------------------------


async def test_an_edit_typed_while_private_never_reaches_the_normal_request_row_recall_or_a_recall_answer(
    discord_server: FakeDiscordServer, model: FakeOpenAIServer, store: SqliteStore, companion: Companion
) -> None:
    first = await say(discord_server, "lunch on Friday with Ana")
    await say(discord_server, f"/private {PASSPHRASE}")
    await discord_server.edit_message(first, f"lunch on Friday with {CANARY}")
    await say(discord_server, "/normal")  # one channel's messages run in order: the edit was handled before it
    await say(discord_server, "who is lunch with on Friday?")
    assert CANARY not in model.raw_requests[-1].decode()
    assert "lunch on Friday with Ana" in model.raw_requests[-1].decode()
    await say(discord_server, "/recall Friday")
    assert "Ana" in dm_texts(discord_server)[-1] and CANARY not in dm_texts(discord_server)[-1]
    found = await traces(store, CANARY)
    assert found.normal_rows == [] and found.recall == []


async def test_an_edit_made_after_a_restart_is_read_in_the_mode_of_its_own_moment(
    gateway: Gateway, discord_server: FakeDiscordServer, store: SqliteStore
) -> None:
    await gateway.start()
    first = await say(discord_server, "lunch on Friday")
    await say(discord_server, f"/private {PASSPHRASE}")
    await gateway.stop()
    await gateway.start()  # the restart closes the interval; the message it edits is older still
    await asyncio.sleep(SENT_AT_MARGIN + 0.1)
    await discord_server.edit_message(first, "lunch on Saturday")  # made now, in normal mode
    await say(discord_server, "/mode")
    rows = await store._all("SELECT text FROM messages WHERE platform_message_id = ?", (str(first),))
    assert [r[0] for r in rows] == ["lunch on Saturday"]


# --- 2. an unknown command typed while private, its answer pending ---------------------------------

MESSAGES = "/channels/{channel_id}/messages"


async def discord_down(server: FakeDiscordServer) -> None:
    """The next message send fails each of the adapter's three tries (503: discord.py itself waits
    out a 502 for half a minute before the adapter sees it; for the outbox both are an outage)."""
    for _ in range(3):
        server.fail_next("POST", MESSAGES, 503)


async def pending_for(store: SqliteStore, needle: str) -> list[tuple]:
    rows = await store._all("SELECT segment_id, status FROM deliveries WHERE text LIKE ?", (f"%{needle}%",))
    return [tuple(r) for r in rows]


async def rows_appear(store: SqliteStore, sql: str, *params: object) -> None:
    for _ in range(500):
        if await store._all(sql, params):
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"no row for: {sql}")


@pytest.mark.parametrize("ending", ["forget private", "expiry"])
async def test_an_unknown_commands_pending_answer_typed_while_private_goes_with_its_interval(
    discord_server: FakeDiscordServer,
    store: SqliteStore,
    clock: ShiftedClock,
    companion: Companion,
    tmp_path,
    ending: str,
) -> None:
    await say(discord_server, f"/private {PASSPHRASE} 1h")
    await discord_down(discord_server)
    await discord_server.send_dm(FRIEND, f"/diary_{CANARY} the day was long")
    await rows_appear(store, "SELECT 1 FROM deliveries WHERE status = 'pending' AND attempts = 1")
    (segment,) = [r[0] for r in await store._all("SELECT id FROM segments WHERE ended_at IS NULL")]
    assert await pending_for(store, CANARY) == [(segment, "pending")]  # the answer is the interval's own
    assert files_holding([backup(store.path, tmp_path / "backups", retention_days=14).path], CANARY.encode()) == []
    if ending == "forget private":
        await discord_down(discord_server)
        await discord_server.send_dm(FRIEND, "/forget private")
        await rows_appear(store, "SELECT 1 FROM deliveries WHERE text LIKE 'Private mode is off%' AND attempts = 1")
    else:
        clock.advance(3601)
        await companion.sweep()
    assert not (await traces(store, CANARY)).anywhere
    assert await store._all("SELECT id FROM deliveries WHERE segment_id IS NOT NULL") == []
    files = [p for p in (store.path, store.path.with_name(store.path.name + "-wal")) if p.exists()]
    assert files_holding(files, CANARY.encode()) == []
    clock.advance(60)  # Discord is back: what is still pending goes out, and none of it is the canary
    await companion.outbox.dispatch_due()
    assert all(CANARY not in (m.content or "") for m in discord_server.sent)


# --- 4. a private answer left pending past its interval's expiry -----------------------------------


async def test_a_private_answer_left_pending_is_never_sent_after_its_interval_expired(
    discord_server: FakeDiscordServer,
    model: FakeOpenAIServer,
    store: SqliteStore,
    clock: ShiftedClock,
    companion: Companion,
) -> None:
    await say(discord_server, f"/private {PASSPHRASE} 1m")
    await discord_down(discord_server)
    model.reply_text(f"Between us: {CANARY}.")
    await discord_server.send_dm(FRIEND, "how am I doing, really?")
    await rows_appear(store, "SELECT 1 FROM deliveries WHERE status = 'pending' AND attempts = 1")
    (conversation, delivery) = tuple(
        (await store._all("SELECT conversation_id, id FROM deliveries WHERE status = 'pending'"))[0]
    )
    posts = len(discord_server.requests)
    clock.advance(61)  # the interval expired a moment ago; the minute's sweep has not run yet
    await companion.outbox.dispatch_due()  # the scheduler's dispatch, Discord back up
    await companion.outbox.deliver(conversation, delivery)  # and the lane sent directly
    assert all(CANARY not in (m.content or "") for m in discord_server.sent)
    assert [r for r in discord_server.requests[posts:] if r[:2] == ("POST", "/api/v10" + MESSAGES)] == []  # not tried
    await companion.sweep()
    assert not (await traces(store, CANARY)).anywhere


# --- 3. a mirror is never told a private interval existed ------------------------------------------


async def test_a_mirror_gets_only_the_words_typed_in_normal_mode_never_a_quote_of_a_private_message(
    discord_server: FakeDiscordServer, model: FakeOpenAIServer, store: SqliteStore, companion: Companion
) -> None:
    await say(discord_server, f"/mirror discord:{discord_server.guild_channel_id}")
    assert dm_texts(discord_server)[-1].startswith("Mirror 1 is on")
    model.reply_text("Porto it is.")
    normal_id = await say(discord_server, "let's go to Porto")
    await say(discord_server, f"/private {PASSPHRASE}")
    private_id = await say(discord_server, f"my secret is {CANARY}")
    await say(discord_server, "/normal")
    model.reply_text("I can't see that one.")
    await say(discord_server, "what did I say here?", reply_to=private_id)
    model.reply_text("Because of the bridges.")
    await say(discord_server, "why Porto?", reply_to=normal_id)
    # The model read the placeholder for the private quote; the mirror reads the words typed.
    assert copy.QUOTE_LINE.format(text=copy.PLACEHOLDER) in model.raw_requests[-2].decode()
    await discord_server.wait_until(lambda: len(channel_texts(discord_server)) >= 4, what="the copies")
    assert channel_texts(discord_server) == [
        copy.MIRROR_HELLO.format(source="discord DM"),
        "[discord DM] you: let's go to Porto\ncompanion: Porto it is.",
        "[discord DM] you: what did I say here?\ncompanion: I can't see that one.",
        "[discord DM] you: why Porto?\ncompanion: Because of the bridges.",
    ]
    assert not (await traces(store, CANARY)).mirrors


# --- 5. a forward of a private message -------------------------------------------------------------


def last_user_text(model: FakeOpenAIServer) -> str:
    return [m["content"] for m in model.requests[-1]["messages"] if m["role"] == "user"][-1]


async def test_a_forward_of_a_private_message_is_the_placeholder_in_normal_mode_and_the_person_is_told_once(
    discord_server: FakeDiscordServer, model: FakeOpenAIServer, store: SqliteStore, companion: Companion
) -> None:
    await say(discord_server, f"/private {PASSPHRASE}")
    private_id = await say(discord_server, f"my secret is {CANARY}")
    await say(discord_server, "/normal")
    await say(discord_server, "", forward_of=private_id)  # the words travel in the snapshot
    assert CANARY not in model.raw_requests[-1].decode()
    assert last_user_text(model) == f"{copy.FORWARD_LINE.format(name='another Discord chat')}\n{copy.PLACEHOLDER}"
    assert dm_texts(discord_server)[-1].startswith(copy.FORWARD_NOT_READ)
    await say(discord_server, "", forward_of=private_id)  # told once
    assert not dm_texts(discord_server)[-1].startswith(copy.FORWARD_NOT_READ)
    # A forward from elsewhere is read; the same private message quoted is the placeholder, as before.
    elsewhere = await discord_server.send_guild_message(222, "the meeting moved to Friday", mention_bot=False)
    await say(discord_server, "", forward_of=elsewhere)
    assert last_user_text(model) == "(forwarded from #general)\nthe meeting moved to Friday"
    await say(discord_server, "and this?", reply_to=private_id)
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


async def type_while_private(kind: str, gateway: Gateway, server: FakeDiscordServer, first: int) -> None:
    """Do `kind` of event, carrying the canary, while the conversation is private."""
    if kind == "message":
        await say(server, f"note this: {CANARY}")
    elif kind == "edit":
        await server.edit_message(first, f"lunch on Friday with {CANARY}")
    elif kind == "forward":
        elsewhere = await server.send_guild_message(222, f"Bob says {CANARY}", mention_bot=False)
        await say(server, "", forward_of=elsewhere)
    elif kind == "quote":
        await say(server, f"about {CANARY}", reply_to=first)
    elif kind == "media":
        before = len(dm_texts(server))
        await server.send_dm_media(FRIEND, f"a photo of {CANARY}", files=[("cat.jpg", b"\xff\xd8 cat", "image/jpeg")])
        await server.wait_until(lambda: len(dm_texts(server)) > before, what="the answer to the photo")
    elif kind == "known command":
        await say(server, f"/remember {CANARY}")
    elif kind == "unknown command":
        await say(server, f"/diary_{CANARY} today")
    elif kind == "mistyped command":
        await say(server, f"/privte {CANARY}")
    elif kind == "button press":
        await say(server, f"note this: {CANARY}")
        await say(server, "/export")
        asked = server.sent[-1].id
        pressed = await server.interactions.press_button(FRIEND, asked, "companion:/export confirm")
        await server.interactions.wait_for_responses(pressed, 3)  # acknowledged, the answer, its file
    elif kind in ("caught-up message", "caught-up command"):
        await gateway.stop()
        if kind == "caught-up command":
            server.post_dm_while_offline(FRIEND, f"/remember {CANARY}")
        else:
            server.post_dm_while_offline(FRIEND, f"sent while you were down: {CANARY}")
        await gateway.start(allow_private_export=True)  # the restart closes the interval it belongs to
        await server.wait_until(lambda: copy.RESTART_KEPT_PRIVATE in dm_texts(server), what="the kept answer")
        await asyncio.sleep(SENT_AT_MARGIN + 0.1)  # what follows is after the restart
    else:
        raise AssertionError(kind)


@pytest.mark.parametrize("kind", KINDS)
async def test_a_canary_typed_while_private_in_any_kind_of_event_leaves_no_trace_in_normal_mode(
    gateway: Gateway, discord_server: FakeDiscordServer, model: FakeOpenAIServer, store: SqliteStore, kind: str
) -> None:
    await gateway.start(allow_private_export=True)
    await say(discord_server, f"/mirror discord:{discord_server.guild_channel_id}")
    first = await say(discord_server, "lunch on Friday with Ana")
    before_private = await last_delivery(store)
    await say(discord_server, f"/private {PASSPHRASE} 1h")
    await type_while_private(kind, gateway, discord_server, first)
    while_private = await last_delivery(store)
    await say(discord_server, "/normal")
    model.reply_text("Noted.")
    await say(discord_server, "what's new?")
    assert dm_texts(discord_server)[-1] == "Noted."
    # The next normal request, the normal rows, the recall index: no canary.
    assert CANARY not in model.raw_requests[-1].decode()
    assert "lunch on Friday with Ana" in model.raw_requests[-1].decode()
    found = await traces(store, CANARY)
    assert found.normal_rows == [] and found.recall == []
    await say(discord_server, "/forget private")
    await discord_server.wait_until(lambda: len(channel_texts(discord_server)) >= 3, what="the copies")
    await gateway.running[-1][1].outbox.settle(10)
    # Every mirror body, and every delivery row: none holds it, and none written while private is left.
    assert all(CANARY not in text for text in channel_texts(discord_server))
    assert not (await traces(store, CANARY)).anywhere
    restarted = kind.startswith("caught-up")
    assert await left_of_the_interval(store, before_private, while_private, restarted=restarted) == []
