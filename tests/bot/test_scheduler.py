"""SchedulerService through the real APScheduler: the gateway's jobs run at the intervals the settings give,
and a job that keeps failing ends the schedule."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace

import pytest

from bot.bootstrap import scheduled_jobs
from bot.scheduler import Job, SchedulerService
from bot.settings import load_settings
from tests.conftest import PASSPHRASE
from tests.helpers.chat import all_rows, say

DEADLINE = 10.0


async def wait_for(condition: Callable[[], object], what: str) -> None:
    deadline = asyncio.get_running_loop().time() + DEADLINE
    while not await condition():
        assert asyncio.get_running_loop().time() < deadline, f"timed out after {DEADLINE} s waiting for {what}"
        await asyncio.sleep(0.02)


async def test_the_gateway_schedule_deletes_expired_private_segments_and_captures_pending_messages(
    companion, stores, clock
):
    await say(companion, "my sister is called Ana")
    clock.advance(5)  # before the segment's span: capture may take it whether or not the sweep ran first
    assert "Private mode is on" in (await say(companion, f"/private {PASSPHRASE} 1h")).text
    await say(companion, "PRIVATE-SCHEDULE-CANARY")
    clock.advance(3601)  # the segment is past its expiry; only the sweep deletes it
    assert await all_rows(stores, "SELECT count(*) FROM segments") == [(1,)]
    assert ("pending",) in await all_rows(stores, "SELECT capture FROM messages WHERE kind = 'chat'")

    settings = load_settings(_env_file=None, expiry_sweep_seconds=0.05, capture_seconds=0.05)
    service = SchedulerService(scheduled_jobs(settings, companion))
    await service.start()
    try:

        async def swept() -> bool:
            return await all_rows(stores, "SELECT count(*) FROM segments") == [(0,)]

        async def captured() -> bool:
            rows = await all_rows(stores, "SELECT capture FROM messages WHERE kind = 'chat'")
            return ("pending",) not in rows and ("done",) in rows

        await wait_for(swept, "the expiry sweep to delete the expired segment")
        await wait_for(captured, "the capture job to process the pending messages")
    finally:
        await service.aclose()
    assert await all_rows(stores, "SELECT count(*) FROM messages WHERE text LIKE '%PRIVATE-SCHEDULE-CANARY%'") == [(0,)]


def test_the_intervals_are_settings():
    settings = load_settings(
        _env_file=None,
        expiry_sweep_seconds=7,
        capture_seconds=11,
        outbox_tick_seconds=13,
        outbox_prune_seconds=17,
        proactive_tick_seconds=19,
    )

    companion = SimpleNamespace(
        sweep=None,
        capture=SimpleNamespace(run_once=None),
        outbox=SimpleNamespace(dispatch_due=None, prune=None),
        proactive=SimpleNamespace(tick=None),
    )
    jobs = {job.name: job.seconds for job in scheduled_jobs(settings, companion)}
    assert jobs == {"expiry-sweep": 7, "capture": 11, "outbox": 13, "outbox-prune": 17, "proactive": 19}


async def test_a_job_failing_run_after_run_ends_the_schedule_with_one_line():
    runs = 0

    async def broken() -> None:
        nonlocal runs
        runs += 1
        raise OSError("disk gone")

    service = SchedulerService([Job("expiry-sweep", 0.02, broken)], max_failures=3)
    await service.start()
    try:
        line = await asyncio.wait_for(service.wait_failed(), DEADLINE)
    finally:
        await service.aclose()
    assert line == "the scheduled job expiry-sweep failed 3 times in a row (OSError)"
    assert runs == 3


async def test_failures_that_are_not_in_a_row_do_not_end_the_schedule():
    runs = 0

    async def flaky() -> None:
        nonlocal runs
        runs += 1
        if runs % 2:
            raise OSError("one bad run")

    service = SchedulerService([Job("capture", 0.02, flaky)], max_failures=2)
    await service.start()
    failed = asyncio.ensure_future(service.wait_failed())
    try:

        async def ten_runs() -> bool:
            return runs >= 10

        await wait_for(ten_runs, "ten runs")  # five failures, never two in a row
        assert not failed.done()
    finally:
        failed.cancel()
        await service.aclose()


async def test_a_stop_lets_a_run_in_progress_finish_so_a_sent_reminder_is_marked_before_it():
    sent, marked = asyncio.Event(), asyncio.Event()

    async def tick() -> None:
        sent.set()  # the reminder went out...
        await asyncio.sleep(0.2)
        marked.set()  # ...and is marked sent

    scheduler = SchedulerService([Job("proactive", 0.05, tick)], stop_grace=5.0)
    await scheduler.start()
    await asyncio.wait_for(sent.wait(), 10)
    await scheduler.aclose()
    assert marked.is_set()


async def test_a_run_still_going_after_the_stop_grace_is_cancelled():
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def stuck() -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    scheduler = SchedulerService([Job("stuck", 0.05, stuck)], stop_grace=0.1)
    await scheduler.start()
    await asyncio.wait_for(started.wait(), 10)
    await scheduler.aclose()
    assert cancelled.is_set()


async def test_a_job_slower_than_its_interval_never_runs_twice_at_once():
    going = most = runs = 0

    async def slow() -> None:
        nonlocal going, most, runs
        going += 1
        most = max(most, going)
        await asyncio.sleep(0.05)  # five intervals: the grid points it misses coalesce
        going -= 1
        runs += 1

    service = SchedulerService([Job("capture", 0.01, slow)])
    await service.start()
    try:

        async def three_runs() -> bool:
            return runs >= 3

        await wait_for(three_runs, "three runs")
    finally:
        await service.aclose()
    assert most == 1


def test_a_job_without_a_positive_interval_is_refused_rather_than_run_in_a_busy_loop():
    async def nothing() -> None:
        return None

    with pytest.raises(ValueError, match="needs a positive interval"):
        SchedulerService([Job("capture", 0, nothing)])
