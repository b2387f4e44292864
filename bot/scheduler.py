"""Scheduled work as a service: APScheduler jobs with a start/aclose lifecycle, watched by the gateway."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Job:
    name: str
    seconds: float
    callback: Callable[[], Awaitable[object]]


class SchedulerService:
    """Runs each job every `seconds` (one run at a time per job; missed runs coalesce).

    One failed run is logged and the schedule goes on. A job that fails `max_failures` runs in
    a row cannot do its work (the database is gone, say): the schedule has failed, and
    `wait_failed()` says so, for the gateway to stop the process rather than run on without
    its expiry sweep.

    Args:
        jobs: what to run and how often.
        max_failures: failed runs in a row of one job that end the schedule.
    """

    def __init__(self, jobs: list[Job], *, max_failures: int = 5, stop_grace: float = 10.0) -> None:
        if max_failures < 1:
            raise ValueError("max_failures must be at least 1")
        for job in jobs:
            if not job.seconds > 0:
                raise ValueError(f"the job {job.name} needs a positive interval, not {job.seconds}")
        self._jobs = jobs
        self._max_failures = max_failures
        self._stop_grace = stop_grace
        self._running: set[asyncio.Task[object]] = set()
        self._scheduler = None
        self._failed: asyncio.Future[str] | None = None

    async def start(self) -> None:
        """Start the schedule; the first run of each job is one interval from now. Safe to call twice."""
        if self._scheduler is not None:
            return
        from apscheduler.schedulers.asyncio import AsyncIOScheduler

        self._failed = asyncio.get_running_loop().create_future()
        scheduler = AsyncIOScheduler(timezone="UTC")
        for job in self._jobs:
            scheduler.add_job(
                self._watched(job),
                "interval",
                seconds=job.seconds,
                id=job.name,
                name=job.name,
                max_instances=1,
                coalesce=True,
                misfire_grace_time=None,
            )
        scheduler.start()
        self._scheduler = scheduler

    async def wait_failed(self) -> str:
        """Wait until the schedule has failed; returns one line naming the job and the error type.

        Raises:
            RuntimeError: the service is not started.
        """
        if self._failed is None:
            raise RuntimeError("the scheduler is not started")
        return await asyncio.shield(self._failed)

    async def aclose(self) -> None:
        """Stop scheduling, and let the runs in progress finish (for at most `stop_grace` seconds,
        then they are cancelled): a tick that has sent a reminder marks it sent before the stop, so
        the next start does not send it again. Safe to call twice."""
        scheduler, self._scheduler = self._scheduler, None
        if scheduler is None:
            return
        scheduler.pause()  # no new run starts; the ones going may finish
        running = set(self._running)
        if running:
            _, pending = await asyncio.wait(running, timeout=self._stop_grace)
            if pending:
                log.warning("%d scheduled runs still going at the stop are cancelled", len(pending))
        scheduler.shutdown(wait=False)  # APScheduler's executor cancels what is still running
        still = set(self._running)
        for task in still:
            task.cancel()
        if still:
            await asyncio.gather(*still, return_exceptions=True)

    def _watched(self, job: Job) -> Callable[[], Awaitable[None]]:
        failures = 0

        async def run() -> None:
            nonlocal failures
            task = asyncio.current_task()
            if task is not None:
                self._running.add(task)
            try:
                await job.callback()
            except Exception as exc:  # noqa: BLE001 - one failed run must not stop the schedule
                failures += 1
                log.warning(
                    "scheduled job %s failed (%s), %d of %d in a row",
                    job.name,
                    type(exc).__name__,
                    failures,
                    self._max_failures,
                )
                if failures >= self._max_failures and self._failed is not None and not self._failed.done():
                    self._failed.set_result(
                        f"the scheduled job {job.name} failed {failures} times in a row ({type(exc).__name__})"
                    )
            else:
                failures = 0
            finally:
                if task is not None:
                    self._running.discard(task)

        return run


def once_across(job: Job, take: Callable[[str, float], Awaitable[bool]]) -> Job:
    """`job` run once per interval across the processes of a shared database: each process's tick asks `take`
    (adapters/storage/claims.py `JobSlots.take`) for the job's current slot, and only the one that wins it runs."""

    async def run() -> object:
        if not await take(job.name, job.seconds):
            return None
        return await job.callback()

    return Job(job.name, job.seconds, run)
