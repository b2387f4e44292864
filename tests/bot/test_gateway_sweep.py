"""The gateway's schedule: expired private segments leave the database while it runs, not only at start-up."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from bot import gateway
from bot.settings import Settings
from core.secrets import hash_passphrase
from tests.helpers.fake_telegram import FakeTelegramServer

USER = 111
# The schedule runs this many times faster in the test: the sweep's minute is 0.1 s.
SPEED_UP = 600.0


class FastSchedule:
    """Stands in for the gateway's SchedulerService class: the real service, given the gateway's
    own jobs with every interval divided by SPEED_UP; each run wakes `wait_for`."""

    def __init__(self) -> None:
        self.real = gateway.SchedulerService
        self.jobs: list[gateway.Job] = []
        self._ran = asyncio.Event()

    def __call__(self, *args: object, **kwargs: object) -> object:
        return self.real(*(self._fast(a) for a in args), **{k: self._fast(v) for k, v in kwargs.items()})

    def _fast(self, value: object) -> object:
        if not isinstance(value, list):
            return value
        jobs = [
            dataclasses.replace(job, seconds=max(job.seconds / SPEED_UP, 0.05), callback=self._observed(job.callback))
            for job in value
        ]
        self.jobs += jobs
        return jobs

    def _observed(self, callback: Callable) -> Callable:
        async def run() -> object:
            try:
                return await callback()
            finally:
                self._ran.set()
                self._ran = asyncio.Event()

        return run

    async def wait_for(self, predicate: Callable[[], bool], timeout: float) -> None:
        """Wait until `predicate()` holds, re-checked after every run of a scheduled job."""
        async with asyncio.timeout(timeout):
            while True:
                ran = self._ran
                if predicate():
                    return
                await ran.wait()


def count(db_path: Path, table: str) -> int:
    with sqlite3.connect(db_path) as db:
        return db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


@contextlib.asynccontextmanager
async def running_gateway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **settings: object):
    """`companion run` in this process on a fake Bot API, its schedule on FastSchedule."""
    schedule = FastSchedule()
    monkeypatch.setattr(gateway, "SchedulerService", schedule)
    async with FakeTelegramServer() as telegram:
        config = Settings(
            _env_file=None,
            telegram_token=telegram.token,
            telegram_base_url=telegram.base_url,
            allowed_users=f"telegram:{USER}",
            private_passphrase_hash=hash_passphrase("sesame"),
            db_path=tmp_path / "companion.db",
            **settings,
        )
        stop = asyncio.Event()
        run = asyncio.create_task(gateway.run_gateway(config, stop))
        try:
            await telegram.wait_for_polling()
            assert schedule.jobs, "the gateway gave its scheduler no jobs"
            yield telegram, schedule
        finally:
            stop.set()
            assert await asyncio.wait_for(run, 30) == 0


async def say(telegram: FakeTelegramServer, text: str) -> str:
    before = len(telegram.sent)
    telegram.send_text(USER, USER, text)
    return (await telegram.wait_for_sent(before + 1))[before].text


async def test_the_gateway_sweeps_an_expired_private_segment_while_it_runs(tmp_path, monkeypatch):
    db_path = tmp_path / "companion.db"
    async with running_gateway(tmp_path, monkeypatch) as (telegram, schedule):
        assert (await say(telegram, "/private sesame 1s")).startswith("Private mode is on")
        # Nobody writes again, so nothing but a scheduled job can delete the segment once it expired.
        try:
            await schedule.wait_for(lambda: count(db_path, "segments") == 0, timeout=5.0)
        except TimeoutError:
            raise AssertionError("the expired segment outlived 50 (fast) minutes of the schedule") from None


async def test_the_gateway_deletes_a_crossing_artifact_at_its_retention_while_it_runs(tmp_path, monkeypatch):
    db_path = tmp_path / "companion.db"
    retention = {"allow_private_export": True, "artifact_retention_days": 2 / 86400}  # two seconds
    async with running_gateway(tmp_path, monkeypatch, **retention) as (telegram, schedule):
        await say(telegram, "/private sesame 1h")
        await say(telegram, "/export")
        assert (await say(telegram, "/export confirm")).startswith("Created non-private artifact")
        assert count(db_path, "artifacts") == 1
        try:
            await schedule.wait_for(lambda: count(db_path, "artifacts") == 0, timeout=8.0)
        except TimeoutError:
            raise AssertionError("the artifact outlived its retention by 50 (fast) minutes of the schedule") from None
