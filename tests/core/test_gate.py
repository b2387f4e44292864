"""The gate (issue 22): every inbound event gets its mode once, from the moment it was made, and
everything it writes belongs to that mode's interval, whatever the event's kind.

The core runs for real on a real SQLite store, with an outbox whose far end is a FakeSender (the
same flows through python-telegram-bot, discord.py and the web chat are in tests/adapters/test_platform_wall.py).
"""

from __future__ import annotations

import dataclasses

import pytest

from core.turn.companion import Companion
from core.values import copy
from core.values.model import InboundMessage, Media, Reply
from tests.conftest import PASSPHRASE
from tests.helpers import engines
from tests.helpers.boot import boot_companion
from tests.helpers.chat import all_rows
from tests.helpers.fakes import FakeSender

pytestmark = pytest.mark.engines

USER = "100"
CANARY = "gatecanary5a0f"  # one lowercase word: a command's name, a search term


@pytest.fixture
def sender() -> FakeSender:
    return FakeSender("telegram")


@pytest.fixture
def boot(stores, provider, clock, passphrase_hash, sender):
    """Start a Companion with an outbox on the shared store; calling it again is a restart."""

    async def start(**config) -> Companion:
        return await boot_companion(
            stores,
            provider,
            clock,
            passphrase_hash,
            [sender],
            outbox_options={"base_delay": 2.0, "max_delay": 60.0},
            **config,
        )

    return start


_ids = iter(range(1, 10**6))


async def tell(
    companion: Companion,
    text: str,
    *,
    mid: str | None = None,
    sent_at: float | None = None,
    edited: bool = False,
    media: tuple[Media, ...] = (),
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
        media=media,
    )
    reply = await companion.handle(message)
    if send and reply is not None and reply.delivery_id is not None:
        await companion.outbox.deliver(reply.conversation_id, reply.delivery_id)
    return reply


async def count(stores, sql: str, *params) -> int:
    return (await all_rows(stores, sql, params))[0][0]


# --- events made inside an interval a restart closed since ----------------------------------------


async def test_a_lasting_command_made_before_a_restart_inside_its_interval_is_kept_there_unread_and_not_run(
    boot, stores, clock
):
    companion = await boot()
    await tell(companion, f"/private {PASSPHRASE} 1h")
    made_at = clock.now()
    clock.advance(60)
    restarted = await boot()  # start-up closes the interval the command was typed in
    reply = await tell(restarted, f"/remember my code word is {CANARY}", sent_at=made_at)
    assert reply is not None and reply.text == copy.RESTART_KEPT_PRIVATE
    assert await count(stores, "SELECT count(*) FROM pad_entries WHERE text LIKE ?", f"%{CANARY}%") == 0
    rows = await engines.rows_saying(stores, "SELECT mode, kind FROM messages WHERE {saying}", f"%{CANARY}%", like=True)
    assert rows == [("private", "command")]


async def test_an_unknown_command_made_before_a_restart_inside_its_interval_is_kept_there_unread(
    boot, stores, clock, sender
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
    assert await count(stores, "SELECT count(*) FROM messages WHERE text LIKE ?", f"%{CANARY}%") == 0


async def test_an_edit_made_before_a_restart_inside_an_interval_is_dropped(boot, stores, clock, provider):
    companion = await boot()
    await tell(companion, "lunch on Friday", mid="lunch")
    await tell(companion, f"/private {PASSPHRASE} 1h")
    made_at = clock.now()
    clock.advance(60)
    restarted = await boot()
    reply = await tell(restarted, f"lunch with {CANARY}", mid="lunch", sent_at=made_at, edited=True)
    assert reply is None
    assert await count(stores, "SELECT count(*) FROM messages WHERE text LIKE ?", f"%{CANARY}%") == 0
    assert await all_rows(stores, "SELECT text FROM messages WHERE platform_message_id = 'lunch'") == [
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


# --- every reply written while private belongs to the interval ------------------------------------


async def test_every_kind_of_reply_written_while_private_belongs_to_its_interval_and_goes_with_it(
    boot, stores, provider
):
    companion = await boot(allow_private_export=True)
    await tell(companion, "lunch on Friday", mid="lunch")
    (before,) = (await all_rows(stores, "SELECT coalesce(max(id), 0) FROM deliveries"))[0]
    await tell(companion, f"/private {PASSPHRASE} 1h")
    replies = {
        "the model's answer": await tell(companion, f"about {CANARY}", mid="newest"),
        "a correction": await tell(companion, f"about {CANARY}, edited", mid="newest", edited=True),
        "a command's answer": await tell(companion, "/mode"),
        "a refusal": await tell(companion, f"/remember {CANARY}"),
        "an unknown command's answer": await tell(companion, f"/diary_{CANARY} today"),
        "a mistyped command's answer": await tell(companion, f"/privte {CANARY}"),
        "an edit's refusal": await tell(companion, f"/private {PASSPHRASE}", mid="lunch", edited=True),
        "a media answer": await tell(companion, "", media=(Media("sticker"),)),
        "a button's prompt": await tell(companion, "/export"),
    }
    provider.fail_all = True
    replies["an apology"] = await tell(companion, f"failing {CANARY}")
    provider.fail_all = False
    assert replies["a button's prompt"] is not None and replies["a button's prompt"].confirm is not None
    assert all(r is not None and r.delivery_id is not None for r in replies.values()), replies
    (segment,) = (await all_rows(stores, "SELECT id FROM segments WHERE ended_at IS NULL"))[0]
    written = await all_rows(stores, "SELECT kind, segment_id FROM deliveries WHERE id > ? ORDER BY id", (before,))
    assert len(written) == len(replies) + 1  # and the answer to /private itself
    assert written == [("reply", segment)] * len(written)
    await tell(companion, "/forget private")
    # Gone with the interval: the only delivery left since is the answer to /forget private.
    assert await all_rows(stores, "SELECT segment_id FROM deliveries WHERE id > ?", (before,)) == [(None,)]
    assert await count(stores, "SELECT count(*) FROM messages WHERE text LIKE ?", f"%{CANARY}%") == 0


# --- normal mode assumed, proven by the message's write -------------------------------------------


class CountingModeReads:
    """The mode store, counting the mode reads (`open_segment_of`)."""

    def __init__(self, modes) -> None:
        self._modes = modes
        self.reads = 0

    def __getattr__(self, name):
        return getattr(self._modes, name)

    async def open_segment_of(self, conversation_id):
        self.reads += 1
        return await self._modes.open_segment_of(conversation_id)


async def test_a_message_assumed_normal_is_stored_in_the_interval_a_segment_opened_behind_the_valve(
    boot, stores, clock, provider
):
    # The gate assumes normal mode for a conversation it last read normal (no mode read: a trip fewer a turn).
    # A segment opened since without this valve (another process on the database, say) is found by the
    # message's own write, which refuses it whole: the message is then admitted with its mode read, and
    # stored and answered inside that interval, never as a normal row.
    companion = await boot()
    await tell(companion, "hello")
    ((conversation_id,),) = await all_rows(stores, "SELECT conversation_id FROM messages WHERE role = 'user'")
    segment = await stores.modes.open_segment(conversation_id, clock.now(), None)

    reply = await tell(companion, f"my code word is {CANARY}")

    assert reply is not None and reply.delivery_id is not None
    rows = await engines.rows_saying(
        stores, "SELECT mode, segment_id FROM messages WHERE {saying}", f"%{CANARY}%", like=True
    )
    assert rows == [("private", segment.id)]
    assert (
        await count(
            stores, "SELECT count(*) FROM deliveries WHERE id = ? AND segment_id = ?", reply.delivery_id, segment.id
        )
        == 1
    )
    assert (
        await count(stores, "SELECT count(*) FROM messages WHERE segment_id IS NULL AND text LIKE ?", f"%{CANARY}%")
        == 0
    )
    assert provider.last_reply_request().private


async def test_a_conversation_last_read_normal_is_answered_without_a_mode_read(
    stores, provider, clock, passphrase_hash
):
    counting = CountingModeReads(stores.modes)
    companion = await boot_companion(
        dataclasses.replace(stores, modes=counting), provider, clock, passphrase_hash, [FakeSender("telegram")]
    )
    await tell(companion, "hello", send=False)
    read = counting.reads
    assert read >= 1  # the first message of the conversation reads its mode
    await tell(companion, "hello again", send=False)
    assert counting.reads == read  # normal mode assumed: its write proves it
    await tell(companion, f"/private {PASSPHRASE} 1h", send=False)
    await tell(companion, "inside the interval", send=False)
    inside = counting.reads
    await tell(companion, "still inside", send=False)
    assert counting.reads > inside  # a private turn reads its mode every time
