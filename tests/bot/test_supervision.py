"""The gateway supervises what it runs: a platform connection lost for good, or a schedule that keeps
failing, stops `companion run` with one line and an exit code a supervisor acts on (real processes)."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3

import pytest

from bot.gateway import _first_loss
from tests.bot.test_gateway_discord import discord_env
from tests.helpers.adapters import PlatformRun, core_for, discord_adapter
from tests.helpers.fake_discord import FakeDiscordServer
from tests.helpers.running import Running


@pytest.mark.wire
def test_a_discord_token_rejected_while_running_stops_the_gateway_with_exit_2_and_one_line(
    tmp_path, discord_servers, passphrase_hash
):
    discord_server, model = discord_servers
    token = discord_server.token
    with Running(discord_env(tmp_path, discord_server, model, passphrase_hash)) as gateway:
        gateway.wait_running()
        discord_server.token = "reset-in-the-developer-portal"  # the old token is refused from now on
        discord_server.call(discord_server.close_gateway(4000))  # discord.py resumes: refused with 4004
        code, err, lines = gateway.exited()
    assert code == 2, err[-3000:]
    assert len(lines) == 1 and lines[0].startswith("companion: COMPANION_DISCORD_TOKEN:"), err[-3000:]
    assert "while running" in lines[0]
    assert "Traceback" not in err and token not in err
    assert discord_server.resumes  # it was discord.py's reconnect that the gateway refused


@pytest.mark.wire
def test_a_discord_gateway_down_past_the_outage_limit_exits_1_with_one_line(tmp_path, discord_servers, passphrase_hash):
    discord_server, model = discord_servers
    env = discord_env(tmp_path, discord_server, model, passphrase_hash, COMPANION_DISCORD_OUTAGE_SECONDS="3")
    with Running(env) as gateway:
        gateway.wait_running()
        discord_server.refuse_gateway = True
        discord_server.call(discord_server.close_gateway(4000))
        code, err, lines = gateway.exited()
    assert code == 1, err[-3000:]
    assert discord_server.refused >= 1  # discord.py did try again before the limit
    assert len(lines) == 1, err[-3000:]
    assert lines[0].startswith("companion: discord: the gateway stayed disconnected for 3 s")
    assert lines[0].endswith("starts it again")
    assert "Traceback" not in err and discord_server.token not in err


@pytest.mark.wire
def test_a_scheduled_job_failing_run_after_run_stops_the_gateway_with_exit_1_and_one_line(
    tmp_path, discord_servers, passphrase_hash
):
    discord_server, model = discord_servers
    env = discord_env(tmp_path, discord_server, model, passphrase_hash, COMPANION_EXPIRY_SWEEP_SECONDS="0.1")
    with Running(env) as gateway:
        gateway.wait_running()
        with contextlib.closing(sqlite3.connect(tmp_path / "companion.db")) as db:  # a database gone bad
            db.execute("ALTER TABLE artifacts RENAME TO artifacts_gone")
        code, err, lines = gateway.exited()
    assert code == 1, err[-3000:]
    assert len(lines) == 1, err[-3000:]
    assert lines[0].startswith("companion: scheduler: the scheduled job expiry-sweep failed 5 times in a row (")
    assert "Traceback" not in err


# --- the adapter's side: what counts as lost, what as refused ---------------------------------


@pytest.fixture
async def discord_server():
    async with FakeDiscordServer() as server:
        yield server


async def started(server: FakeDiscordServer, fatal: list[str], **options) -> PlatformRun:
    async def handler(message):
        return None

    adapter = discord_adapter(server, core_for(handler), on_fatal=fatal.append, **options)
    await adapter.start()
    return adapter


async def test_a_close_code_discord_py_does_not_reconnect_after_is_a_lost_connection(discord_server):
    fatal: list[str] = []
    adapter = await started(discord_server, fatal)
    try:
        await discord_server.close_gateway(4011)  # sharding required: discord.py gives up
        line = await asyncio.wait_for(adapter.wait_lost(), 10)
    finally:
        await adapter.aclose()
    assert line == "discord: the gateway connection ended (close code 4011)"
    assert fatal == []  # not the configuration's fault: exit 1, and a restart may help


async def test_a_resumed_connection_is_not_lost(discord_server):
    fatal: list[str] = []
    adapter = await started(discord_server, fatal, outage_limit=1.0)
    lost = asyncio.ensure_future(adapter.wait_lost())
    try:
        await discord_server.close_gateway(4000)
        await discord_server.wait_until(lambda: discord_server.resumes, what="the client to resume")
        await discord_server.wait_for_ready()
        await asyncio.sleep(1.5)  # the window: past the outage limit, counted from the drop
        assert not lost.done()
    finally:
        lost.cancel()
        await adapter.aclose()
    assert fatal == []


async def test_a_failed_watch_counts_as_a_loss():
    async def broken() -> str:
        raise ValueError("bug")

    watch = asyncio.create_task(broken(), name="watch-discord")
    line = await asyncio.wait_for(_first_loss([watch], asyncio.Event()), 5)
    assert line == "watch-discord: failed (ValueError)"
