"""Several `companion run` processes on one PostgreSQL database (COMPANION_SHARED_DATABASE, issue 33): real
processes on a real server, with the defaults as shipped (the web service on a port of each its own)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from adapters.storage.postgres.processes import ALIVE
from bot.gateway import SHARED_DISCORD, SHARED_TELEGRAM
from bot.instance import LOCK_LOST
from tests.helpers.proc import companion_env, run_companion
from tests.helpers.running import Running
from tests.helpers.web import free_port
from tests.helpers.wire_platforms import rows

pytestmark = pytest.mark.wire

TELEGRAM_TOKEN = "123456789:" + "A" * 35
DISCORD_TOKEN = "A" * 24 + ".ABCDEF." + "B" * 27
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
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(30)
        second.wait_for(lambda: live_pids(postgres_url) == [second.proc.pid], "the killed process counted dead")
        code, stderr = second.end()
    assert code == 0, stderr
    assert rows(postgres_url, "SELECT pid FROM gateway_processes") == [(first.proc.pid,)]  # the killed one's row


def test_a_shared_gateway_that_loses_its_registration_stops_with_one_line(tmp_path: Path, postgres_url: str) -> None:
    with Running(shared_env(tmp_path, postgres_url, "a")) as gateway:
        gateway.wait_running()
        rows(
            postgres_url,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = ?",
            (f"companion run pid {gateway.proc.pid}",),
        )
        code, stderr, said = gateway.exited()
    assert code == 1, stderr
    assert said == [f"companion: {LOCK_LOST}; exiting so that a supervisor (Docker, systemd) starts it again"]


@pytest.mark.parametrize(
    ("variable", "token", "line"),
    [
        ("COMPANION_TELEGRAM_TOKEN", TELEGRAM_TOKEN, SHARED_TELEGRAM),
        ("COMPANION_DISCORD_TOKEN", DISCORD_TOKEN, SHARED_DISCORD),
    ],
)
def test_a_platform_several_gateways_cannot_share_yet_is_refused_in_one_line(
    tmp_path: Path, postgres_url: str, variable: str, token: str, line: str
) -> None:
    refused = run_companion(["run"], shared_env(tmp_path, postgres_url, "a", **{variable: token}))
    assert (refused.returncode, refused.stderr.splitlines()) == (2, [f"companion: {line}"])
    assert rows(postgres_url, "SELECT count(*) FROM gateway_processes") == [(0,)]
