"""Discord DMs sent while the gateway was down: caught up from the DM channel's history at start,
once each, for allowed users only, with the before-restart rule of the private interval.
The real discord.py client and core, restarted against one fake Discord and one store."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from adapters.llm.openai_compat import OpenAICompatibleProvider
from adapters.storage.stores import Stores
from bot.bootstrap import build_companion
from core.delivery.outbox import Outbox
from core.ports.clock import SystemClock
from core.turn.companion import Companion
from core.turn.config import CompanionConfig
from core.turn.recovery import SENT_AT_MARGIN
from core.values.copy import NOT_ALLOWED, RESTART_KEPT_PRIVATE
from tests.conftest import PASSPHRASE
from tests.helpers import engines
from tests.helpers.adapters import PlatformRun, discord_adapter
from tests.helpers.fake_discord import FakeDiscordServer
from tests.helpers.fake_openai import FakeOpenAIServer

FRIEND = 111  # allowed
STRANGER = 222
CANARY = "canary-3f9a what I said in private while it was down"
MESSAGES = "/api/v10/channels/{channel_id}/messages"


@pytest.fixture
async def discord_server() -> AsyncIterator[FakeDiscordServer]:
    async with FakeDiscordServer() as server:
        yield server


Start = Callable[..., Awaitable[PlatformRun]]


@pytest.fixture
async def start(
    discord_server: FakeDiscordServer, model: FakeOpenAIServer, stores: Stores, passphrase_hash: str
) -> AsyncIterator[Start]:
    """A process start: a new Companion on the one store (its start closes what the last one left
    open) and a new adapter. Calling it again stops the one running first, as a restart does."""
    running: list[tuple[PlatformRun, Companion, OpenAICompatibleProvider]] = []

    async def stop() -> None:
        while running:
            adapter, companion, provider = running.pop()
            await adapter.aclose()
            await companion.drain()
            await provider.aclose()

    async def make(**options: object) -> PlatformRun:
        await stop()
        provider = OpenAICompatibleProvider(model.base_url, max_retries=0)
        companion = build_companion(
            stores,
            provider,
            CompanionConfig(allowed_accounts=frozenset({f"discord:{FRIEND}"}), passphrase_hash=passphrase_hash),
            outbox=Outbox(stores.outbox, SystemClock()),
        )
        await companion.start()
        adapter = discord_adapter(discord_server, companion, retry_delays=(0.01,), **options)
        running.append((adapter, companion, provider))
        await adapter.start()
        return adapter

    make.stop = stop  # type: ignore[attr-defined]
    yield make
    await stop()


def dm_texts(server: FakeDiscordServer, user: int) -> list[str]:
    channel = server.dm_channel_id(user)
    return [m.content for m in server.sent if m.channel_id == channel]


async def answered(server: FakeDiscordServer, user: int, count: int) -> list[str]:
    """Wait until `user`'s DM channel holds `count` messages from the bot; return their texts."""
    await server.wait_until(lambda: len(dm_texts(server, user)) >= count, 10, f"{count} replies to {user}")
    return dm_texts(server, user)


async def after_a_later_turn(server: FakeDiscordServer, model: FakeOpenAIServer, user: int = FRIEND) -> list[str]:
    """What `user`'s DM holds once a DM sent now is answered: DMs are answered in order, so whatever
    came before it has happened by then (the window of a negative check, without a fixed sleep)."""
    before = len(dm_texts(server, user))
    model.reply_text("(a later turn)")
    await server.send_dm(user, "a later message")
    texts = await answered(server, user, before + 1)
    assert texts[-1] == "(a later turn)"
    return texts[:-1]


async def wait_past_the_restart_margin() -> None:
    """A DM stamped within SENT_AT_MARGIN of a start counts as sent before it (the fail-closed
    side of the before-restart rule); a live DM of a test is sent once that moment has passed."""
    started = time.time()  # the start returned, so the companion started before this
    await asyncio.sleep(SENT_AT_MARGIN + 0.1 - (time.time() - started))


def user_texts(request: dict) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "user"]


async def test_a_dm_sent_while_the_gateway_was_down_is_answered_once_after_the_start_and_never_again(
    start: Start, discord_server: FakeDiscordServer, model: FakeOpenAIServer
) -> None:
    await start()
    model.reply_text("Hello!")
    await discord_server.send_dm(FRIEND, "hello")
    assert await answered(discord_server, FRIEND, 1) == ["Hello!"]
    await discord_server.send_dm(STRANGER, "let me in")
    assert await answered(discord_server, STRANGER, 1) == [NOT_ALLOWED]
    await start.stop()  # type: ignore[attr-defined]

    missed = discord_server.post_dm_while_offline(FRIEND, "did you miss me?")
    unknown = discord_server.post_dm_while_offline(FRIEND, "/whatisthis")  # answered, never stored
    discord_server.post_dm_while_offline(STRANGER, "let me in, please")
    model.reply_text("I did!")
    await start()
    await wait_past_the_restart_margin()
    replies = await answered(discord_server, FRIEND, 3)
    assert replies[:2] == ["Hello!", "I did!"] and replies[2].startswith("I don't know /whatisthis")
    assert user_texts(model.requests[-1])[-2:] == ["hello", "did you miss me?"]

    # The gateway delivers them too (as a resume could): each is still answered once.
    await discord_server.send_message_create(discord_server.messages[missed])
    await discord_server.send_message_create(discord_server.messages[unknown])
    assert await after_a_later_turn(discord_server, model) == replies
    assert dm_texts(discord_server, STRANGER) == [NOT_ALLOWED]  # not allowed: not caught up

    asked = len(model.requests)
    await start()
    await wait_past_the_restart_margin()
    assert await after_a_later_turn(discord_server, model) == [*replies, "(a later turn)"]
    assert len(model.requests) == asked + 1  # only the later turn reached the model
    assert dm_texts(discord_server, STRANGER) == [NOT_ALLOWED]


async def test_dms_sent_while_down_are_answered_oldest_first_up_to_the_cap_and_the_older_ones_are_skipped(
    start: Start,
    discord_server: FakeDiscordServer,
    model: FakeOpenAIServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await start()
    model.reply_text("Hello!")
    await discord_server.send_dm(FRIEND, "hello")
    await answered(discord_server, FRIEND, 1)
    await start.stop()  # type: ignore[attr-defined]

    # More than one page of history (100 a request, the bot's own "Hello!" among them): paged to the newest.
    for number in range(1, 121):
        discord_server.post_dm_while_offline(FRIEND, f"message {number}")
    model.reply_text("Answer to 119.")
    model.reply_text("Answer to 120.")
    caplog.set_level(logging.INFO, logger="adapters.discord.catchup")
    await start(catch_up_limit=2)
    assert await answered(discord_server, FRIEND, 3) == ["Hello!", "Answer to 119.", "Answer to 120."]
    assert [user_texts(r)[-1] for r in model.requests[-2:]] == ["message 119", "message 120"]
    await wait_past_the_restart_margin()
    assert await after_a_later_turn(discord_server, model) == ["Hello!", "Answer to 119.", "Answer to 120."]
    pages = [r for r in discord_server.requests if r[:2] == ("GET", MESSAGES)]
    assert len(pages) == 2
    assert "121 messages since the last handled one, 120 to answer, 2 answered now, 118 older ones skipped" in (
        caplog.text
    )
    assert "message 1" not in caplog.text  # counts, never text


async def test_a_dm_sent_while_down_during_an_open_private_interval_stays_in_it_unread(
    start: Start, discord_server: FakeDiscordServer, model: FakeOpenAIServer, stores: Stores
) -> None:
    await start()
    await discord_server.send_dm(FRIEND, f"/private {PASSPHRASE}")
    assert "private mode" in (await answered(discord_server, FRIEND, 1))[0].lower()
    await start.stop()  # type: ignore[attr-defined]  # the interval is still open

    discord_server.post_dm_while_offline(FRIEND, CANARY)
    since = len(model.raw_requests)
    await start()
    assert (await answered(discord_server, FRIEND, 2))[1] == RESTART_KEPT_PRIVATE
    await wait_past_the_restart_margin()
    assert await after_a_later_turn(discord_server, model) == dm_texts(discord_server, FRIEND)[:2]
    assert len(model.raw_requests) == since + 1  # only the later, normal turn
    assert all(CANARY.encode() not in raw for raw in model.raw_requests[since:])
    rows = await engines.rows(stores, "SELECT mode, segment_id IS NOT NULL FROM messages WHERE text = ?", (CANARY,))
    assert [tuple(r) for r in rows] == [("private", 1)]


async def test_a_live_dm_at_the_start_is_answered_after_the_dms_sent_while_down(
    start: Start, discord_server: FakeDiscordServer, model: FakeOpenAIServer
) -> None:
    await start()
    model.reply_text("Hello!")
    await discord_server.send_dm(FRIEND, "hello")
    await answered(discord_server, FRIEND, 1)
    await start.stop()  # type: ignore[attr-defined]

    discord_server.post_dm_while_offline(FRIEND, "sent while down")
    model.reply_text("First answer.")
    model.reply_text("Second answer.")
    await start()
    await discord_server.send_dm(FRIEND, "sent right at the start")
    assert await answered(discord_server, FRIEND, 3) == ["Hello!", "First answer.", "Second answer."]
    assert [user_texts(r)[-1] for r in model.requests[-2:]] == ["sent while down", "sent right at the start"]


async def test_a_dm_sent_while_down_keeps_what_it_replies_to(
    start: Start, discord_server: FakeDiscordServer, model: FakeOpenAIServer
) -> None:
    await start()
    model.reply_text("Noted.")
    first = await discord_server.send_dm(FRIEND, "the plumber comes on tuesday")
    assert await answered(discord_server, FRIEND, 1) == ["Noted."]
    await start.stop()  # type: ignore[attr-defined]

    discord_server.post_dm_while_offline(FRIEND, "make that wednesday", reply_to=first)
    model.reply_text("Wednesday it is.")
    await start()
    await wait_past_the_restart_margin()
    assert await answered(discord_server, FRIEND, 2) == ["Noted.", "Wednesday it is."]
    assert user_texts(model.requests[-1])[-1] == "(replying to: the plumber comes on tuesday)\nmake that wednesday"


async def a_known_dm(start: Start, server: FakeDiscordServer, model: FakeOpenAIServer, **options: object) -> None:
    """Start, and have the friend's DM answered once: its channel is known (a cursor is stored)."""
    await start(**options)
    model.reply_text("Hello!")
    await server.send_dm(FRIEND, "hello")
    assert await answered(server, FRIEND, 1) == ["Hello!"]


async def test_a_dm_waiting_behind_a_turn_the_stop_cut_off_is_answered_after_the_restart(
    start: Start, discord_server: FakeDiscordServer, model: FakeOpenAIServer
) -> None:
    await a_known_dm(start, discord_server, model, stop_grace=0.3)
    model.reply_delay(30)  # slower than the stop's grace
    await discord_server.send_dm(FRIEND, "a slow question")
    await discord_server.wait_until(lambda: len(model.requests) == 2, what="the slow turn")
    await discord_server.send_dm(FRIEND, "and one more thing")  # waits in its lane behind the slow turn
    await discord_server.settle()
    await start.stop()  # type: ignore[attr-defined]  # both cut off: neither is acknowledged

    model.forget_script()
    model.reply_text("One more thing, then.")
    await start()
    assert await answered(discord_server, FRIEND, 2) == ["Hello!", "One more thing, then."]
    assert user_texts(model.requests[-1])[-1] == "and one more thing"


async def test_a_dm_sent_while_down_and_delivered_by_the_gateway_at_the_start_too_is_answered_once(
    start: Start, discord_server: FakeDiscordServer, model: FakeOpenAIServer
) -> None:
    await a_known_dm(start, discord_server, model)
    await start.stop()  # type: ignore[attr-defined]

    unknown = discord_server.post_dm_while_offline(FRIEND, "/whatisthis")  # answered, never stored
    await start()
    # The gateway delivers it too (as a resume could) while it is caught up, before its answer went out.
    await discord_server.send_message_create(discord_server.messages[unknown])
    await wait_past_the_restart_margin()
    before_the_later_turn = await after_a_later_turn(discord_server, model)
    assert len(before_the_later_turn) == 2 and before_the_later_turn[1].startswith("I don't know /whatisthis")
