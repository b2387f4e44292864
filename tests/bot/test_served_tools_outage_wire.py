"""Served tools across what outlives a turn, through `companion run` on Telegram with the defaults as shipped
(bursts 1.5 s, streaming 1.0 s on) and real SDK servers over stdio (tests/helpers/mcp_servers.py): a server
that crashes mid-call, a tool that hangs, a tool list that changes while the gateway runs, a SIGKILL of the
companion, and a restart with the same configuration."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.fake_telegram import FakeTelegramServer
from tests.helpers.mcp_servers import records, stdio_server
from tests.helpers.running import Running
from tests.helpers.served_wire import (
    answering,
    call,
    offered,
    say,
    servers_running,
    serving,
    tool_results,
    with_servers,
)
from tests.helpers.telegram_gateway import USER, wait_until

pytestmark = pytest.mark.wire

# How long a stdio server may outlive a SIGKILLed companion: the kernel's SIGKILL on Linux (the server's
# parent-death signal), or the server's own end of input; the stated bound of docs/operations.md.
OUTLIVES_AT_MOST = 10.0


def servers_gone(marker: Path, within: float = OUTLIVES_AT_MOST) -> bool:
    """Whether every process whose command line names `marker` is gone within `within` seconds."""
    deadline = time.monotonic() + within
    while servers_running(str(marker)):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@contextlib.contextmanager
def none_left_behind(marker: Path) -> Iterator[None]:
    """Whatever a test asserts, a server it started (named by `marker`) does not outlive it."""
    try:
        yield
    finally:
        for pid in servers_running(str(marker)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def times_up(gateway: Running, name: str) -> int:
    return gateway.stderr.count(f"MCP server {name} is up")


def test_a_server_that_crashes_mid_call_still_gets_the_person_an_answer_and_comes_back_for_a_later_turn(
    tmp_path: Path, telegram_servers: tuple[FakeTelegramServer, FakeOpenAIServer]
) -> None:
    telegram, model = telegram_servers
    received, crashed = tmp_path / "calls.jsonl", tmp_path / "crashed"
    # The server's crash tool exits mid-call the first time only (it answers once `crashed` exists).
    tools = stdio_server("--only", "crash", "--crash-once", str(crashed), record=received)
    env = with_servers(tmp_path, telegram, model, {"tools": tools})
    model.responder = answering({"crash it": lambda: call("crash", {})})
    db = tmp_path / "companion.db"
    with serving(env, "tools") as gateway:
        first = servers_running(str(received))
        failed = "the tool crash failed: its server tools ended the session"
        assert say(telegram, gateway, db, "crash it") == f"The tool said: {failed}"
        # The model was told in words, as the tool's result.
        assert tool_results(model.requests[-1]) == [failed]
        # Restarted by the hub, not by a restart of the companion (the same process, started once).
        gateway.wait_for(lambda: times_up(gateway, "tools") == 2, "the server restarted")
        assert "MCP server tools is down (it exited (status 3))" in gateway.stderr
        assert gateway.stderr.count("gateway running") == 1
        again = servers_running(str(received))
        assert again and not set(first) & set(again)
        assert say(telegram, gateway, db, "crash it") == "The tool said: crash: not this time"
        assert "crash" in offered(model.requests[-2])
        code, stderr = gateway.end()
    assert code == 0, stderr
    assert records(received) == [{"tool": "crash", "arguments": {}}] * 2


def test_a_hanging_tool_is_cut_at_its_timeout_the_model_is_told_in_words_and_the_next_turn_works(
    tmp_path: Path, telegram_servers: tuple[FakeTelegramServer, FakeOpenAIServer]
) -> None:
    telegram, model = telegram_servers
    received, cancelled = tmp_path / "calls.jsonl", tmp_path / "cancelled"
    tools = stdio_server("--only", "hang,echo", "--cancelled", str(cancelled), record=received, timeout=1)
    env = with_servers(tmp_path, telegram, model, {"tools": tools})
    model.responder = answering(
        {"wait for it": lambda: call("hang", {}), "use the tool": lambda: call("echo", {"text": "after"})}
    )
    db = tmp_path / "companion.db"
    with serving(env, "tools") as gateway:
        cut = "the tool hang did not answer within 1 s"
        assert say(telegram, gateway, db, "wait for it") == f"The tool said: {cut}"
        assert tool_results(model.requests[-1]) == [cut]
        gateway.wait_for(cancelled.exists, "the call cancelled at the server")  # it runs on there otherwise
        assert say(telegram, gateway, db, "use the tool") == "The tool said: echo: after"
        assert say(telegram, gateway, db, "hello").startswith("answer to hello")
        code, stderr = gateway.end()
    assert code == 0, stderr
    assert records(received) == [{"tool": "hang", "arguments": {}}, {"tool": "echo", "arguments": {"text": "after"}}]


def test_a_tool_a_server_adds_while_the_gateway_runs_is_offered_from_the_next_turn(
    tmp_path: Path, telegram_servers: tuple[FakeTelegramServer, FakeOpenAIServer]
) -> None:
    telegram, model = telegram_servers
    env = with_servers(tmp_path, telegram, model, {"tools": stdio_server("--only", "grow")})
    model.responder = answering({"grow": lambda: call("grow", {}), "use the new tool": lambda: call("grown", {})})
    db = tmp_path / "companion.db"
    with serving(env, "tools") as gateway:
        assert say(telegram, gateway, db, "grow") == "The tool said: grew"
        grew_turn = list(model.requests)
        gateway.wait_for(lambda: "MCP server tools changed its tools" in gateway.stderr, "the tools listed again")
        assert say(telegram, gateway, db, "use the new tool") == "The tool said: grown here"
        code, stderr = gateway.end()
    assert code == 0, stderr
    next_turn = model.requests[len(grew_turn)]
    assert "grown" in offered(next_turn) and "grow" in offered(next_turn)
    # The turn that grew it kept the tool set it was given before its first model call.
    assert all("grown" not in offered(body) for body in grew_turn)
    assert "MCP server tools is up" in stderr and stderr.count("MCP server tools is up") == 1  # no restart


@pytest.mark.parametrize(
    ("flags", "cue"),
    [
        (("--only", "echo,hang"), None),
        (("--only", "echo,hang"), "wait for it"),
        (("--only", "echo,hang", "--linger"), None),
        (("--only", "echo,hang", "--linger"), "wait for it"),
    ],
    ids=["idle", "mid-call", "idle-ignoring-its-end-of-input", "mid-call-ignoring-its-end-of-input"],
)
def test_a_stdio_server_does_not_outlive_a_companion_killed_with_sigkill(
    tmp_path: Path,
    telegram_servers: tuple[FakeTelegramServer, FakeOpenAIServer],
    flags: tuple[str, ...],
    cue: str | None,
) -> None:
    telegram, model = telegram_servers
    received = tmp_path / "calls.jsonl"  # in the server's command line: how its process is found
    env = with_servers(tmp_path, telegram, model, {"tools": stdio_server(*flags, record=received)})
    model.responder = answering({"wait for it": lambda: call("hang", {})})
    with none_left_behind(received), serving(env, "tools") as gateway:
        assert servers_running(str(received))
        if cue is not None:
            telegram.send_text(USER, USER, cue)
            gateway.wait_for(lambda: records(received) == [{"tool": "hang", "arguments": {}}], "the call in flight")
        code, _ = gateway.end(signal.SIGKILL)
        assert code == -signal.SIGKILL
        assert servers_gone(received), f"a server outlived the SIGKILLed companion by {OUTLIVES_AT_MOST} s"


@pytest.mark.parametrize("ended", [signal.SIGTERM, signal.SIGKILL], ids=["stopped", "killed"])
def test_a_restarted_companion_offers_the_tools_again_from_servers_started_anew(
    tmp_path: Path, telegram_servers: tuple[FakeTelegramServer, FakeOpenAIServer], ended: signal.Signals
) -> None:
    telegram, model = telegram_servers
    received = tmp_path / "calls.jsonl"
    # --linger: a server that stays after its input ends, so a stale one would be seen.
    env = with_servers(
        tmp_path, telegram, model, {"tools": stdio_server("--only", "echo", "--linger", record=received)}
    )
    model.responder = answering(
        {"first": lambda: call("echo", {"text": "first"}), "second": lambda: call("echo", {"text": "second"})}
    )
    db = tmp_path / "companion.db"
    with none_left_behind(received):
        with serving(env, "tools") as gateway:
            before = servers_running(str(received))
            assert say(telegram, gateway, db, "first") == "The tool said: echo: first"
            # The update confirmed to Telegram (by the next getUpdates' offset): the next run does not see it again.
            wait_until(telegram, gateway.proc, lambda: telegram.pending_updates == 0)
            gateway.end(ended)
        with serving(env, "tools") as gateway:
            after = servers_running(str(received))
            assert len(after) == 1 and not set(before) & set(after)  # one server, started anew; none from before
            assert say(telegram, gateway, db, "second") == "The tool said: echo: second"
            assert "echo" in offered(model.requests[-2])
            code, stderr = gateway.end()
        assert code == 0, stderr
        assert records(received) == [{"tool": "echo", "arguments": {"text": t}} for t in ("first", "second")]
        assert servers_gone(received)
