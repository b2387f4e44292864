"""The gate (issue 22): every inbound event gets its mode once, from the moment it was made, and
everything it writes belongs to that mode's interval, whatever the event's kind.

The core runs for real on a real SQLite store, with an outbox whose far end is a FakeSender (the
same flows through python-telegram-bot and discord.py are in tests/adapters/test_wall_*.py).
"""

from __future__ import annotations

import pytest

from adapters.storage.outbox import SqliteOutboxStore
from bot.bootstrap import build_companion
from core.delivery.outbox import Outbox
from core.turn.companion import Companion
from core.turn.config import CompanionConfig
from core.values import copy
from core.values.model import InboundMessage, Reply
from tests.conftest import PASSPHRASE
from tests.helpers.chat import all_rows
from tests.helpers.fakes import FakeSender

USER = "100"
CANARY = "gatecanary5a0f"  # one lowercase word: a command's name, a search term


@pytest.fixture
def sender() -> FakeSender:
    return FakeSender("telegram")


@pytest.fixture
def boot(store, provider, clock, passphrase_hash, sender):
    """Start a Companion with an outbox on the shared store; calling it again is a restart."""

    async def start() -> Companion:
        outbox = Outbox(SqliteOutboxStore(store.database), clock, base_delay=2.0, max_delay=60.0, rand=lambda: 1.0)
        outbox.register(sender)
        companion = build_companion(
            store,
            provider,
            CompanionConfig(
                passphrase_hash=passphrase_hash,
                allowed_accounts=frozenset({f"telegram:{USER}"}),
                platforms=frozenset({"telegram"}),
            ),
            clock=clock,
            outbox=outbox,
        )
        await companion.start()
        return companion

    return start


_ids = iter(range(1, 10**6))


async def tell(
    companion: Companion,
    text: str,
    *,
    mid: str | None = None,
    sent_at: float | None = None,
    edited: bool = False,
    send: bool = True,
) -> Reply | None:
    """What an adapter does: hand the message to the core, then send the reply's delivery."""
    message = InboundMessage(
        "telegram",
        USER,
        USER,
        text,
        is_direct=True,
        message_id=mid or f"g{next(_ids)}",
        sent_at=companion.clock.now() if sent_at is None else sent_at,
        edited=edited,
    )
    reply = await companion.handle(message)
    if send and reply is not None and reply.delivery_id is not None:
        await companion.outbox.deliver(reply.conversation_id, reply.delivery_id)
    return reply


async def count(store, sql: str, *params) -> int:
    return (await all_rows(store, sql, params))[0][0]


# --- events made inside an interval a restart closed since ----------------------------------------


async def test_a_lasting_command_made_before_a_restart_inside_its_interval_is_kept_there_unread_and_not_run(
    boot, store, clock
):
    companion = await boot()
    await tell(companion, f"/private {PASSPHRASE} 1h")
    made_at = clock.now()
    clock.advance(60)
    restarted = await boot()  # start-up closes the interval the command was typed in
    reply = await tell(restarted, f"/remember my code word is {CANARY}", sent_at=made_at)
    assert reply is not None and reply.text == copy.RESTART_KEPT_PRIVATE
    assert await count(store, "SELECT count(*) FROM pad_entries WHERE text LIKE ?", f"%{CANARY}%") == 0
    rows = await all_rows(store, "SELECT mode, kind FROM messages WHERE text LIKE ?", (f"%{CANARY}%",))
    assert rows == [("private", "command")]


async def test_an_unknown_command_made_before_a_restart_inside_its_interval_is_kept_there_unread(
    boot, store, clock, sender
):
    companion = await boot()
    await tell(companion, f"/private {PASSPHRASE} 1h")
    made_at = clock.now()
    clock.advance(60)
    restarted = await boot()
    reply = await tell(restarted, f"/diary_{CANARY} today was long", sent_at=made_at)
    assert reply is not None and reply.text == copy.RESTART_KEPT_PRIVATE
    assert all(CANARY not in text for text in sender.texts())
    await tell(restarted, "/forget private")
    assert await count(store, "SELECT count(*) FROM messages WHERE text LIKE ?", f"%{CANARY}%") == 0


async def test_an_edit_made_before_a_restart_inside_an_interval_is_dropped(boot, store, clock, provider):
    companion = await boot()
    await tell(companion, "lunch on Friday", mid="lunch")
    await tell(companion, f"/private {PASSPHRASE} 1h")
    made_at = clock.now()
    clock.advance(60)
    restarted = await boot()
    reply = await tell(restarted, f"lunch with {CANARY}", mid="lunch", sent_at=made_at, edited=True)
    assert reply is None
    assert await count(store, "SELECT count(*) FROM messages WHERE text LIKE ?", f"%{CANARY}%") == 0
    assert await all_rows(store, "SELECT text FROM messages WHERE platform_message_id = 'lunch'") == [
        ("lunch on Friday",)
    ]


async def test_a_command_private_mode_runs_still_runs_when_it_was_made_before_the_restart(boot, clock):
    companion = await boot()
    await tell(companion, f"/private {PASSPHRASE} 1h")
    made_at = clock.now()
    clock.advance(60)
    restarted = await boot()
    reply = await tell(restarted, "/mode", sent_at=made_at)
    assert reply is not None and "You are in normal mode" in reply.text
