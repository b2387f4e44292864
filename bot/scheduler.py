"""Scheduled work as a service: APScheduler jobs with a start/aclose lifecycle."""

from __future__ import annotations

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
    def __init__(self, jobs: list[Job]) -> None:
        self._jobs = jobs
        self._scheduler = None

    async def start(self) -> None:
        if self._scheduler is not None:
            return
        from apscheduler.schedulers.asyncio import AsyncIOScheduler

        scheduler = AsyncIOScheduler(timezone="UTC")
        for job in self._jobs:
            scheduler.add_job(
                _logged(job),
                "interval",
                seconds=job.seconds,
                id=job.name,
                max_instances=1,
                coalesce=True,
                misfire_grace_time=None,
            )
        scheduler.start()
        self._scheduler = scheduler

    async def aclose(self) -> None:
        scheduler, self._scheduler = self._scheduler, None
        if scheduler is not None:
            scheduler.shutdown(wait=False)


def _logged(job: Job) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        try:
            await job.callback()
        except Exception as exc:  # noqa: BLE001 - one failed run must not stop the schedule
            log.warning("scheduled job %s failed (%s)", job.name, type(exc).__name__)

    return run
