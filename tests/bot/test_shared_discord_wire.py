"""Discord on a shared database (COMPANION_SHARED_DATABASE, issue 33): real `companion run` processes on a real
PostgreSQL, discord.py against the fake Discord, the defaults as shipped. One process holds the gateway; the
others wait, and one takes it over when the holder stops or dies: what was sent meanwhile is answered once, a
private interval the holder left lands in normal mode."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from bot.gateway import GATEWAY_LOST
from core.turn.recovery import SENT_AT_MARGIN
from core.values.copy import RESTART_KEPT_PRIVATE
from tests.bot.test_shared_database_wire import process_of, shared_env, terminate
from tests.conftest import PASSPHRASE
from tests.helpers.fake_discord import FakeDiscordServer
from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.proc import run_companion
from tests.helpers.running import Running
from tests.helpers.wire_platforms import rows

pytestmark = pytest.mark.wire

FRIEND = 111
OTHER = 222
CANARY = "canary-5d1e said while the gateway changed hands"


def discord_shared_env(
    tmp_path: Path, url: str, name: str, discord: FakeDiscordServer, model: FakeOpenAIServer, passphrase_hash: str
) -> dict[str, str]:
    return shared_env(
        tmp_path,
        url,
        name,
        COMPANION_DISCORD_TOKEN=discord.token,
        COMPANION_DISCORD_API_BASE=discord.api_base,
        COMPANION_DISCORD_GATEWAY_URL=discord.gateway_url,
        COMPANION_LLM_BASE_URL=model.base_url,
        COMPANION_ALLOWED_USERS=f"discord:{FRIEND},discord:{OTHER}",
        COMPANION_PRIVATE_PASSPHRASE_HASH=passphrase_hash,
    )


def echo(body: dict[str, Any]) -> str:
    """The model answers each message by naming it, so that replies say which message they answer."""
    user = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
    return f"re: {user if isinstance(user, str) else user[-1].get('text', '')}"


def ready(env: dict[str, str]) -> dict[str, Any]:
    response = httpx.get(f"http://127.0.0.1:{env['COMPANION_HTTP_PORT']}/readyz", timeout=10)
    return dict(response.json())


def holder_of(envs: dict[str, dict[str, str]], gone: set[str] = frozenset()) -> str | None:  # type: ignore[assignment]
    """The name of the process whose /readyz says it holds the Discord gateway (None: none yet)."""
    holding = [name for name, env in envs.items() if name not in gone and ready(env)["shared"]["discord_gateway"]]
    assert len(holding) <= 1, holding
    return holding[0] if holding else None


def wait(predicate: Any, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(0.05)


def replies_in(discord: FakeDiscordServer, user: int) -> list[str]:
    channel = discord.dm_channel_id(user)
    return [m.content for m in discord.sent if m.channel_id == channel]


def talk(discord: FakeDiscordServer, user: int, text: str) -> None:
    """One DM, answered (its reply "re: <text>" sent once) when this returns."""
    discord.call(discord.send_dm(user, text))
    wait(lambda: any(r.endswith(f"re: {text}") for r in replies_in(discord, user)), f"the answer to {text!r}")


def one_session(discord: FakeDiscordServer) -> None:
    """Never two gateway connections at once."""
    assert len([s for s in discord.sessions if s.ready and not s.ws.closed]) <= 1


def test_three_gateways_answer_discord_dms_once_in_order_and_a_killed_holder_is_taken_over(
    tmp_path: Path, postgres_url: str, discord_servers: tuple[FakeDiscordServer, FakeOpenAIServer], passphrase_hash: str
) -> None:
    discord, model = discord_servers
    model.responder = echo
    envs = {n: discord_shared_env(tmp_path, postgres_url, n, discord, model, passphrase_hash) for n in "abc"}
    with Running(envs["a"]) as a, Running(envs["b"]) as b, Running(envs["c"]) as c:
        running = {"a": a, "b": b, "c": c}
        for gateway in running.values():
            gateway.wait_running()
        discord.call(discord.wait_for_ready(timeout=30), timeout=40)
        wait(lambda: all(ready(env)["status"] == "ready" for env in envs.values()), "every process ready")
        first = holder_of(envs)
        assert first is not None
        for n in range(3):
            for user in (FRIEND, OTHER):
                talk(discord, user, f"message {n} of {user}")
                one_session(discord)
        for user in (FRIEND, OTHER):
            assert replies_in(discord, user) == [f"re: message {n} of {user}" for n in range(3)]
        held = rows(postgres_url, "SELECT DISTINCT holder FROM chat_claims")
        assert held == [(process_of(postgres_url, running[first].proc.pid),)]  # the gateway's holder claims them

        # The holder killed: another takes the gateway over, and what was sent meanwhile is answered once.
        killed_at = time.monotonic()
        running[first].proc.send_signal(signal.SIGKILL)
        running[first].proc.wait(30)
        meanwhile = discord.post_dm_while_offline(FRIEND, "sent while the gateway was down")
        identified = len(discord.identifies)
        wait(lambda: len(discord.identifies) > identified, "another process connected to the gateway")
        took = time.monotonic() - killed_at
        wait(lambda: "re: sent while the gateway was down" in replies_in(discord, FRIEND), "the DM sent meanwhile")
        second = holder_of(envs, {first})
        assert second is not None and second != first
        print(f"gateway taken over {took:.2f} s after the SIGKILL of its holder")  # docs/benchmarks.md
        talk(discord, OTHER, "after the take-over")
        assert replies_in(discord, FRIEND) == [f"re: message {n} of {FRIEND}" for n in range(3)] + [
            "re: sent while the gateway was down"
        ]
        assert replies_in(discord, OTHER)[-1] == "re: after the take-over"
        assert len(replies_in(discord, OTHER)) == 4
        one_session(discord)
        assert len(discord.identifies) == 2  # the first holder's session and the second's: no process else connected
        second_id = process_of(postgres_url, running[second].proc.pid)
        assert rows(postgres_url, "SELECT DISTINCT holder FROM chat_claims") == [(second_id,)]
        assert rows(postgres_url, "SELECT count(*) FROM messages WHERE platform_message_id = ?", (str(meanwhile),)) in (
            [(1,)],
            [(0,)],
        )
        scraped = httpx.get(f"http://127.0.0.1:{envs[second]['COMPANION_HTTP_PORT']}/metrics", timeout=10).text
        assert "companion_discord_gateway_take_overs 1.0" in scraped.splitlines()
        assert "companion_discord_gateway_held 1.0" in scraped.splitlines()
        assert "companion_take_overs 2.0" in scraped.splitlines()  # both DM conversations
        doctor = run_companion(["doctor"], envs[first])
        pid = running[second].proc.pid
        assert any(
            line.endswith(f"(pid {pid}), holding 2 conversations and the Discord gateway")
            for line in doctor.stdout.splitlines()
        ), doctor.stdout
        for name, gateway in running.items():
            if name != first:
                code, stderr = gateway.end()
                assert code == 0, stderr
                assert "sent while the gateway was down" not in stderr


def test_a_private_interval_of_a_killed_holder_lands_in_normal_mode_and_a_clean_stop_hands_the_gateway_over(
    tmp_path: Path, postgres_url: str, discord_servers: tuple[FakeDiscordServer, FakeOpenAIServer], passphrase_hash: str
) -> None:
    discord, model = discord_servers
    model.responder = echo
    envs = {n: discord_shared_env(tmp_path, postgres_url, n, discord, model, passphrase_hash) for n in "abc"}
    with Running(envs["a"]) as a:
        a.wait_running()
        discord.call(discord.wait_for_ready(timeout=30), timeout=40)
        with Running(envs["b"]) as b:
            b.wait_running()
            assert holder_of(envs, {"c"}) == "a"  # the first to start holds it; b waits
            assert ready(envs["b"])["status"] == "ready"  # standing by is ready: its other parts serve
            talk(discord, FRIEND, "hello")
            secret = discord.call(discord.send_dm(FRIEND, f"/private {PASSPHRASE}"))
            wait(lambda: len(replies_in(discord, FRIEND)) == 2, "private mode on")
            assert rows(postgres_url, "SELECT ended_at FROM segments") == [(None,)]
            # Its DM cursor past the secret (a catch-up would hand it in again otherwise), then the holder killed.
            wait(lambda: str(secret) in str(rows(postgres_url, "SELECT value FROM adapter_state")), "acknowledged")
            a.proc.send_signal(signal.SIGKILL)
            a.proc.wait(30)
            # Sent while no gateway was up, in the interval: answered by the constant, kept nowhere, never read.
            discord.post_dm_while_offline(FRIEND, CANARY)
            wait(lambda: RESTART_KEPT_PRIVATE in replies_in(discord, FRIEND), "the DM sent meanwhile answered")
            assert ready(envs["b"])["shared"]["discord_gateway"]
            # Closed as a restart closes it, never resumed as private by b.
            assert rows(postgres_url, "SELECT end_reason FROM segments") == [("restart",)]
            assert rows(postgres_url, "SELECT count(*) FROM messages WHERE text LIKE ?", (f"%{CANARY}%",)) == [(0,)]
            # Past the restart's margin after the take-over: a DM sent within it is counted as the interval's
            # (core/turn/recovery.py SENT_AT_MARGIN errs toward the interval), as tests/helpers/platforms do.
            time.sleep(SENT_AT_MARGIN + 0.1)
            talk(discord, FRIEND, "after the take-over")
            assert all(CANARY.encode() not in raw for raw in model.raw_requests)
            assert rows(
                postgres_url, "SELECT mode, segment_id FROM messages WHERE role = 'user' ORDER BY id DESC LIMIT 1"
            ) == [("normal", None)]
            assert rows(postgres_url, "SELECT count(*) FROM segments WHERE ended_at IS NULL") == [(0,)]
            # A clean stop of the holder hands the gateway over too, to a process waiting for it.
            with Running(envs["c"]) as c:
                c.wait_running()
                assert not ready(envs["c"])["shared"]["discord_gateway"]
                opened = discord.sessions_opened
                code, stderr = b.end()
                assert code == 0, stderr
                assert PASSPHRASE not in stderr and CANARY not in stderr
                discord.call(discord.wait_for_ready(timeout=30, since=opened), timeout=40)
                assert ready(envs["c"])["shared"]["discord_gateway"]
                talk(discord, FRIEND, "after the clean stop")
                c_id = process_of(postgres_url, c.proc.pid)
                assert rows(postgres_url, "SELECT holder FROM chat_claims") == [(c_id,)]
                one_session(discord)
                assert len(discord.identifies) == 3  # a, b, then c: one session per holder
                replies = replies_in(discord, FRIEND)
                assert [r for r in replies if r.startswith("re: ")] == [
                    "re: hello",
                    "re: after the take-over",
                    "re: after the clean stop",
                ]
                code, stderr = c.end()
                assert code == 0, stderr


def test_a_holder_that_loses_the_gateway_lock_stops_with_one_line(
    tmp_path: Path, postgres_url: str, discord_servers: tuple[FakeDiscordServer, FakeOpenAIServer], passphrase_hash: str
) -> None:
    discord, model = discord_servers
    env = discord_shared_env(tmp_path, postgres_url, "a", discord, model, passphrase_hash)
    with Running(env) as gateway:
        gateway.wait_running()
        discord.call(discord.wait_for_ready(timeout=30), timeout=40)
        terminate(postgres_url, f"companion discord gateway pid {gateway.proc.pid}")
        code, stderr, said = gateway.exited()
    assert code == 1, stderr
    assert said == [f"companion: {GATEWAY_LOST}; exiting so that a supervisor (Docker, systemd) starts it again"]
    discord.call(discord.wait_until(lambda: not discord.sessions, timeout=10, what="the gateway to close"))


# Ticks of a second (as tests/bot/test_shared_database_wire.py): a reminder due in seconds is sent within the test;
# quiet hours off: the test must not depend on the hour it runs at.
FAST = {
    "COMPANION_PROACTIVE_TICK_SECONDS": "1",
    "COMPANION_OUTBOX_TICK_SECONDS": "1",
    "COMPANION_QUIET_HOURS": "off",
}


def test_a_discord_reminder_set_with_a_killed_holder_is_sent_once_by_the_next(
    tmp_path: Path, postgres_url: str, discord_servers: tuple[FakeDiscordServer, FakeOpenAIServer], passphrase_hash: str
) -> None:
    discord, model = discord_servers
    model.responder = echo
    a_env = discord_shared_env(tmp_path, postgres_url, "a", discord, model, passphrase_hash) | FAST
    b_env = discord_shared_env(tmp_path, postgres_url, "b", discord, model, passphrase_hash) | FAST
    with Running(a_env) as a, Running(b_env) as b:
        a.wait_running()
        b.wait_running()
        discord.call(discord.wait_for_ready(timeout=30), timeout=40)
        first, second = (a, b) if ready(a_env)["shared"]["discord_gateway"] else (b, a)
        discord.call(discord.send_dm(FRIEND, "/followup 4s stretch"))
        wait(lambda: any(r.startswith("Follow-up #1 scheduled") for r in replies_in(discord, FRIEND)), "scheduled")
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(30)
        wait(lambda: any(r.startswith("Reminder: stretch") for r in replies_in(discord, FRIEND)), "the reminder")
        talk(discord, FRIEND, "thanks")  # the reminder's ticks went on meanwhile: it is not sent again
        assert [r for r in replies_in(discord, FRIEND) if r.startswith("Reminder: stretch")] == ["Reminder: stretch"]
        assert rows(postgres_url, "SELECT status FROM deliveries WHERE kind = 'reminder'") == [("sent",)]
        second_id = process_of(postgres_url, second.proc.pid)
        assert rows(postgres_url, "SELECT holder FROM chat_claims") == [(second_id,)]
        code, stderr = second.end()
        assert code == 0, stderr


def test_a_shared_gateway_whose_discord_token_is_rejected_stops_with_one_line(
    tmp_path: Path, postgres_url: str, passphrase_hash: str
) -> None:
    with (
        FakeDiscordServer.run_in_thread(token="the-real-token") as discord,
        FakeOpenAIServer.run_in_thread() as model,
    ):
        env = discord_shared_env(tmp_path, postgres_url, "a", discord, model, passphrase_hash)
        env["COMPANION_DISCORD_TOKEN"] = "a-wrong-token"
        with Running(env) as gateway:
            code, stderr, said = gateway.exited(60)
    assert code == 2, stderr
    assert "Traceback" not in stderr and "a-wrong-token" not in stderr
    assert len(said) == 1 and said[0].startswith("companion: COMPANION_DISCORD_TOKEN was rejected"), said
