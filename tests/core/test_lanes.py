"""Conversation lanes (core/turn/lanes.py), pure asyncio: one order per chat, chats side by side,
work that outlives its waiter, a chat that moved keeps its order, and a stop that cuts off late work."""

from __future__ import annotations

import asyncio

import pytest

from core.turn.lanes import Lanes, LanesClosed


async def test_events_of_one_lane_run_one_at_a_time_in_submission_order():
    lanes: Lanes[str] = Lanes()
    seen: list[str] = []
    running = 0

    def work(name: str):
        async def run() -> str:
            nonlocal running
            running += 1
            assert running == 1, "two events of one lane ran at once"
            await asyncio.sleep(0)
            seen.append(name)
            running -= 1
            return name

        return run

    results = await asyncio.gather(*(lanes.submit("chat", work(str(i))) for i in range(20)))
    assert seen == [str(i) for i in range(20)] == list(results)


async def test_different_lanes_run_side_by_side():
    lanes: Lanes[str] = Lanes()
    first_waits = asyncio.Event()

    async def slow() -> str:
        await first_waits.wait()
        return "slow"

    async def quick() -> str:
        return "quick"

    slow_done = lanes.submit("a", slow)
    # Would wait for ever if the second chat queued behind the first.
    assert await asyncio.wait_for(lanes.submit("b", quick), 5) == "quick"
    first_waits.set()
    assert await slow_done == "slow"


async def test_work_goes_on_when_its_waiter_stops_waiting():
    lanes: Lanes[str] = Lanes()
    release = asyncio.Event()
    finished: list[str] = []

    async def turn() -> None:
        await release.wait()
        finished.append("turn")

    waiter = asyncio.create_task(lanes.run("chat", turn))
    await asyncio.sleep(0)
    waiter.cancel()  # an adapter gives up waiting for its reply
    await asyncio.gather(waiter, return_exceptions=True)
    release.set()
    assert await lanes.idle(5)
    assert finished == ["turn"]


async def test_a_failure_reaches_its_waiter_and_the_lane_goes_on():
    lanes: Lanes[str] = Lanes()

    async def broken() -> None:
        raise ValueError("broken")

    async def fine() -> str:
        return "fine"

    failed = lanes.submit("chat", broken)
    after = lanes.submit("chat", fine)
    with pytest.raises(ValueError, match="broken"):
        await failed
    assert await after == "fine"


async def test_after_a_chat_moved_its_new_id_joins_the_old_lane():
    lanes: Lanes[tuple[str, str]] = Lanes()
    release = asyncio.Event()
    order: list[str] = []

    async def old_turn() -> None:
        await release.wait()
        order.append("old chat")

    async def new_turn() -> None:
        order.append("new chat")

    lanes.submit(("telegram", "-1"), old_turn)
    lanes.follow(("telegram", "-1"), ("telegram", "-100"))
    moved = lanes.submit(("telegram", "-100"), new_turn)
    await asyncio.sleep(0.01)
    assert order == []  # the new id waits for the old id's turn: one order across the move
    release.set()
    await moved
    assert order == ["old chat", "new chat"]


async def test_a_stop_lets_quick_work_finish_and_cuts_off_late_work():
    lanes: Lanes[str] = Lanes()
    done: list[str] = []

    async def quick() -> None:
        done.append("quick")

    async def late() -> None:
        await asyncio.Event().wait()

    quick_done = lanes.submit("a", quick)
    late_done = lanes.submit("b", late)
    queued = lanes.submit("b", quick)
    assert await lanes.drain(0.05) == 1
    await quick_done
    assert done == ["quick"]
    assert late_done.cancelled() and queued.cancelled()  # cut off: the next start answers them
    with pytest.raises(LanesClosed):
        lanes.submit("c", quick)
