"""Bursts (issue 15): quick messages of one conversation are answered together in one turn, each
stored on its own; never across a command or a change of mode; a stop mid-burst loses nothing.

The quiet window's sleep is a `ManualSleep` the test releases: no test waits on the clock."""

from __future__ import annotations

import asyncio
import itertools
import random

import pytest

from core.turn.companion import Companion
from core.values.model import InboundMessage
from tests.conftest import PASSPHRASE
from tests.helpers import engines
from tests.helpers.boot import boot_companion
from tests.helpers.chat import all_rows
from tests.helpers.fakes import FakeSender
from tests.helpers.waiting import wait_for

USER = "100"
_ids = itertools.count(1)


class ManualSleep:
    """Stands in for the burst window's sleep: windows wait until the test releases them, and from
    then on end at once (a window started just after the release ends too)."""

    def __init__(self) -> None:
        self.windows = 0
        self._release = asyncio.Event()

    async def __call__(self, seconds: float) -> None:
        self.windows += 1
        await self._release.wait()

    def release(self) -> None:
        self._release.set()


@pytest.fixture
def sender() -> FakeSender:
    return FakeSender("telegram")


@pytest.fixture
def window() -> ManualSleep:
    return ManualSleep()


@pytest.fixture
async def boot(stores, provider, clock, passphrase_hash, sender, window):
    made: list[Companion] = []

    async def start(burst_seconds: float = 1.5) -> Companion:
        companion = await boot_companion(
            stores,
            provider,
            clock,
            passphrase_hash,
            [sender],
            outbox_options={"rand": random.random},
            build_options={"burst_sleep": window},
            burst_seconds=burst_seconds,
        )
        made.append(companion)
        return companion

    yield start
    for companion in made:
        await companion.drain()


async def tell(companion: Companion, text: str):
    """What an adapter does: hand the message over, send a reply's delivery if there is one."""
    message = InboundMessage("telegram", USER, USER, text, True, message_id=f"b{next(_ids)}")
    reply = await companion.handle(message)
    if reply is not None and reply.delivery_id is not None:
        await companion.outbox.deliver(reply.conversation_id, reply.delivery_id)
    return reply


def users_of(request) -> list[str]:
    return [m.content for m in request.messages if m.role == "user"]


async def test_a_burst_of_five_is_answered_once_with_all_five_stored(boot, provider, stores, sender, window):
    companion = await boot()
    words = ["so", "I was thinking", "about the trip", "to Porto", "what do you say?"]
    for text in words:
        assert await tell(companion, text) is None  # stored, held for the rest of the burst
    assert sender.sent == [] and provider.requests == []
    window.release()
    await wait_for(lambda: len(sender.sent) == 1, what="the burst's one reply")
    assert len(provider.replies()) == 1
    assert users_of(provider.last_reply_request()) == words
    assert await all_rows(stores, "SELECT text, turn FROM messages WHERE role = 'user' ORDER BY id") == [
        (text, "done") for text in words
    ]


async def test_a_command_in_the_middle_of_a_burst_splits_it(boot, provider, stores, sender, window):
    companion = await boot()
    await tell(companion, "one")
    await tell(companion, "two")
    mode = await tell(companion, "/mode")  # the held burst is answered first, then the command alone
    assert mode is not None
    assert len(provider.replies()) == 1 and users_of(provider.last_reply_request()) == ["one", "two"]
    await tell(companion, "three")
    await tell(companion, "four")
    window.release()
    await wait_for(lambda: len(sender.sent) == 3, what="three messages out")
    assert len(provider.replies()) == 2
    assert users_of(provider.last_reply_request())[-2:] == ["three", "four"]
    # In order: the first burst's answer, the command's answer, the second burst's answer.
    assert sender.texts()[0] == "reply 1" and sender.texts()[2] == "reply 2"
    assert "mode" in sender.texts()[1].lower()


@pytest.mark.engines
async def test_a_burst_never_spans_a_change_of_mode(boot, provider, stores, sender, window):
    companion = await boot()
    await tell(companion, "normal words")
    await tell(companion, f"/private {PASSPHRASE}")
    await tell(companion, "private words")
    window.release()
    await wait_for(lambda: len(provider.replies()) == 2, what="two answers")
    first, second = provider.replies()
    assert users_of(first)[-1] == "normal words"
    assert "private words" not in "\n".join(users_of(first))
    assert users_of(second)[-1] == "private words"


async def test_a_stop_in_the_middle_of_a_burst_answers_it_once_and_the_restart_not_again(
    boot, provider, stores, sender, window, clock
):
    companion = await boot()
    for text in ["a", "b", "c"]:
        await tell(companion, text)
    await companion.drain()  # the process stops while the burst waits: the stop answers it, sent once
    assert len(provider.replies()) == 1 and users_of(provider.last_reply_request()) == ["a", "b", "c"]
    assert len(sender.sent) == 1
    assert await all_rows(stores, "SELECT count(*) FROM messages WHERE role = 'user' AND turn = 'open'") == [(0,)]
    clock.advance(5)
    restarted = await boot()
    assert await restarted.answer_open_turns() == 0
    assert len(provider.replies()) == 1 and len(sender.sent) == 1


async def test_a_burst_the_stop_cannot_answer_in_time_is_answered_once_after_the_restart(
    boot, provider, stores, sender, window, clock
):
    companion = await boot()
    for text in ["a", "b", "c"]:
        await tell(companion, text)
    provider.gate = asyncio.Event()  # the model does not answer within the stop grace
    await companion.stop(0.2)  # cut off: the messages stay open turns
    provider.gate = None
    assert sender.sent == []
    assert await all_rows(stores, "SELECT count(*) FROM messages WHERE role = 'user' AND turn = 'open'") == [(3,)]
    clock.advance(5)
    restarted = await boot()
    assert await restarted.answer_open_turns() == 1
    assert users_of(provider.last_reply_request()) == ["a", "b", "c"]
    await wait_for(lambda: len(sender.sent) == 1, what="the answer sent")


async def test_with_the_window_at_zero_each_message_is_answered_alone(boot, provider, sender, window):
    companion = await boot(burst_seconds=0)
    for text in ["x", "y"]:
        assert await tell(companion, text) is not None
    assert len(provider.replies()) == 2 and window.windows == 0


@pytest.mark.engines
async def test_a_private_burst_is_never_read_by_the_normal_turn_after_its_interval_ended(
    boot, provider, stores, sender, window, clock
):
    # A mode changes by a command (which answers the burst first) or by idle or expiry: then the
    # next message, stored in normal mode, takes the burst over and its turn reads the normal view.
    companion = await boot()
    await tell(companion, f"/private {PASSPHRASE}")
    await tell(companion, "PRIVATE-BURST-WORDS")
    clock.advance(31 * 60)  # idle: the interval ends before the next message of the burst
    await tell(companion, "normal again")
    window.release()
    await wait_for(lambda: len(provider.replies()) == 1, what="the normal turn's answer")
    assert users_of(provider.last_reply_request())[-1] == "normal again"
    assert all("PRIVATE-BURST-WORDS" not in "\n".join(users_of(r)) for r in provider.requests)
    assert await engines.rows_saying(stores, "SELECT mode FROM messages WHERE {saying}", "PRIVATE-BURST-WORDS") == [
        ("private",)
    ]


@pytest.mark.engines
async def test_a_private_burst_whose_interval_ended_while_it_waited_is_left_unread(
    boot, provider, stores, sender, window, clock
):
    companion = await boot()
    await tell(companion, f"/private {PASSPHRASE}")
    await tell(companion, "PRIVATE-BURST-WORDS")
    clock.advance(31 * 60)  # the interval ends (idle) before the window does
    window.release()
    # Every window has ended (the last one found the interval over): only then is the check final.
    await wait_for(lambda: not companion._bursts._timers, what="the burst's windows to end")
    assert provider.replies() == [] and len(sender.sent) == 1  # only /private's answer went out


async def test_a_stop_while_a_burst_is_being_answered_lets_its_reply_be_sent_and_marked(
    boot, provider, stores, sender, window
):
    started, proceed = asyncio.Event(), asyncio.Event()
    send = sender.send_delivery

    async def slow_send(delivery) -> int:
        started.set()
        await proceed.wait()
        return await send(delivery)

    sender.send_delivery = slow_send
    companion = await boot()
    await tell(companion, "one")
    await tell(companion, "two")
    window.release()
    await asyncio.wait_for(started.wait(), 10)  # the burst's reply is going out
    drain = asyncio.create_task(companion.drain())
    await asyncio.sleep(0)
    proceed.set()
    await asyncio.wait_for(drain, 10)
    assert len(sender.sent) == 1
    assert await all_rows(stores, "SELECT status FROM deliveries") == [("sent",)]
