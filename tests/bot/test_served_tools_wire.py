"""Tools served by MCP servers through `companion run` on Telegram (issue 32), with the defaults as shipped
(bursts 1.5 s, streaming 1.0 s on), real SDK servers (tests/helpers/mcp_servers.py) over stdio and
streamable HTTP on 127.0.0.1, the fake Bot API and the fake model server: a tool round trip; private
mode offers only the tool the owner named, the others' servers receive nothing, and what the named one
answered is gone from every byte of the database at expiry; a stop leaves no server process; and
without COMPANION_MCP_CONFIG the `mcp` SDK is never imported."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.cli import EXIT_CONFIG
from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.fake_telegram import FakeTelegramServer
from tests.helpers.mcp_servers import alive, http_server, records, stdio_server, write_config
from tests.helpers.proc import ROOT, companion_env, run_companion, spawn_companion
from tests.helpers.running import Running
from tests.helpers.served_wire import answering, call, offered, say, served_env, servers_running, up
from tests.helpers.wire_platforms import rows

pytestmark = pytest.mark.wire

CANARY = "SERVED-CANARY-c91d"
PRIVATE_MARKER = "This conversation is in private mode"  # in the system prompt of every private request


@pytest.fixture
def servers() -> Iterator[tuple[FakeTelegramServer, FakeOpenAIServer]]:
    with FakeTelegramServer.run_in_thread() as telegram, FakeOpenAIServer.run_in_thread() as model:
        yield telegram, model


def test_a_served_tool_round_trip_through_companion_run_on_telegram(
    tmp_path: Path, servers: tuple[FakeTelegramServer, FakeOpenAIServer]
) -> None:
    telegram, model = servers
    received = tmp_path / "echo.jsonl"
    config = write_config(tmp_path / "mcp.json", {"tools": stdio_server("--only", "echo", record=received)})
    model.responder = answering({"use the tool": lambda: call("echo", {"text": "hello tool"})})
    env = served_env(tmp_path, telegram, model, COMPANION_MCP_CONFIG=str(config))
    db = tmp_path / "companion.db"
    with Running(env) as gateway:
        gateway.wait_running()
        up(gateway, "tools")
        assert "From tools: echo." in say(telegram, gateway, db, "/tools")
        assert say(telegram, gateway, db, "use the tool") == "The tool said: echo: hello tool"
        code, stderr = gateway.end()
    assert code == 0, stderr
    assert records(received) == [{"tool": "echo", "arguments": {"text": "hello tool"}}]
    asked = [body for body in model.requests if "echo" in offered(body)]
    assert asked and {"echo", "current_time", "remember"} <= offered(asked[0])
    report = run_companion(["report"], env)
    assert "  tools echo: ok 1" in report.stdout, report.stdout + report.stderr
    assert "hello tool" not in report.stdout and "hello tool" not in stderr


def test_a_private_turn_offers_only_the_named_tool_and_what_it_answered_is_gone_at_expiry(
    tmp_path: Path, servers: tuple[FakeTelegramServer, FakeOpenAIServer]
) -> None:
    telegram, model = servers
    named, other, web = tmp_path / "named.jsonl", tmp_path / "other.jsonl", tmp_path / "web.jsonl"
    with http_server("--only", "fail", record=web) as url:
        config = write_config(
            tmp_path / "mcp.json",
            {
                # The owner named echo of this stdio server for private mode ...
                "named": stdio_server("--only", "echo", record=named, include=["echo"], private="allowed"),
                # ... and nothing of this one, nor of the HTTP server (never offered in private mode).
                "other": stdio_server("--only", "big", record=other),
                "web": {"url": url},
            },
        )
        model.responder = answering(
            {
                "tell the named tool": lambda: call("echo", {"text": CANARY}),
                "tell the other tool": lambda: call("big", {"size": 7, "note": CANARY}),
            }
        )
        env = served_env(tmp_path, telegram, model, COMPANION_MCP_CONFIG=str(config))
        db = tmp_path / "companion.db"
        with Running(env) as gateway:
            gateway.wait_running()
            up(gateway, "named", "other", "web")
            assert say(telegram, gateway, db, "hello").startswith("answer to hello")
            assert {"echo", "big", "fail"} <= offered(model.requests[-1])  # normal mode: every served tool
            began = time.monotonic()
            assert say(telegram, gateway, db, "/private sesame 20s").startswith("Private mode is on")
            private_from = len(model.requests)
            assert say(telegram, gateway, db, "tell the other tool").startswith(
                "The tool said: error: no tool named 'big'"
            )
            assert say(telegram, gateway, db, "tell the named tool") == f"The tool said: echo: {CANARY}"
            # While the interval lives: no row of the served call either (a refused name's row names the interval).
            assert rows(db, "SELECT count(*) FROM tool_operations WHERE tool = 'echo'") == [(0,)]
            private = model.requests[private_from:]
            assert private and all(PRIVATE_MARKER in json.dumps(body) for body in private)
            for body in private:
                assert "echo" in offered(body) and not {"big", "fail"} & offered(body)
            time.sleep(max(0.0, began + 21 - time.monotonic()))  # the interval (20 s from /private) expires
            assert "You are in normal mode." in say(telegram, gateway, db, "/mode")
            normal_from = len(model.requests)
            assert say(telegram, gateway, db, "hello again").startswith("answer to hello again")
            on_disk = b"".join(path.read_bytes() for path in tmp_path.glob("companion.db*"))
            code, stderr = gateway.end()
    assert code == 0, stderr
    # Only the named server received the canary; the others received nothing of the private turn.
    assert records(named) == [{"tool": "echo", "arguments": {"text": CANARY}}]
    assert records(other) == [] and records(web) == []
    # Gone: from every byte of the database (its WAL too), every normal request, the log and the report.
    assert CANARY.encode() not in on_disk
    assert CANARY.encode() not in b"".join(path.read_bytes() for path in tmp_path.glob("companion.db*"))
    assert all(CANARY not in json.dumps(body) for body in model.requests[normal_from:])
    assert CANARY not in stderr
    assert rows(db, "SELECT count(*) FROM tool_operations") == [(0,)]
    report = run_companion(["report"], env)
    assert CANARY not in report.stdout and "echo" not in report.stdout


@pytest.mark.parametrize("stubborn", [False, True], ids=["ends-at-sigterm", "ignores-sigterm"])
def test_a_stop_with_a_running_stdio_server_leaves_no_process_of_its_tree(
    tmp_path: Path, servers: tuple[FakeTelegramServer, FakeOpenAIServer], stubborn: bool
) -> None:
    telegram, model = servers
    flags = ("--only", "spawn", "--ignore-term") if stubborn else ("--only", "spawn")  # the child ignores it too
    config = write_config(tmp_path / "mcp.json", {"tools": stdio_server(*flags)})
    model.responder = answering({"start a child": lambda: call("spawn", {})})
    env = served_env(tmp_path, telegram, model, COMPANION_MCP_CONFIG=str(config))
    db = tmp_path / "companion.db"
    with Running(env) as gateway:
        gateway.wait_running()
        up(gateway, "tools")
        said = say(telegram, gateway, db, "start a child")
        pids = json.loads(said.removeprefix("The tool said: "))
        assert alive(pids["server"]) and alive(pids["child"])
        code, stderr = gateway.end()
    assert code == 0, stderr
    assert not alive(pids["server"]) and not alive(pids["child"])


SITE = """import atexit, os, sys

def _loaded():
    with open(os.environ["COMPANION_TEST_LOADED"], "a") as f:
        f.write(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] == "mcp" or m.startswith("adapters.mcp"))) + "\\n")

import json
atexit.register(_loaded)
"""


def test_without_the_config_the_mcp_sdk_is_never_imported_by_the_gateway_or_the_chat(
    tmp_path: Path, servers: tuple[FakeTelegramServer, FakeOpenAIServer]
) -> None:
    telegram, model = servers
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITE)
    loaded = tmp_path / "loaded.jsonl"
    model.responder = answering({})
    env = served_env(tmp_path, telegram, model, PYTHONPATH=f"{site}:{ROOT}", COMPANION_TEST_LOADED=str(loaded))
    db = tmp_path / "companion.db"
    with Running(env) as gateway:
        gateway.wait_running()
        assert say(telegram, gateway, db, "/tools").startswith("The tools I can use here in normal mode:")
        assert say(telegram, gateway, db, "hello").startswith("answer to hello")
        code, stderr = gateway.end()
    assert code == 0, stderr
    chat = run_companion(["chat"], env, stdin="hello\n/tools\n")
    assert chat.returncode == 0, chat.stderr
    assert [json.loads(line) for line in loaded.read_text().splitlines()] == [[], []]


def test_a_bad_configuration_file_stops_the_start_with_one_line_and_no_secret(
    tmp_path: Path, servers: tuple[FakeTelegramServer, FakeOpenAIServer]
) -> None:
    telegram, model = servers
    secret = "Bearer s3cret-7d2e"
    config = write_config(
        tmp_path / "mcp.json",
        {"web": {"url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": secret}, "privat": 1}},
    )
    started = run_companion(["run"], served_env(tmp_path, telegram, model, COMPANION_MCP_CONFIG=str(config)))
    assert started.returncode == EXIT_CONFIG
    [line] = [line for line in started.stderr.splitlines() if line.startswith("companion:")]
    assert line.startswith(f"companion: COMPANION_MCP_CONFIG: {config}") and "web" in line and "privat" in line
    assert secret not in started.stderr + started.stdout
    assert telegram.calls_of("getUpdates") == []  # refused before any platform started


def test_the_terminal_chat_starts_the_servers_and_leaves_no_process_at_its_end(tmp_path: Path) -> None:
    marker = tmp_path / "chat-server.jsonl"  # in the server's command line: how its processes are found
    config = write_config(tmp_path / "mcp.json", {"tools": stdio_server("--only", "echo", record=marker)})
    env = companion_env(tmp_path, COMPANION_MCP_CONFIG=str(config), COMPANION_LOG_LEVEL="INFO")
    chat = spawn_companion(["chat"], env)
    ended = threading.Timer(60, chat.kill)  # a chat that never gets there fails below, not hangs
    ended.start()
    try:
        # The input stays open until the server is up: the chat's first turn then has its tools.
        for line in chat.stderr:
            if "MCP server tools is up" in line:
                break
        stdout, _ = chat.communicate("/tools\n", timeout=60)
    finally:
        ended.cancel()
    assert chat.returncode == 0
    assert "From tools: echo." in stdout
    assert not servers_running(str(marker))
