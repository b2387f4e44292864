"""What the wire tests of served tools share: a gateway's environment, a model that calls a tool on cue, and
how a turn and a server's processes are seen from outside `companion run` (tests/bot/test_served_tools*_wire.py)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tests.helpers.fake_openai import FakeOpenAIServer, completion_json
from tests.helpers.fake_telegram import FakeTelegramServer
from tests.helpers.mcp_servers import alive, write_config
from tests.helpers.running import Running
from tests.helpers.telegram_gateway import USER, gateway_env
from tests.helpers.wire_platforms import rows, shipped


def served_env(tmp_path: Path, telegram: FakeTelegramServer, model: FakeOpenAIServer, **extra: str) -> dict[str, str]:
    # companion_env shortens the burst window for the other wire tests; here bursts are as shipped, and
    # COMPANION_STREAM_EDIT_SECONDS is left as shipped (1.0).
    return gateway_env(tmp_path, telegram, model, COMPANION_BURST_SECONDS=shipped("burst_seconds"), **extra)


def with_servers(
    tmp_path: Path, telegram: FakeTelegramServer, model: FakeOpenAIServer, servers: dict[str, dict[str, Any]]
) -> dict[str, str]:
    """`served_env` with these servers written to tmp_path/mcp.json as COMPANION_MCP_CONFIG."""
    config = write_config(tmp_path / "mcp.json", servers)
    return served_env(tmp_path, telegram, model, COMPANION_MCP_CONFIG=str(config))


@contextlib.contextmanager
def serving(env: dict[str, str], *names: str) -> Iterator[Running]:
    """`companion run` once the gateway runs and each named server is up; stopped at the end (SIGTERM)."""
    with Running(env) as gateway:
        gateway.wait_running()
        up(gateway, *names)
        yield gateway


def call(name: str, arguments: dict[str, Any], call_id: str = "call_1") -> dict[str, Any]:
    arguments_text = json.dumps(arguments)
    return completion_json(
        None, tool_calls=[{"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments_text}}]
    )


def offered(body: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in body.get("tools") or ()}


def tool_results(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def said_last(body: dict[str, Any]) -> str:
    return [m for m in body["messages"] if m["role"] == "user"][-1]["content"]


def answering(calls: dict[str, Callable[[], dict[str, Any]]]) -> Callable[[dict[str, Any]], Any]:
    """A model that calls a tool when the person's last words are a key of `calls`, and answers a tool's
    result by quoting it (so a private answer holds what the tool said)."""

    def answer(body: dict[str, Any]) -> Any:
        results = tool_results(body)
        said = said_last(body)
        if body["messages"][-1]["role"] == "tool":
            return "The tool said: " + " | ".join(results)
        if said in calls:
            return calls[said]()
        return f"answer to {said}"

    return answer


def up(gateway: Running, *names: str) -> None:
    """Until each server's tools are in the catalogue (the hub connects in the background)."""
    for name in names:
        gateway.wait_for(lambda name=name: f"MCP server {name} is up" in gateway.stderr, f"the server {name} up")


def say(telegram: FakeTelegramServer, gateway: Running, db: Path, text: str) -> str:
    """Send `text` as USER; the text of its reply once final (a streamed one is edited until then)."""
    before = len(telegram.texts_to(USER))
    telegram.send_text(USER, USER, text)
    gateway.wait_for(lambda: len(telegram.texts_to(USER)) > before, f"an answer to {text.split()[0]}")
    gateway.wait_for(
        lambda: rows(db, "SELECT count(*) FROM deliveries WHERE status IN ('streaming', 'pending')") == [(0,)],
        f"the answer to {text.split()[0]} final",
    )
    return telegram.texts_to(USER)[before]


def servers_running(marker: str) -> list[int]:
    """The processes whose command line names `marker`."""
    found = []
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if proc.name.isdigit() and marker.encode() in (proc / "cmdline").read_bytes() and alive(int(proc.name)):
                found.append(int(proc.name))
    return found
