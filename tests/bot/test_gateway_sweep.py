"""`companion run` in this process: expired private segments and crossing artifacts leave the
database while the gateway runs, not only at start-up (the expiry sweep is scheduled)."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from bot.gateway import run_gateway
from bot.settings import load_settings
from core.privacy.secrets import hash_passphrase
from tests.helpers.fake_telegram import FakeTelegramServer

USER = 111
SWEEP_SECONDS = 0.1  # the sweep's minute, shortened through its setting


def count(db_path: Path, table: str) -> int:
    with sqlite3.connect(db_path) as db:
        return db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


async def wait_until(condition: Callable[[], bool], timeout: float, failure: str) -> None:
    """Re-check `condition` every 50 ms until it holds; fail with `failure` after `timeout` seconds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, failure
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def running_gateway(tmp_path: Path, **overrides: object) -> AsyncIterator[FakeTelegramServer]:
    """`companion run` on a fake Bot API, with the expiry sweep every SWEEP_SECONDS."""
    async with FakeTelegramServer() as telegram:
        settings = load_settings(
            _env_file=None,
            telegram_token=telegram.token,
            telegram_base_url=telegram.base_url,
            allowed_users=f"telegram:{USER}",
            private_passphrase_hash=hash_passphrase("sesame"),
            db_path=tmp_path / "companion.db",
            expiry_sweep_seconds=SWEEP_SECONDS,
            http_port=0,  # any free port: the shipped 8765 may be another test's at the same moment
            **overrides,
        )
        stop = asyncio.Event()
        run = asyncio.create_task(run_gateway(settings, stop))
        try:
            await telegram.wait_for_polling(timeout=30)  # a bound, not a time: a start under a full suite's load
            yield telegram
        finally:
            stop.set()
            assert await asyncio.wait_for(run, 30) == 0


async def say(telegram: FakeTelegramServer, text: str) -> str:
    before = len(telegram.sent)
    telegram.send_text(USER, USER, text)
    return (await telegram.wait_for_sent(before + 1))[before].text


async def test_the_gateway_sweeps_an_expired_private_segment_while_it_runs(tmp_path):
    async with running_gateway(tmp_path) as telegram:
        assert (await say(telegram, "/private sesame 1s")).startswith("Private mode is on")
        # Nobody writes again, so nothing but the scheduled sweep can delete the segment once it expired.
        await wait_until(
            lambda: count(tmp_path / "companion.db", "segments") == 0,
            timeout=5.0,
            failure="the expired segment outlived 50 rounds of the sweep's schedule",
        )


async def test_the_gateway_deletes_a_crossing_artifact_at_its_retention_while_it_runs(tmp_path):
    retention = {"allow_private_export": True, "artifact_retention_days": 2 / 86400}  # two seconds
    async with running_gateway(tmp_path, **retention) as telegram:
        await say(telegram, "/private sesame 1h")
        await say(telegram, "/export")
        assert (await say(telegram, "/export confirm")).startswith("Created non-private artifact")
        assert count(tmp_path / "companion.db", "artifacts") == 1
        await wait_until(
            lambda: count(tmp_path / "companion.db", "artifacts") == 0,
            timeout=8.0,
            failure="the artifact outlived its retention by 60 rounds of the sweep's schedule",
        )
