"""The core's entry and its one hand-off (core/turn/entry.py, core/delivery/handoff.py), on a fake platform:
`receive` never raises and answers every event with a typed outcome; the one failure fallback keeps a
secret out of the chat; a note asking to delete a secret is in its row before the row is sent; a
message held for its burst keeps the typing indicator; one chat's answers go out in the order its
events came. The core, the store and the outbox run for real; the platform is a FakeChatSender."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools

import pytest

from bot.bootstrap import core_entry
from core.delivery.streams import StreamPacing
from core.turn.companion import Companion
from core.turn.entry import CoreEntry
from core.values import copy
from core.values.edge import PREFIX, Answered, EdgeSettings, Held, Silence, Silent, acknowledged
from core.values.model import Completion, Confirmation, InboundMessage, Reply
from tests.conftest import PASSPHRASE
from tests.core.test_metrics import FakeMetrics
from tests.helpers.boot import USER, boot_companion
from tests.helpers.fakes import FakeChatSender, fake_platform
from tests.helpers.waiting import wait_for

_ids = itertools.count(1)
QUICK = StreamPacing(edit_seconds=0.05, first_seconds=0.02)
# The indicator shown at once (shipped: after 0.25 s), so a test sees it without waiting for it.
EDGE = EdgeSettings(typing_delay=0.0)
STORY = "Once upon a time " + " ".join(f"word{n}" for n in range(60)) + "."


def said(text: str, **fields) -> InboundMessage:
    """A message of the allowed person in their Telegram DM, as an intake makes it."""
    fields.setdefault("message_id", f"m{next(_ids)}")
    return InboundMessage("telegram", USER, USER, text, is_direct=True, **fields)


@pytest.fixture
def sender() -> FakeChatSender:
    return FakeChatSender("telegram")


@pytest.fixture
async def boot(stores, provider, clock, passphrase_hash, sender):
    """A companion with an outbox, its entry, and the fake platform attached; stopped after the test."""
    entries: list[CoreEntry] = []

    async def start(
        *, streams: bool = False, metrics: FakeMetrics | None = None, **config
    ) -> tuple[Companion, CoreEntry]:
        # Bursts off unless a test asks: each message is its own turn (the wire tests keep the shipped window).
        config.setdefault("burst_seconds", 0.0)
        companion = await boot_companion(
            stores,
            provider,
            clock,
            passphrase_hash,
            (),
            outbox_options={"pacing": QUICK, "base_delay": 0.01, "max_delay": 0.01},
            build_options={"edge": EDGE},
            **config,
        )
        entry = core_entry(companion, metrics, EDGE) if metrics is not None else core_entry(companion, edge=EDGE)
        entry.attach(fake_platform(sender, streams=streams))
        entries.append(entry)
        return companion, entry

    yield start
    for entry in entries:
        await entry.stop(1.0)


# --- never raises: the one fallback ----------------------------------------------------------


async def test_receive_never_raises_and_a_failed_turn_gets_the_one_fallback(boot, provider, sender):
    _, entry = await boot()
    provider.script.append(RuntimeError("a bug in the core"))
    assert await entry.receive(said("hello")) == Answered(None)
    assert sender.answer_texts() == [copy.HANDLER_FAILED]
    # Even the platform failing in a way it promised not to is an outcome, not an exception.
    provider.script.append(RuntimeError("a bug in the core"))
    sender.fail_answers = RuntimeError("a platform library bug")
    assert await entry.receive(said("again")) == Answered(None)
    stranger = InboundMessage("telegram", "999", "999", "hi", is_direct=True, message_id="s1")
    assert await entry.receive(stranger) == Answered(None)  # its refusal failed to go out, too


@pytest.mark.parametrize("deletes", [True, False], ids=["platform-deletes", "platform-cannot-delete"])
async def test_the_failure_fallback_keeps_a_secret_out_of_the_chat(boot, sender, monkeypatch, deletes):
    companion, entry = await boot()
    sender.deletes = deletes

    async def broken(*args, **kwargs):
        raise RuntimeError("the valve failed")

    monkeypatch.setattr(companion.valve, "enter", broken)
    event = said(f"/private {PASSPHRASE}")
    assert await entry.receive(event) == Answered(None, secret=True)
    [(_, text, _, _)] = sender.answers
    assert PASSPHRASE not in text
    if deletes:
        assert sender.deleted == [event.message_id] and text == copy.HANDLER_FAILED
    else:  # the person is asked to delete it
        assert sender.deleted == [] and text == f"{copy.HANDLER_FAILED}\n\n{copy.DELETE_SECRET_NOTE}"


# --- the hand-off ---------------------------------------------------------------------------------


async def test_the_note_to_delete_a_secret_is_in_its_row_before_the_row_is_sent(boot, sender):
    companion, entry = await boot()
    sender.deletes = False  # as in a Discord DM: no bot may delete the person's message there
    outcome = await entry.receive(said(f"/private {PASSPHRASE}"))
    assert isinstance(outcome, Answered) and outcome.delivery_id is not None and outcome.secret
    await companion.outbox.settle(5)
    [sent] = sender.texts()  # the row's one send carries the note
    assert sent.startswith("Private mode is on") and sent.endswith(copy.DELETE_SECRET_NOTE)
    assert PASSPHRASE not in sent


async def test_an_answer_written_as_a_row_is_sent_once_by_the_outbox_and_never_directly(boot, sender):
    companion, entry = await boot()
    outcome = await entry.receive(said("hello"))
    assert isinstance(outcome, Answered) and outcome.delivery_id is not None and not outcome.secret
    await companion.outbox.settle(5)
    assert sender.texts() == ["reply 1"] and sender.answers == []


async def test_a_rows_confirmation_button_goes_with_its_send(boot, sender):
    companion, entry = await boot(allow_private_export=True)
    await entry.receive(said(f"/private {PASSPHRASE}"))
    outcome = await entry.receive(said("/export"))
    assert isinstance(outcome, Answered) and outcome.delivery_id is not None
    await companion.outbox.settle(5)
    assert sender.buttons[outcome.delivery_id] == Confirmation("Create the non-private file", "/export confirm")


async def test_a_confirmation_that_would_carry_a_secret_never_becomes_a_button(boot, sender, monkeypatch):
    companion, entry = await boot()

    def answered_with_a_secret_button(message: InboundMessage) -> asyncio.Future:
        turn = asyncio.get_running_loop().create_future()
        turn.set_result(Reply("Enter?", confirm=Confirmation("Enter", "/private sesame")))
        return turn

    monkeypatch.setattr(companion, "submit", answered_with_a_secret_button)
    assert await entry.receive(said("hello")) == Answered(None)
    [(_, text, confirm, _)] = sender.answers
    assert text == "Enter?" and confirm is None


async def test_a_reply_shown_while_written_streams_through_the_attached_streamer_and_ends_typing(
    boot, provider, sender
):
    provider.streams = True
    provider.stream_steps = 8
    provider.stream_pause = 0.03
    provider.script.append(Completion(STORY))
    companion, entry = await boot(streams=True)
    assert isinstance(await entry.receive(said("tell me a story")), Answered)
    await companion.outbox.settle(5)
    assert sender.posts_shown  # shown while written
    assert sender.texts() == [STORY]  # its final text, as its messages were edited into it
    assert not companion.parts.typing.showing("telegram", USER)


# --- typing ---------------------------------------------------------------------------------------


async def test_a_message_held_for_its_burst_keeps_typing_until_the_burst_is_answered(boot, sender):
    # A short window, waited out here (the wire tests run the shipped 1.5 s).
    companion, entry = await boot(burst_seconds=0.3)
    outcome = await entry.receive(said("hello"))
    assert isinstance(outcome, Held)
    assert companion.parts.typing.showing("telegram", USER)
    shown = len(sender.typing)
    await wait_for(lambda: len(sender.typing) > shown, what="typing shown after the outcome")
    await wait_for(lambda: sender.texts() == ["reply 1"], what="the burst answered")
    assert not companion.parts.typing.showing("telegram", USER)


# --- order, silences, counts ----------------------------------------------------------------------


async def test_the_events_of_one_chat_are_answered_in_the_order_they_came(make_companion, sender):
    # Without an outbox every answer is sent directly, the first one slowly: only the hand-off keeps
    # the later ones behind it.
    companion = await make_companion(allowed_accounts=frozenset({f"telegram:{USER}"}))
    entry = core_entry(companion, edge=EDGE)
    entry.attach(fake_platform(sender))
    sender.answer_pauses = [0.2]
    outcomes = [entry.receive(said(text)) for text in ("one", "two", "three")]  # not awaited in between
    assert await asyncio.gather(*outcomes) == [Answered(None)] * 3
    assert sender.answer_texts() == ["reply 1", "reply 2", "reply 3"]
    await entry.stop(1.0)


async def test_a_turn_the_stop_cuts_off_is_silent_and_not_acknowledged(boot, provider):
    _, entry = await boot()
    provider.gate = asyncio.Event()
    waiting = entry.receive(said("a long question"))
    await wait_for(lambda: len(provider.requests) == 1, what="the model asked")
    await entry.stop(0.5)
    outcome = await waiting
    assert outcome == Silent(Silence.CUT_OFF) and not acknowledged(outcome)  # the platform offers it again
    assert await entry.receive(said("after the stop")) == Silent(Silence.CUT_OFF)
    provider.gate.set()


@pytest.mark.engines
async def test_an_answer_whose_interval_ends_while_it_is_written_ends_silently(boot, provider, sender, clock):
    companion, entry = await boot()
    await entry.receive(said(f"/private {PASSPHRASE} 10m"))
    await companion.outbox.settle(5)
    provider.gate = asyncio.Event()
    waiting = entry.receive(said("tell me everything"))
    await wait_for(lambda: len(provider.requests) == 1, what="the model asked")
    clock.advance(600.0)  # its expiry
    provider.gate.set()
    outcome = await waiting
    assert outcome == Silent(Silence.INTERVAL_ENDED) and acknowledged(outcome)
    await companion.outbox.settle(5)
    [entered] = sender.texts()  # /private's answer alone: no answer, no apology
    assert entered.startswith("Private mode is on") and sender.answers == []


async def test_a_pressed_button_runs_only_a_known_command_without_a_secret(boot, sender):
    companion, entry = await boot()
    assert await entry.receive(said(f"{PREFIX}/private sesame", pressed=True)) == Silent(Silence.NO_ANSWER)
    assert await entry.receive(said(f"{PREFIX}/nosuchcommand", pressed=True)) == Silent(Silence.NO_ANSWER)
    assert await entry.receive(said("/mode hello", pressed=True)) == Silent(Silence.NO_ANSWER)  # not ours
    assert isinstance(await entry.receive(said(f"{PREFIX}/mode", pressed=True)), Answered)
    await companion.outbox.settle(5)
    [mode] = sender.texts()
    assert mode.startswith("You are in normal mode.")


async def test_someone_not_allowed_is_refused_once_and_a_stranger_caught_up_is_not_refused(boot, sender):
    _, entry = await boot()
    stranger = InboundMessage("telegram", "999", "999", "hi", is_direct=True, message_id="s1")
    caught_up = dataclasses.replace(stranger, chat_id="998", user_id="998", message_id="s0", caught_up=True)
    assert await entry.receive(caught_up) == Silent(Silence.NO_ANSWER)
    assert await entry.receive(stranger) == Answered(None)
    assert await entry.receive(dataclasses.replace(stranger, message_id="s2")) == Silent(Silence.REFUSED_BEFORE)
    assert sender.answer_texts() == [copy.NOT_ALLOWED]


async def test_every_event_is_counted_at_intake_whatever_becomes_of_it(boot):
    metrics = FakeMetrics()
    _, entry = await boot(metrics=metrics)
    await entry.receive(said("hello"))
    await entry.receive(said(f"/private {PASSPHRASE}"))
    await entry.receive(InboundMessage("telegram", "999", "999", "hi", is_direct=True, message_id="s1"))
    await entry.receive(said(f"{PREFIX}/nosuchcommand", pressed=True))
    assert metrics.named("update_received") == [("telegram",)] * 4
