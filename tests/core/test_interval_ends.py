"""The end of an interval ends what it shows (issue 29, point 4), in the core with a real store, a
provider that streams and a fake platform: when a private interval ends (expiry, /normal, /forget
private) while its answer is shown or waits to be sent, nothing more of it is posted or edited, and
what it showed is edited once into the constant line. The same through `companion run` and the real
platform libraries: tests/bot/test_interval_end_wire.py."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from core.delivery.streams import StreamPacing
from core.turn.companion import Companion
from core.values import copy
from core.values.errors import DeliveryFailed
from core.values.model import Completion, ConversationKey, InboundMessage, Reply
from tests.conftest import PASSPHRASE
from tests.core.test_metrics import FakeMetrics
from tests.helpers import engines
from tests.helpers.boot import boot_companion
from tests.helpers.chat import all_rows
from tests.helpers.fakes import FakeStreamer
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.engines

USER = "100"
_ids = itertools.count(1)
CANARY = "INTERVAL-END-CANARY"
STORY = f"{CANARY} " + " ".join(f"hush{n}" for n in range(40)) + "."
QUICK = StreamPacing(edit_seconds=0.05, first_seconds=0.02)
EXPIRY = 600.0  # "/private PASSPHRASE 10m": within the idle timeout (30 minutes), as the clock moves here


class HeldStreamer(FakeStreamer):
    """A platform whose final sends wait while `held` (a send in flight, or retrying inside its
    adapter); `cancelled` counts sends cut off while they waited."""

    def __init__(self) -> None:
        super().__init__("telegram")
        self._free = asyncio.Event()
        self._free.set()
        self.waiting = 0
        self.cancelled = 0
        self.hang_next_edit = False  # the next edit while written waits until cut off (a platform hanging)

    @property
    def held(self) -> bool:
        return not self._free.is_set()

    @held.setter
    def held(self, held: bool) -> None:
        if held:
            self._free.clear()
        else:
            self._free.set()

    async def edit(self, reply, message_id: str, text: str) -> None:
        if reply is not None and self.hang_next_edit:
            self.hang_next_edit = False
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        await super().edit(reply, message_id, text)

    async def send_delivery(self, delivery) -> int:
        if self.down:  # its final edit too
            raise DeliveryFailed("NetworkError", permanent=False, parts_sent=delivery.parts_sent)
        self.waiting += 1
        try:
            await self._free.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.waiting -= 1
        return await super().send_delivery(delivery)


@pytest.fixture
def telegram() -> HeldStreamer:
    return HeldStreamer()


@pytest.fixture
def metrics() -> FakeMetrics:
    return FakeMetrics()


@pytest.fixture
def boot(stores, provider, clock, passphrase_hash, telegram, metrics):
    provider.streams = True
    provider.stream_steps = 40
    provider.stream_pause = 0.03

    async def start() -> Companion:
        # Bursts off: each test message is its own turn (the wire tests keep the shipped window).
        companion = await boot_companion(
            stores,
            provider,
            clock,
            passphrase_hash,
            (telegram,),
            outbox_options={"pacing": QUICK, "base_delay": 0.01, "max_delay": 0.01, "metrics": metrics},
            burst_seconds=0.0,
        )
        companion.outbox.register_streamer(telegram)
        return companion

    return start


async def tell(companion: Companion, text: str) -> Reply | None:
    message = InboundMessage("telegram", USER, USER, text, is_direct=True, message_id=f"m{next(_ids)}")
    reply = await companion.handle(message)
    if reply is not None and reply.delivery_id is not None and reply.conversation_id is not None:
        companion.outbox.hand_over(reply.conversation_id, reply.delivery_id)  # what an adapter does
    return reply


async def enter(companion: Companion, command: str) -> None:
    """Private mode on, and its answer sent (a reply of the lane still pending would keep the next
    one from being shown while written)."""
    await tell(companion, command)
    await companion.outbox.settle(5)


def shown_after(telegram: FakeStreamer, posts: int, edits: int) -> list[str]:
    """Every text posted or edited since the counts `posts` and `edits`."""
    return [text for _, text in telegram.posts_shown[posts:] + telegram.edits[edits:]]


async def test_a_private_answer_streaming_at_its_expiry_is_edited_once_into_the_constant_line_and_stops(
    boot, provider, telegram, stores, clock
):
    companion = await boot()
    await enter(companion, f"/private {PASSPHRASE} 10m")
    provider.script.append(Completion(STORY))
    turn = asyncio.create_task(tell(companion, "tell me everything"))
    await wait_for(lambda: telegram.posts_shown and len(telegram.edits) >= 2, what="the answer shown while written")
    [(message_id, _)] = telegram.posts_shown
    posts, edits = len(telegram.posts_shown), len(telegram.edits)
    clock.advance(EXPIRY)  # the interval expires mid-answer
    await wait_for(lambda: telegram.messages[message_id] == copy.INTERVAL_ENDED_SHOWN, what="the constant line")
    assert await turn is None  # no answer, no apology
    await companion.outbox.settle(5)
    await companion.outbox.dispatch_due(at_start=True)
    # After the end: one edit, into the constant line; nothing posted, nothing more of the answer.
    assert shown_after(telegram, posts, edits) == [copy.INTERVAL_ENDED_SHOWN]
    assert telegram.messages == {message_id: copy.INTERVAL_ENDED_SHOWN}
    # The model's answer was cut off at its next words: the turn did not run on to its end.
    assert len(provider.partials) < provider.stream_steps
    # Nothing of it is stored, and nothing of it waits to be sent (the withdrawn line is gone once sent).
    assert await engines.rows_saying(
        stores, "SELECT count(*) FROM messages WHERE role = 'assistant' AND {saying}", f"%{CANARY}%", like=True
    ) == [(0,)]
    assert await all_rows(stores, "SELECT status FROM deliveries WHERE status IN ('pending', 'streaming')") == []
    assert await all_rows(stores, "SELECT count(*) FROM deliveries WHERE retracts = 1") == [(0,)]


async def test_a_private_answer_whose_final_send_runs_into_its_expiry_is_cut_off_there(
    boot, provider, telegram, stores, clock
):
    companion = await boot()
    await enter(companion, f"/private {PASSPHRASE} 10m")
    clock.advance(EXPIRY - 1)  # the expiry is a second away (this clock stands still meanwhile) ...
    provider.script.append(Completion(STORY))
    telegram.held = True  # ... and comes while the final send waits (Telegram answering 502, the adapter retrying)
    await tell(companion, "tell me everything")
    await wait_for(lambda: telegram.waiting == 1, what="the final send in flight")
    [(message_id, _)] = telegram.posts_shown
    posts, edits = len(telegram.posts_shown), len(telegram.edits)
    await wait_for(lambda: telegram.cancelled == 1, what="the send cut off at the expiry")
    telegram.held = False  # the platform is back
    await wait_for(lambda: telegram.messages[message_id] == copy.INTERVAL_ENDED_SHOWN, what="the constant line")
    clock.advance(1)
    await companion.outbox.dispatch_due(at_start=True)
    await companion.sweep()
    await companion.outbox.settle(5)
    assert shown_after(telegram, posts, edits) == [copy.INTERVAL_ENDED_SHOWN]
    assert STORY not in telegram.texts()


async def test_an_edit_of_a_private_answer_still_running_at_its_expiry_is_cut_off_there(
    boot, provider, telegram, stores, clock
):
    companion = await boot()
    await enter(companion, f"/private {PASSPHRASE} 10m")
    clock.advance(EXPIRY - 1)  # the expiry a second away (this clock stands still meanwhile)
    provider.script.append(Completion(STORY))
    telegram.hang_next_edit = True  # the platform takes the first edit and never answers
    turn = asyncio.create_task(tell(companion, "tell me everything"))
    await wait_for(lambda: telegram.cancelled == 1, what="the edit cut off at the expiry")
    [(message_id, first)] = telegram.posts_shown
    await wait_for(lambda: telegram.messages[message_id] == copy.INTERVAL_ENDED_SHOWN, what="the constant line")
    assert await turn is None
    assert [text for _, text in telegram.edits] == [copy.INTERVAL_ENDED_SHOWN] and CANARY.startswith(first)


@pytest.mark.parametrize("ending", ["/normal", "/forget private"])
async def test_a_private_answer_still_being_sent_when_the_interval_is_left_is_cut_off_and_withdrawn(
    boot, provider, telegram, stores, ending
):
    companion = await boot()
    await enter(companion, f"/private {PASSPHRASE}")
    provider.script.append(Completion(STORY))
    telegram.held = True
    await tell(companion, "tell me everything")
    await wait_for(lambda: telegram.waiting == 1, what="the final send in flight")
    [(message_id, _)] = telegram.posts_shown
    posts, edits = len(telegram.posts_shown), len(telegram.edits)
    ended = asyncio.create_task(tell(companion, ending))
    await wait_for(lambda: telegram.cancelled == 1, what="the send cut off by the end")
    telegram.held = False
    await ended
    await companion.outbox.settle(5)
    await companion.outbox.dispatch_due(at_start=True)
    assert telegram.messages[message_id] == copy.INTERVAL_ENDED_SHOWN
    after = shown_after(telegram, posts, edits)
    assert after.count(copy.INTERVAL_ENDED_SHOWN) == 1
    assert all(CANARY not in text for text in after) and STORY not in telegram.texts()


async def test_a_private_reply_picked_to_be_sent_before_its_interval_ended_does_not_start_after_it(
    boot, provider, telegram, stores
):
    companion = await boot()
    provider.streams = False  # sent whole: one lane, two rows
    telegram.down = True
    await tell(companion, "a normal question")  # its answer waits, pending, in the lane
    await companion.outbox.settle(5)
    await tell(companion, f"/private {PASSPHRASE}")
    provider.script.append(Completion(STORY))
    private = await tell(companion, "a private question")
    await companion.outbox.settle(5)
    telegram.down = False
    telegram.held = True  # the lane's first row (normal) is being sent ...
    assert private is not None and private.delivery_id is not None
    sending = asyncio.create_task(companion.outbox.deliver(private.conversation_id, private.delivery_id))
    await wait_for(lambda: telegram.waiting == 1, what="the normal answer in flight")
    conversation = await stores.timeline.conversation_at(ConversationKey("telegram", USER))
    assert conversation is not None
    await companion.valve.leave(conversation)  # ... when /normal ends the interval
    await companion.outbox.settle(5)
    telegram.held = False
    await sending
    assert "reply 1" in telegram.texts() and STORY not in telegram.texts()


async def test_a_private_turn_whose_interval_expires_during_the_model_call_writes_and_sends_nothing(
    boot, provider, telegram, stores, clock
):
    companion = await boot()
    await enter(companion, f"/private {PASSPHRASE} 10m")
    provider.streams = False
    provider.gate = asyncio.Event()
    provider.script.append(Completion(STORY))
    turn = asyncio.create_task(tell(companion, "tell me everything"))
    await wait_for(lambda: len(provider.requests) == 1, what="the model asked")
    clock.advance(EXPIRY)
    provider.gate.set()
    assert await turn is None
    await companion.outbox.settle(5)
    [entered] = telegram.texts()  # /private's answer, and no other: no answer, no apology
    assert entered.startswith("Private mode is on")
    assert await engines.rows_saying(
        stores, "SELECT count(*) FROM messages WHERE role = 'assistant' AND {saying}", STORY
    ) == [(0,)]


async def test_the_sweep_withdraws_what_an_expired_answer_showed_at_once_and_counts_it_nowhere(
    boot, provider, telegram, stores, clock, metrics
):
    companion = await boot()
    await enter(companion, f"/private {PASSPHRASE} 10m")
    provider.script.append(Completion(STORY))
    telegram.down = True  # its final edit fails: the reply waits, pending, for a retry
    await tell(companion, "tell me everything")
    await wait_for(lambda: telegram.posts_shown, what="the answer shown while written")
    await companion.outbox.settle(5)
    [(message_id, _)] = telegram.posts_shown
    telegram.down = False
    clock.advance(EXPIRY)
    assert await companion.sweep() == 1
    await companion.outbox.settle(5)
    assert telegram.messages[message_id] == copy.INTERVAL_ENDED_SHOWN
    assert await all_rows(stores, "SELECT count(*) FROM deliveries") == [(0,)]
    # As private as the answer it withdraws: no counter moved for it (nor for anything of the interval).
    assert metrics.named("delivery_settled") == [] and metrics.named("send_error") == []
