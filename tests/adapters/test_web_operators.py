"""GET /livez, /readyz and /metrics: no sign-in, nothing personal; /readyz is 503 naming the part that fails."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time

import httpx

from adapters.web.operators import PROBE_LIMIT, DatabaseProbe
from core.values.edge import EdgeSettings
from core.values.errors import StoreError
from tests.helpers.adapters import core_for, discord_adapter, telegram_adapter
from tests.helpers.fake_discord import FakeDiscordServer
from tests.helpers.fake_telegram import FakeTelegramServer
from tests.helpers.fakes import FakeClock
from tests.helpers.web import served


class Monotonic:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


async def nothing(message):
    return None


async def eventually(condition, what: str, timeout: float = 20.0) -> None:
    """Re-check `condition` every 20 ms (another task's progress); fail after `timeout` seconds."""
    async with asyncio.timeout(timeout):
        while not condition():  # noqa: ASYNC110 - another task's state, with no event of its own to await
            await asyncio.sleep(0.02)
    assert condition(), what


async def test_livez_and_readyz_answer_without_sign_in_and_say_nothing_personal(stores):
    async with served(stores, FakeClock()) as web:
        live = await web.client.get("/livez")
        assert live.status_code == 200 and live.json() == {"status": "alive"}
        ready = await web.client.get("/readyz")
        assert ready.status_code == 200
        assert ready.json() == {"status": "ready", "failing": [], "parts": {"http": "ok", "database": "ok"}}
        metrics = await web.client.get("/metrics")
        assert metrics.status_code == 200 and metrics.headers["content-type"].startswith("text/plain")
        assert "companion_turns_total" in metrics.text


async def test_readyz_is_503_naming_the_database_when_it_takes_no_writes(stores):
    failing = True

    async def write(now: float) -> None:
        if failing:
            raise StoreError("disk full")
        await stores.database.connection.execute("SELECT 1")

    probe = DatabaseProbe(write)
    async with served(stores, FakeClock(), probe=probe) as web:
        answer = await web.client.get("/readyz")
        assert answer.status_code == 503
        assert answer.json()["failing"] == ["database"]
        assert answer.json()["parts"]["database"] == "not writable (StoreError)"
        assert "disk full" not in answer.text  # a type, never an error's words
        failing = False
        await probe.probe()
        assert (await web.client.get("/readyz")).status_code == 200


async def test_readyz_is_503_naming_the_database_while_a_probe_write_waits_past_its_limit(stores):
    clock = Monotonic()
    release = asyncio.Event()

    async def write(now: float) -> None:
        await release.wait()

    probe = DatabaseProbe(write, monotonic=clock)
    release.set()
    async with served(stores, FakeClock(), probe=probe) as web:
        release.clear()
        waiting = asyncio.create_task(probe.probe())
        await asyncio.sleep(0)
        assert (await web.client.get("/readyz")).status_code == 200  # waiting, but not for long yet
        clock.t += PROBE_LIMIT + 1
        answer = await web.client.get("/readyz")
        assert answer.status_code == 503 and answer.json()["parts"]["database"] == "a write has waited 11 s"
        release.set()
        await waiting
        assert (await web.client.get("/readyz")).status_code == 200


async def test_readyz_is_503_naming_telegram_when_its_long_poll_has_not_completed_for_120_seconds(stores, caplog):
    caplog.set_level(logging.WARNING, logger="adapters.telegram")
    clock = Monotonic()
    async with FakeTelegramServer() as telegram:
        adapter = telegram_adapter(telegram, core_for(nothing), monotonic=clock, edge=EdgeSettings(send_backoff=0.01))
        await adapter.start()
        try:
            async with served(stores, FakeClock(), checks=[("telegram", adapter.ready)]) as web:
                await telegram.wait_for_polling()
                assert (await web.client.get("/readyz")).status_code == 200
                await telegram.go_down()  # the Bot API stops answering long polls
                await eventually(lambda: "getUpdates failed" in caplog.text, "a long poll to fail")
                clock.t += 119
                assert (await web.client.get("/readyz")).status_code == 200  # not yet 120 s
                clock.t += 2
                answer = await web.client.get("/readyz")
                assert answer.status_code == 503 and answer.json()["failing"] == ["telegram"]
                assert answer.json()["parts"]["telegram"] == "no long poll completed for 121 s"
                await telegram.come_back()
                await eventually(lambda: adapter.ready() is None, "a long poll to complete again")
                assert (await web.client.get("/readyz")).status_code == 200
        finally:
            await adapter.aclose()
        assert adapter.ready() == "not polling"


async def test_readyz_is_503_naming_discord_while_its_gateway_is_disconnected(stores):
    async with FakeDiscordServer() as discord_server:
        adapter = discord_adapter(discord_server, core_for(nothing))
        await adapter.start()
        try:
            async with served(stores, FakeClock(), checks=[("discord", adapter.ready)]) as web:
                assert (await web.client.get("/readyz")).status_code == 200
                await discord_server.go_down()
                await discord_server.close_gateway(4000)  # discord.py reconnects, and cannot reach it
                await eventually(lambda: adapter.ready() is not None, "the disconnect to be seen")
                answer = await web.client.get("/readyz")
                assert answer.status_code == 503 and answer.json()["failing"] == ["discord"]
                assert answer.json()["parts"]["discord"] == "gateway disconnected; reconnecting"
                await discord_server.come_back()
                await eventually(lambda: adapter.ready() is None, "the gateway to resume", timeout=60)
                assert (await web.client.get("/readyz")).status_code == 200
        finally:
            await adapter.aclose()
        assert adapter.ready() == "not connected"


async def test_readyz_says_the_service_is_stopping_once_the_stop_began(stores):
    async with served(stores, FakeClock()) as web:
        await web.service.stop_intake()
        answer = await web.client.get("/readyz")
        assert answer.status_code == 503 and answer.json()["failing"] == ["http"]
        assert (await web.client.get("/livez")).status_code == 200  # alive while it stops


async def test_readyz_answers_while_the_core_loop_is_stuck_and_livez_says_it_stopped_answering(stores):
    async with served(stores, FakeClock(), live_limit=0.3) as web:
        url = web.service.url
        answered = threading.Event()

        def probe_meanwhile() -> tuple[httpx.Response, httpx.Response]:
            time.sleep(0.6)  # the core's loop has been stuck this long
            answers = httpx.get(f"{url}/livez", timeout=5), httpx.get(f"{url}/readyz", timeout=5)
            answered.set()
            return answers

        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            answers = pool.submit(probe_meanwhile)
            # The core's loop (this test's) is stuck until both answers came: had they needed it, they never would.
            assert answered.wait(timeout=20)
            live, ready = answers.result()
        assert live.status_code == 503 and live.json()["loop"].startswith("the event loop has not answered for")
        assert ready.status_code == 200
        await eventually(lambda: web.service.alive() is None, "the heartbeat to come back")
        assert (await web.client.get("/livez")).status_code == 200
