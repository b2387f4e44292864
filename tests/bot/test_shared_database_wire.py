"""Several `companion run` processes on one PostgreSQL database (COMPANION_SHARED_DATABASE, issue 33): real
processes on a real server, with the defaults as shipped (the web service on a port of each its own)."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import httpx
import pytest

from adapters.storage.postgres.processes import ALIVE
from adapters.web.chat_page import ELSEWHERE
from bot.gateway import SHARED_TELEGRAM
from bot.instance import LOCK_LOST
from core.privacy.secrets import hash_passphrase
from tests.helpers.ports import free_port
from tests.helpers.proc import companion_env, run_companion
from tests.helpers.running import Running
from tests.helpers.web import signed_in_browser
from tests.helpers.wire_platforms import rows

pytestmark = pytest.mark.wire

TELEGRAM_TOKEN = "123456789:" + "A" * 35
LIVE = "SELECT pid FROM gateway_processes p WHERE " + ALIVE


def shared_env(tmp_path: Path, url: str, name: str, **extra: str) -> dict[str, str]:
    """A gateway of its own folder (its keys), on the shared database, the web service on a free port."""
    home = tmp_path / name
    home.mkdir()
    return companion_env(
        home,
        COMPANION_DATABASE_URL=url,
        COMPANION_SHARED_DATABASE="true",
        COMPANION_HTTP_PORT=str(free_port()),
        COMPANION_LOG_LEVEL="INFO",
        **extra,
    )


def terminate(url: str, application_name: str) -> None:
    """The server ends the backends of the connection named `application_name` (as when PostgreSQL restarts)."""
    rows(url, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = ?", (application_name,))


def live_pids(url: str) -> list[int]:
    return sorted(int(pid) for (pid,) in rows(url, LIVE))


def test_gateways_share_one_database_and_a_killed_one_is_dead_to_the_others(tmp_path: Path, postgres_url: str) -> None:
    with (
        Running(shared_env(tmp_path, postgres_url, "a")) as first,
        Running(shared_env(tmp_path, postgres_url, "b")) as second,
    ):
        first.wait_running()
        second.wait_running()
        assert live_pids(postgres_url) == sorted([first.proc.pid, second.proc.pid])
        # One gateway not in shared mode is refused beside them, and would refuse them.
        alone_env = companion_env(tmp_path, COMPANION_DATABASE_URL=postgres_url, COMPANION_HTTP_PORT=str(free_port()))
        alone = run_companion(["run"], alone_env)
        assert alone.returncode == 2 and alone.stderr.startswith("companion: another companion run holds ")
        # The doctor of the database lists the live processes.
        doctor = run_companion(["doctor"], companion_env(tmp_path, COMPANION_DATABASE_URL=postgres_url))
        assert doctor.returncode == 0, doctor.stdout
        listed = [line for line in doctor.stdout.splitlines() if "process" in line]
        assert listed[0] == "  --    2 live companion run processes (shared database)"
        assert sorted(int(line.split("(pid ")[1].split(")")[0]) for line in listed[1:]) == live_pids(postgres_url)
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(30)
        second.wait_for(lambda: live_pids(postgres_url) == [second.proc.pid], "the killed process counted dead")
        code, stderr = second.end()
    assert code == 0, stderr
    assert rows(postgres_url, "SELECT pid FROM gateway_processes") == [(first.proc.pid,)]  # the killed one's row


def test_a_shared_gateway_that_loses_its_registration_stops_with_one_line(tmp_path: Path, postgres_url: str) -> None:
    with Running(shared_env(tmp_path, postgres_url, "a")) as gateway:
        gateway.wait_running()
        terminate(postgres_url, f"companion run pid {gateway.proc.pid}")
        code, stderr, said = gateway.exited()
    assert code == 1, stderr
    assert said == [f"companion: {LOCK_LOST}; exiting so that a supervisor (Docker, systemd) starts it again"]


@pytest.mark.parametrize(
    ("variable", "token", "line"),
    [
        ("COMPANION_TELEGRAM_TOKEN", TELEGRAM_TOKEN, SHARED_TELEGRAM),
    ],
)
def test_a_platform_several_gateways_cannot_share_yet_is_refused_in_one_line(
    tmp_path: Path, postgres_url: str, variable: str, token: str, line: str
) -> None:
    refused = run_companion(["run"], shared_env(tmp_path, postgres_url, "a", **{variable: token}))
    assert (refused.returncode, refused.stderr.splitlines()) == (2, [f"companion: {line}"])
    assert rows(postgres_url, "SELECT count(*) FROM gateway_processes") == [(0,)]


PASSPHRASE = "shared-lantern-PASSPHRASE-3"


async def send(env: dict[str, str], text: str, status: int = 200) -> dict:
    """One message of the signed-in owner to the web chat of the gateway of `env`, answered when this returns."""
    async with signed_in_browser(f"http://127.0.0.1:{env['COMPANION_HTTP_PORT']}", env) as (browser, csrf):
        sent = await browser.post("/send", json={"text": text}, headers={"X-CSRF-Token": csrf})
        assert sent.status_code == status, sent.text
        return sent.json()


async def test_a_private_interval_of_a_killed_gateway_lands_in_normal_mode_and_no_other_resumes_it(
    tmp_path: Path, postgres_url: str
) -> None:
    secret = {"COMPANION_PRIVATE_PASSPHRASE_HASH": hash_passphrase(PASSPHRASE)}
    a_env = shared_env(tmp_path, postgres_url, "a", **secret)
    b_env = shared_env(tmp_path, postgres_url, "b", **secret)
    with Running(a_env) as a:
        a.wait_running()
        await send(a_env, f"/private {PASSPHRASE}")
        ((chat, holder, fence),) = rows(postgres_url, "SELECT conversation_id, holder, fence FROM chat_claims")
        assert (holder, fence) == (process_of(postgres_url, a.proc.pid), 1)
        assert rows(postgres_url, "SELECT conversation_id, ended_at FROM segments") == [(chat, None)]
        with Running(b_env) as b:
            b.wait_running()
            # B started beside a live A: A's interval is A's (neither crash-open nor keyless to B), its claim A's.
            assert rows(postgres_url, "SELECT ended_at FROM segments") == [(None,)]
            assert rows(postgres_url, "SELECT holder FROM chat_claims") == [(holder,)]
            # A message reaching B meanwhile is A's to answer: B handles nothing of it, stores nothing.
            stored = rows(postgres_url, "SELECT count(*) FROM messages")
            refused = await send(b_env, "to the wrong gateway", 503)  # not taken: "try again in a moment"
            assert refused == {"error": ELSEWHERE}
            b.wait_logged(f"conversation {chat} is held by another process: not handled here")
            assert rows(postgres_url, "SELECT count(*) FROM messages") == stored
            assert rows(postgres_url, "SELECT ended_at FROM segments") == [(None,)]
            a.proc.send_signal(signal.SIGKILL)
            a.proc.wait(30)
            b_id = process_of(postgres_url, b.proc.pid)
            b.wait_for(
                lambda: rows(postgres_url, "SELECT holder, fence FROM chat_claims") == [(b_id, 2)],
                "the killed gateway's conversation taken over",
            )
            # Closed as a restart closes it: at the end of its record, never resumed as private by B.
            assert rows(postgres_url, "SELECT end_reason FROM segments") == [("restart",)]
            base = f"http://127.0.0.1:{b_env['COMPANION_HTTP_PORT']}"
            async with httpx.AsyncClient(base_url=base, timeout=20) as client:
                ready = (await client.get("/readyz")).json()
                scraped = (await client.get("/metrics")).text.splitlines()
            assert ready["shared"] == {"process": b_id, "conversations_held": 1, "discord_gateway": False}
            assert "companion_take_overs 1.0" in scraped and "companion_conversations_held 1.0" in scraped
            await send(b_env, "hello after the take-over")
            assert rows(postgres_url, "SELECT count(*) FROM segments WHERE ended_at IS NULL") == [(0,)]
            assert rows(
                postgres_url, "SELECT mode, segment_id FROM messages WHERE role = 'user' ORDER BY id DESC LIMIT 1"
            ) == [("normal", None)]
            code, stderr = b.end()
    assert code == 0, stderr
    assert PASSPHRASE not in stderr


def process_of(url: str, pid: int) -> int:
    ((process_id,),) = rows(url, "SELECT id FROM gateway_processes WHERE pid = ?", (pid,))
    return int(process_id)


# Ticks of a second (as tests/bot/test_proactive_wire.py): a reminder due in seconds is sent within the test.
FAST = {"COMPANION_PROACTIVE_TICK_SECONDS": "1", "COMPANION_OUTBOX_TICK_SECONDS": "1", "COMPANION_BURST_SECONDS": "0"}


async def test_a_reminder_fires_once_across_two_gateways(tmp_path: Path, postgres_url: str) -> None:
    # Quiet hours off: the test must not depend on the hour it runs at.
    a_env = shared_env(tmp_path, postgres_url, "a", COMPANION_QUIET_HOURS="off", **FAST)
    b_env = shared_env(tmp_path, postgres_url, "b", COMPANION_QUIET_HOURS="off", **FAST)
    with Running(a_env) as a, Running(b_env) as b:
        a.wait_running()
        b.wait_running()
        await send(a_env, "/followup 2s stretch")
        sent = "SELECT status FROM deliveries WHERE kind = 'reminder'"
        a.wait_for(lambda: rows(postgres_url, sent) == [("sent",)], "the reminder sent")
        for _ in range(4):  # four more ticks of each gateway: nothing more is sent
            await asyncio.sleep(1)
            assert rows(postgres_url, "SELECT count(*) FROM deliveries WHERE kind = 'reminder'") == [(1,)]
        assert rows(postgres_url, "SELECT count(*) FROM proactive_decisions WHERE outcome = 'sent'") == [(1,)]
        assert a.end()[0] == 0 and b.end()[0] == 0
