"""Messages over time in the core: the inbox, the outbox, restarts and cut-off turns (issue 10).

The core runs for real on a real SQLite store; the far end of the outbox is a FakeSender
(the adapters' own tests run the same flows through python-telegram-bot and discord.py).
"""

from __future__ import annotations

import asyncio

import pytest

from core.delivery.outbox import Outbox
from core.turn.companion import Companion
from core.turn.recovery import ANSWER_CUT_OFF_TURNS_WITHIN
from core.values import copy
from core.values.model import InboundMessage, Reply
from tests.conftest import PASSPHRASE
from tests.helpers import engines
from tests.helpers.boot import boot_companion
from tests.helpers.chat import all_rows
from tests.helpers.fakes import FakeSender, request_text
from tests.helpers.waiting import wait_for

USER = "100"
CANARY = "OUTBOX-PRIVATE-CANARY"


@pytest.fixture
def sender() -> FakeSender:
    return FakeSender("telegram", limit=50)


@pytest.fixture
def boot(stores, provider, clock, passphrase_hash, sender):
    """Start a Companion with an outbox on the shared store; calling it again is a restart."""

    async def start() -> Companion:
        return await boot_companion(
            stores, provider, clock, passphrase_hash, [sender], outbox_options={"base_delay": 2.0, "max_delay": 60.0}
        )

    return start


_ids = iter(range(1, 10**6))


async def tell(
    companion: Companion, text: str, *, mid: str | None = None, sent_at: float | None = None, send: bool = True
) -> Reply | None:
    """What an adapter does: hand the message to the core, then send the reply's delivery."""
    message = InboundMessage(
        "telegram",
        USER,
        USER,
        text,
        is_direct=True,
        message_id=mid or f"m{next(_ids)}",
        sent_at=companion.clock.now() if sent_at is None else sent_at,
    )
    reply = await companion.handle(message)
    if send and reply is not None and reply.delivery_id is not None:
        await companion.outbox.deliver(reply.conversation_id, reply.delivery_id)
    return reply


async def deliveries(stores) -> list[tuple]:
    return await all_rows(
        stores, "SELECT status, attempts, error, text IS NULL, segment_id FROM deliveries ORDER BY id"
    )


# --- the inbox -------------------------------------------------------------------------


async def test_a_redelivered_message_is_stored_once_and_answered_once(boot, stores, provider, sender):
    companion = await boot()
    first = await tell(companion, "hello there", mid="42")
    again = await tell(companion, "hello there", mid="42")
    assert first is not None and again is None
    assert len(provider.replies()) == 1
    assert await all_rows(stores, "SELECT count(*) FROM messages WHERE text = 'hello there'") == [(1,)]
    assert len(sender.sent) == 1


async def test_a_redelivered_command_does_not_run_twice(boot, stores, sender):
    companion = await boot()
    await tell(companion, "/private wrong-passphrase", mid="7")
    assert await tell(companion, "/private wrong-passphrase", mid="7") is None
    assert await all_rows(stores, "SELECT count(*) FROM valve_attempts") == [(1,)]


async def test_a_redelivery_after_a_kill_during_the_model_call_stores_the_message_once(boot, stores, provider):
    companion = await boot()
    provider.fail_all = True  # stands for the process dying while the model was called
    await tell(companion, "are you there?", mid="9", send=False)
    await engines.rows(stores, "UPDATE messages SET turn = 'open'")  # as a killed process leaves it
    provider.fail_all = False
    restarted = await boot()
    assert await tell(restarted, "are you there?", mid="9") is None
    assert await all_rows(stores, "SELECT count(*) FROM messages WHERE text = 'are you there?'") == [(1,)]


# --- the outbox ------------------------------------------------------------------------


async def test_a_reply_is_written_with_its_pending_delivery_before_anything_is_sent(boot, stores, sender):
    companion = await boot()
    reply = await tell(companion, "hello", send=False)
    rows = await all_rows(
        stores,
        "SELECT d.status, d.text, m.text FROM deliveries d JOIN messages m ON m.id = d.message_id WHERE d.id = ?",
        (reply.delivery_id,),
    )
    assert rows == [("pending", reply.text, reply.text)]
    assert sender.sent == []
    await companion.outbox.deliver(reply.conversation_id, reply.delivery_id)
    assert sender.texts() == [reply.text]
    assert await deliveries(stores) == [("sent", 0, None, 1, None)]  # the text is gone once sent


async def test_a_reply_survives_an_outage_of_any_length_and_is_sent_once_without_the_model(
    boot, stores, provider, clock, sender
):
    companion = await boot()
    sender.down = True
    reply = await tell(companion, "hello")
    calls = len(provider.requests)
    for _ in range(20):  # hours of outage: the dispatcher keeps trying, backing off
        clock.advance(600)
        await companion.outbox.dispatch_due()
    status, attempts, error, _, _ = (await deliveries(stores))[0]
    assert (status, error) == ("pending", "NetworkError") and attempts == 21
    sender.down = False
    clock.advance(600)
    await companion.outbox.dispatch_due()
    await companion.outbox.dispatch_due()
    assert sender.texts() == [reply.text]
    assert len(provider.requests) == calls
    assert (await deliveries(stores))[0][0] == "sent"


async def test_pending_deliveries_survive_a_restart_and_go_out_once(boot, stores, clock, sender):
    companion = await boot()
    sender.down = True
    reply = await tell(companion, "hello")
    sender.down = False
    restarted = await boot()  # a new process on the same database
    clock.advance(5)
    await restarted.outbox.dispatch_due()
    await restarted.outbox.dispatch_due()
    assert sender.texts() == [reply.text]


async def test_retries_back_off_exponentially_with_jitter_up_to_a_cap(stores, clock):
    outbox = Outbox(stores.outbox, clock, base_delay=2.0, max_delay=60.0, rand=lambda: 0.0)
    assert [outbox.backoff(n) for n in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 8.0]  # half the ceiling at least
    outbox = Outbox(stores.outbox, clock, base_delay=2.0, max_delay=60.0, rand=lambda: 1.0)
    assert [outbox.backoff(n) for n in (1, 2, 6, 50)] == [2.0, 4.0, 60.0, 60.0]


async def test_a_delivery_is_not_retried_before_its_backoff_has_passed(boot, stores, clock, sender):
    companion = await boot()
    sender.down = True
    await tell(companion, "hello")
    sender.down = False
    await companion.outbox.dispatch_due()  # due only in 2 s
    assert sender.sent == []
    clock.advance(2)
    await companion.outbox.dispatch_due()
    assert len(sender.sent) == 1


async def test_a_permanent_refusal_gives_up_by_kind_and_lets_the_next_delivery_go(boot, stores, sender):
    companion = await boot()
    sender.fail_with = [(True, "Forbidden")]
    await tell(companion, "first")
    second = await tell(companion, "second")
    assert sender.texts() == [second.text]
    assert [(s, e, gone) for s, _, e, gone, _ in await deliveries(stores)] == [
        ("failed", "Forbidden", 1),
        ("sent", None, 1),
    ]


async def test_replies_of_one_conversation_go_out_in_order_after_a_failure(boot, stores, clock, sender):
    companion = await boot()
    sender.fail_with = [(False, "TimedOut"), (False, "TimedOut")]
    first = await tell(companion, "first")
    second = await tell(companion, "second")  # held back: the first has not gone out yet
    assert sender.sent == []
    third = await tell(companion, "third")  # the first goes out now, then the ones after it
    assert sender.texts() == [first.text, second.text, third.text]


async def test_a_long_reply_cut_off_mid_way_resumes_at_the_next_part(boot, stores, provider, clock, sender):
    from core.values.model import Completion

    companion = await boot()
    long = "x" * 120  # three parts of 50
    provider.script = [Completion(long)]
    sender.fail_after_parts = 1
    await tell(companion, "tell me a lot")
    assert sender.texts() == ["x" * 50]
    clock.advance(2)
    await companion.outbox.dispatch_due()
    assert "".join(sender.texts()) == long  # no part twice, none skipped


@pytest.mark.engines
async def test_a_private_reply_is_delivered_in_its_thread_and_its_row_goes_with_the_segment(
    boot, stores, clock, sender
):
    companion = await boot()
    await tell(companion, f"/private {PASSPHRASE} 1h")
    sender.down = True
    await tell(companion, CANARY)
    (segment_id,) = [r[0] for r in await all_rows(stores, "SELECT id FROM segments")]
    assert await all_rows(
        stores, "SELECT count(*) FROM deliveries WHERE segment_id = ? AND status = 'pending'", (segment_id,)
    ) == [(1,)]
    clock.advance(3601)
    await companion.sweep()
    assert await all_rows(stores, "SELECT count(*) FROM deliveries WHERE segment_id IS NOT NULL") == [(0,)]
    sender.down = False
    clock.advance(60)
    await companion.outbox.dispatch_due()
    assert all(CANARY not in text for text in sender.texts())


@pytest.mark.engines
async def test_the_store_refuses_a_delivery_of_a_private_message_outside_its_segment(boot, stores):
    companion = await boot()
    await tell(companion, f"/private {PASSPHRASE}")
    await tell(companion, CANARY)
    (message_id, segment_id, conversation_id) = (
        await engines.rows_saying(stores, "SELECT id, segment_id, conversation_id FROM messages WHERE {saying}", CANARY)
    )[0]
    for kind, segment in (("reply", None), ("mirror", None), ("mirror", segment_id)):
        with engines.refused_by_the_database(stores):
            await engines.plant(
                stores,
                "INSERT INTO deliveries (conversation_id, message_id, segment_id, kind, platform, chat_id, nonce,"
                " text, next_attempt_at, created_at) VALUES (?, ?, ?, ?, 'discord', '5', 'n', 'copy', 0, 0)",
                (conversation_id, message_id, segment, kind),
            )


# --- restarts: messages from before one stay inside the interval it closed -------------------


@pytest.mark.engines
async def test_a_message_sent_before_a_restart_that_closed_private_mode_stays_private_and_unread(
    boot, stores, provider, clock, sender
):
    companion = await boot()
    await tell(companion, f"/private {PASSPHRASE} 1h")
    await tell(companion, "said in private")
    sent_before_crash = clock.now()
    clock.advance(120)  # down for two minutes
    restarted = await boot()
    requests = len(provider.requests)
    reply = await tell(restarted, f"{CANARY} sent before the restart", sent_at=sent_before_crash + 1)
    assert reply.text == copy.RESTART_KEPT_PRIVATE
    assert len(provider.requests) == requests  # not read
    rows = await engines.rows_saying(
        stores, "SELECT mode, segment_id IS NOT NULL FROM messages WHERE {saying}", f"{CANARY}%", like=True
    )
    assert rows == [("private", 1)]
    assert await engines.recall_hits(stores, CANARY) == 0
    # What comes after the restart is normal, and normal mode sees one placeholder, no canary.
    await tell(restarted, "hello again", sent_at=clock.now())
    assert CANARY not in request_text(provider.last_reply_request())
    # It expires with its interval.
    clock.advance(3600)
    await restarted.sweep()
    assert await engines.ids_saying(stores, "messages", f"{CANARY}%", like=True) == []


@pytest.mark.engines
async def test_a_message_from_an_interval_that_expired_while_down_is_dropped_unread(boot, stores, provider, clock):
    companion = await boot()
    await tell(companion, f"/private {PASSPHRASE} 30m")
    sent_before_crash = clock.now()
    clock.advance(3600)  # down longer than the expiry: start-up deletes the interval
    restarted = await boot()
    requests = len(provider.requests)
    reply = await tell(restarted, CANARY, sent_at=sent_before_crash + 5)
    assert reply.text == copy.RESTART_KEPT_PRIVATE
    assert len(provider.requests) == requests
    assert await engines.ids_saying(stores, "messages", CANARY) == []


async def test_a_message_sent_after_the_restart_is_normal(boot, stores, provider, clock):
    companion = await boot()
    await tell(companion, f"/private {PASSPHRASE} 1h")
    clock.advance(120)
    restarted = await boot()
    clock.advance(60)
    reply = await tell(restarted, "a new day", sent_at=clock.now())
    assert reply.text.startswith(copy.RESTART_ENDED_PRIVATE)
    assert await all_rows(stores, "SELECT mode FROM messages WHERE text = 'a new day'") == [("normal",)]


# --- turns a stop cut off ----------------------------------------------------------------


async def cut_off_turn(boot, stores, provider, text: str) -> None:
    companion = await boot()
    provider.fail_all = True
    await tell(companion, text, send=False)
    provider.fail_all = False
    await engines.rows(
        stores, "UPDATE messages SET turn = 'open' WHERE text = ?", (text,)
    )  # the reply was never written
    await engines.rows(stores, "DELETE FROM deliveries")
    companion.clock.advance(1)  # the restart comes a moment later


async def test_a_recent_turn_cut_off_by_a_stop_is_answered_once_after_start(boot, stores, provider, sender):
    await cut_off_turn(boot, stores, provider, "what do you think?")
    restarted = await boot()
    requests = len(provider.replies())
    assert await restarted.answer_open_turns() == 1
    assert len(provider.replies()) == requests + 1
    assert "what do you think?" in request_text(provider.last_reply_request())
    assert len(sender.sent) == 1
    again = await boot()
    assert await again.answer_open_turns() == 0
    assert len(sender.sent) == 1


async def test_an_old_turn_cut_off_by_a_stop_is_asked_again_without_the_model(boot, stores, provider, clock, sender):
    await cut_off_turn(boot, stores, provider, "what do you think?")
    clock.advance(ANSWER_CUT_OFF_TURNS_WITHIN + 1)
    restarted = await boot()
    requests = len(provider.requests)
    assert await restarted.answer_open_turns() == 1
    assert len(provider.requests) == requests
    assert "".join(sender.texts()) == copy.MISSED_IN_RESTART


async def test_a_failed_model_call_closes_the_turn_so_a_restart_does_not_answer_it_again(boot, provider, sender):
    companion = await boot()
    provider.fail_all = True
    await tell(companion, "hello")
    provider.fail_all = False
    assert await (await boot()).answer_open_turns() == 0


@pytest.mark.engines
async def test_a_private_turn_cut_off_by_a_stop_is_never_answered_after_start(boot, stores, provider, sender, clock):
    companion = await boot()
    await tell(companion, f"/private {PASSPHRASE}")
    provider.fail_all = True
    await tell(companion, CANARY, send=False)
    provider.fail_all = False
    await engines.rows_saying(stores, "UPDATE messages SET turn = 'open' WHERE {saying}", CANARY)
    clock.advance(1)  # the turn is from before the restart, and young: only its privacy keeps it unanswered
    restarted = await boot()
    requests = len(provider.requests)
    assert await restarted.answer_open_turns() == 0
    assert len(provider.requests) == requests


@pytest.mark.engines
async def test_a_cut_off_normal_turn_is_left_unread_once_the_person_went_on_in_private_mode(
    boot, stores, provider, sender
):
    await cut_off_turn(boot, stores, provider, "a normal question cut off")
    restarted = await boot()
    await tell(restarted, f"/private {PASSPHRASE}")  # before the start-up pass reached that turn
    requests, sent = len(provider.requests), len(sender.sent)
    await restarted.answer_open_turns()
    assert len(provider.requests) == requests and len(sender.sent) == sent  # not read, not answered
    assert await all_rows(stores, "SELECT turn FROM messages WHERE text = 'a normal question cut off'") == [("open",)]


@pytest.mark.engines
async def test_an_old_cut_off_turn_is_not_asked_again_into_a_private_interval(boot, stores, provider, clock, sender):
    await cut_off_turn(boot, stores, provider, "an old normal question")
    clock.advance(ANSWER_CUT_OFF_TURNS_WITHIN + 1)
    restarted = await boot()
    await tell(restarted, f"/private {PASSPHRASE}")
    sent = len(sender.sent)
    await restarted.answer_open_turns()
    assert len(sender.sent) == sent  # no "could you say it again?" inside the private interval
    assert await all_rows(stores, "SELECT count(*) FROM messages WHERE text = ?", (copy.MISSED_IN_RESTART,)) == [(0,)]


async def test_a_turn_running_in_this_process_is_not_taken_for_one_a_stop_cut_off(
    boot, stores, provider, clock, sender
):
    companion = await boot()
    clock.advance(1)
    provider.gate = asyncio.Event()  # the turn stays at the model while the start-up pass looks
    running = asyncio.create_task(tell(companion, "a turn of this process"))
    try:
        await wait_for(lambda: bool(provider.requests), what="the turn reaching the model")
        async with asyncio.timeout(5):  # taken for cut off, it would wait for the running turn's lock
            assert await companion.answer_open_turns() == 0
    finally:
        provider.gate.set()
        await running
    assert len(provider.replies()) == 1 and len(sender.sent) == 1


async def test_a_cut_off_turn_answered_by_a_newer_message_first_is_not_answered_again(boot, stores, provider, sender):
    await cut_off_turn(boot, stores, provider, "first question")
    restarted = await boot()
    turns = await stores.timeline.open_turns(frozenset({"telegram"}))
    await tell(restarted, "second question")  # arrives before the start-up pass gets to it
    for open_turn in turns:
        await restarted.answer_cut_off(open_turn)
    assert len(sender.sent) == 1


async def test_a_delivery_never_tried_is_sent_at_the_next_start_and_left_to_its_adapter_meanwhile(
    boot, stores, clock, sender
):
    companion = await boot()
    reply = await tell(companion, "hello", send=False)  # the process died before its adapter sent it
    await companion.outbox.dispatch_due()
    assert sender.sent == []  # a running adapter is sending it: the dispatcher leaves it alone
    restarted = await boot()
    await restarted.outbox.dispatch_due(at_start=True)
    assert sender.texts() == [reply.text]


async def test_settled_deliveries_are_forgotten_after_a_week_and_pending_ones_never(boot, stores, clock, sender):
    companion = await boot()
    await tell(companion, "sent")
    sender.down = True
    await tell(companion, "still pending")
    clock.advance(8 * 86400)
    assert await companion.outbox.prune() == 1
    assert [r[0] for r in await all_rows(stores, "SELECT status FROM deliveries")] == ["pending"]


async def test_a_note_is_added_only_to_a_delivery_none_of_whose_parts_went_out(boot, stores, sender):
    companion = await boot()
    sender.fail_after_parts = 1
    reply = await tell(companion, "x" * 10)  # short: one part, sent
    sender.down = True
    long_reply = await tell(companion, "y")
    await engines.rows(stores, "UPDATE deliveries SET parts_sent = 1 WHERE id = ?", (long_reply.delivery_id,))
    await companion.outbox.append_text(long_reply.delivery_id, " NOTE")
    await companion.outbox.append_text(reply.delivery_id, " NOTE")  # sent: nothing to add to
    texts = [r[0] for r in await all_rows(stores, "SELECT text FROM deliveries ORDER BY id")]
    assert texts == [None, long_reply.text]  # a part already out would shift every later part


@pytest.mark.engines
async def test_a_private_answer_handed_over_as_written_is_still_never_sent_after_its_interval_ends(
    boot, stores, sender
):
    companion = await boot()
    await tell(companion, f"/private {PASSPHRASE}")
    reply = await tell(companion, CANARY, send=False)
    assert reply is not None and reply.delivery_id is not None
    (written,) = await stores.outbox.pending_of(reply.conversation_id, reply.delivery_id, companion.clock.now())
    assert written.segment_id is not None
    await tell(companion, "/normal")
    sent = len(sender.sent)
    # A row picked before the end (as a hand-over would carry it) is picked again, with the clock, at its send.
    await companion.outbox.deliver(reply.conversation_id, reply.delivery_id, written=written)
    assert sender.sent[sent:] == []
