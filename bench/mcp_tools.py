"""12. A tool call through a stdio MCP server (issue 32): what the hub adds over the server's own time, and the idle gateway's memory with one server configured.

The call: `McpHub.call` of the test server's `echo` (tests/helpers/mcp_servers.py, the SDK's FastMCP
over stdio), against the same server driven by a bare client in the same run (one JSON-RPC line
written to its stdin, one read from its stdout: the server's own time with nothing of ours around
it). Median of 50 each after 10 warm-up calls, in alternating blocks of 10.

The memory: `companion run` (Telegram against bench.gateway_rss.FakeBotApi, the HTTP service off)
idle for a few seconds with COMPANION_MCP_CONFIG naming one stdio server, against the same gateway
without it; VmRSS of the gateway (the server's own process is not the gateway's). Needs the wiring
of bot/bootstrap.py (issue 32, "core"): without it both runs are the same gateway.

python bench/mcp_tools.py [--quick]
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as `python bench/mcp_tools.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from adapters.mcp.config import load_mcp_config
from adapters.mcp.hub import McpHub
from bench._common import child_env, median, percentile
from bench._proc import console_script
from bench.gateway_rss import TOKEN, FakeBotApi, _run_gateway
from tests.helpers.mcp_servers import stdio_server, write_config

CALLS = 50
WARM_UP = 10
BLOCK = 10
TEXT = "hello from the bench"


class BareClient:
    """The server over its pipes with nothing but JSON lines: initialize once, then one tools/call at a time."""

    def __init__(self, spec: dict) -> None:
        self.spec = spec
        self.next_id = 0

    async def __aenter__(self) -> BareClient:
        self.proc = await asyncio.create_subprocess_exec(
            self.spec["command"],
            *self.spec["args"],
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        await self.request(
            "initialize",
            {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}},
        )
        await self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), 5)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()

    async def send(self, message: dict) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        await self.proc.stdin.drain()

    async def request(self, method: str, params: dict) -> dict:
        assert self.proc.stdout is not None
        self.next_id += 1
        await self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        while True:
            answer = json.loads(await self.proc.stdout.readline())
            if answer.get("id") == self.next_id:
                return answer

    async def call(self) -> float:
        began = time.perf_counter()
        answer = await self.request("tools/call", {"name": "echo", "arguments": {"text": TEXT}})
        seconds = time.perf_counter() - began
        assert answer["result"]["content"][0]["text"] == f"echo: {TEXT}", answer
        return seconds


async def _hub_call(hub: McpHub) -> float:
    began = time.perf_counter()
    result = await hub.call("bench", "echo", {"text": TEXT})
    seconds = time.perf_counter() - began
    assert result.outcome == "ok", result
    assert result.text == f"echo: {TEXT}", result
    return seconds


async def _calls(calls: int, tmp: Path) -> dict:
    spec = stdio_server("--only", "echo")
    hub = McpHub(load_mcp_config(write_config(tmp / "mcp.json", {"bench": spec}), {}))
    await hub.start()
    try:
        deadline = time.monotonic() + 30
        while not hub.states()[0].up:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the bench server did not come up: {hub.states()[0].detail}")
            await asyncio.sleep(0.05)
        async with BareClient(spec) as bare:
            for _ in range(WARM_UP):
                await _hub_call(hub)
                await bare.call()
            ours: list[float] = []
            theirs: list[float] = []
            while len(ours) < calls:
                ours += [await _hub_call(hub) for _ in range(BLOCK)]
                theirs += [await bare.call() for _ in range(BLOCK)]
    finally:
        await hub.aclose(5.0)
    return {
        "calls": len(ours),
        "hub_median_ms": round(median(ours) * 1000, 3),
        "hub_p90_ms": round(percentile(ours, 90) * 1000, 3),
        "bare_median_ms": round(median(theirs) * 1000, 3),
        "bare_p90_ms": round(percentile(theirs, 90) * 1000, 3),
        "added_ms": round((median(ours) - median(theirs)) * 1000, 3),
        "ratio": round(median(ours) / median(theirs), 2),
    }


async def _memory(idle_seconds: float, tmp: Path) -> dict:
    script = console_script()
    if script is None:
        return {"status": "skipped", "note": "no `companion` entry point installed"}
    started = tmp / "server-started"
    config = write_config(
        tmp / "gateway-mcp.json", {"bench": stdio_server("--only", "echo", "--started", str(started))}
    )
    api = FakeBotApi()
    await api.start()
    try:
        env = child_env(
            COMPANION_TELEGRAM_TOKEN=TOKEN,
            COMPANION_TELEGRAM_BASE_URL=api.base_url,
            COMPANION_DB_PATH=str(tmp / "companion.db"),
            COMPANION_ALLOWED_USERS="telegram:1",
            COMPANION_HTTP_PORT="off",
        )
        without = await _run_gateway([script, "run"], env, tmp, idle_seconds)
        with_one = await _run_gateway([script, "run"], {**env, "COMPANION_MCP_CONFIG": str(config)}, tmp, idle_seconds)
    finally:
        await api.aclose()
    if not without["status"] or not with_one["status"]:
        return {"status": "failed", "note": "a gateway exited early", "rc": [without["rc"], with_one["rc"]]}
    none_rss, one_rss = without["status"]["VmRSS"], with_one["status"]["VmRSS"]
    return {
        "status": "measured",
        "idle_seconds": idle_seconds,
        "none_rss_mb": round(none_rss / 1e6, 1),
        "one_server_rss_mb": round(one_rss / 1e6, 1),
        "adds_mb": round((one_rss - none_rss) / 1e6, 1),
        # The gateway started the server: without bot/bootstrap.py's wiring, both runs are one gateway.
        "wired": started.exists(),
    }


def run(quick: bool = False) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-mcp-") as name:
        tmp = Path(name)
        calls = asyncio.run(_calls(20 if quick else CALLS, tmp))
        memory = asyncio.run(_memory(3.0 if quick else 5.0, tmp))
    return {"call": calls, "memory": memory, "ok": True}


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
