"""5. Idle gateway memory: `companion run` with Telegram configured against a minimal fake Bot API
on 127.0.0.1; VmRSS after a few idle seconds, against an idle interpreter in the same run; the
same gateway with its HTTP service off (the service may add at most 8 MB); and what the gateway
imports, with the peak RSS each heavy package costs on its own."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import importlib.util
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aiohttp import web

from bench._common import child_env
from bench._proc import console_script, import_report, parse_importtime, run_child
from tests.helpers.serving import LoopbackServer

BUDGET_MB = 50.0  # decimal megabytes, as the budget is written (the house budget)
HTTP_BUDGET_MB = 8.0  # what the HTTP service (aiohttp's server, prometheus-client) may add (issue 23)
TOKEN = "123456:BENCH-fake-token"
NOT_CONFIGURED = ("discord",)  # only Telegram is configured here
_OK_TRUE = {"ok": True, "result": True}
_ME = {"ok": True, "result": {"id": 1, "is_bot": True, "first_name": "b", "username": "b_bot"}}


class FakeBotApi(LoopbackServer):
    """Just enough of the Telegram Bot API for an adapter to start and idle: getMe, webhook and
    command calls succeed, getUpdates long-polls a second and returns nothing."""

    def __init__(self, poll_seconds: float = 1.0) -> None:
        self.poll_seconds = poll_seconds
        self.calls: collections.Counter[str] = collections.Counter()
        self.base_url = ""
        self._runner: web.AppRunner | None = None
        self._closing = asyncio.Event()

    async def start(self) -> None:
        if self._runner is not None:
            return
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        await self._bind(app)
        # python-telegram-bot's convention: base_url + token + "/" + method.
        self.base_url = f"http://127.0.0.1:{self.port}/bot"

    async def aclose(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            self._closing.set()
            await runner.cleanup()

    async def _handle(self, request: web.Request) -> web.Response:
        await request.read()
        method = request.path.rstrip("/").rsplit("/", 1)[-1]
        self.calls[method] += 1
        if method.lower() == "getme":
            return web.json_response(_ME)
        if method.lower() == "getupdates":
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._closing.wait(), self.poll_seconds)
            return web.json_response({"ok": True, "result": []})
        return web.json_response(_OK_TRUE)


def _proc_status(pid: int) -> dict[str, int]:
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) * 1024  # "kB" in /proc means KiB
    return values


def _idle_interpreter_rss() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=child_env())
    try:
        time.sleep(0.5)
        return _proc_status(proc.pid)["VmRSS"]
    finally:
        proc.terminate()
        proc.wait(10)


async def _run_gateway(argv: list[str], env: dict[str, str], cwd: Path, idle_seconds: float) -> dict:
    """Start the gateway, let it idle, read its memory, SIGTERM it and wait for a clean exit."""
    with open(cwd / "stderr.txt", "w+b") as err:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=env,
            cwd=cwd,
        )
        deadline = time.monotonic() + idle_seconds
        while time.monotonic() < deadline and proc.returncode is None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(proc.wait(), 0.1)
        status = _proc_status(proc.pid) if proc.returncode is None else {}
        exited_early = proc.returncode is not None
        stopping = time.perf_counter()
        if not exited_early:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 15)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        shutdown_s = time.perf_counter() - stopping
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    return {
        "status": status,
        "exited_early": exited_early,
        "rc": proc.returncode,
        "shutdown_s": shutdown_s,
        "stderr": stderr,
    }


def _entry_modules(entries: list[tuple[str, int, int]]) -> dict[str, list[str]]:
    """For each top-level package, the modules through which others import it, in import order.
    `-X importtime` lists children before their parent, one indent deeper."""
    parents: dict[int, str | None] = {}
    stack: list[tuple[int, str]] = []
    for index in range(len(entries) - 1, -1, -1):
        name, _, depth = entries[index]
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parents[index] = stack[-1][1] if stack else None
        stack.append((depth, name))
    found: dict[str, list[str]] = {}
    for index, (name, _, _) in enumerate(entries):
        root, parent = name.split(".")[0], parents[index]
        if parent is None or parent.split(".")[0] != root:
            found.setdefault(root, [])
            if name not in found[root]:
                found[root].append(name)
    return found


def _import_chain(entries: list[tuple[str, int, int]], cwd: Path, heavy: int) -> list[dict]:
    """Where the memory goes: peak RSS of importing, one after another in the gateway's import
    order, asyncio, the heaviest third-party packages, then the gateway's own modules."""
    ours = ("bot", "core", "adapters", "migrations")
    slowest: dict[str, int] = {}
    for name, cumulative, _depth in entries:
        root = name.split(".")[0]
        if root not in sys.stdlib_module_names and root not in ours and not root.startswith("_"):
            slowest[root] = max(slowest.get(root, 0), cumulative)
    chosen = set(sorted(slowest, key=slowest.get, reverse=True)[:heavy])
    entry = _entry_modules(entries)
    steps = [("(interpreter)", ["pass"]), ("asyncio", ["import asyncio"])]
    steps += [(root, [f"import {m}" for m in modules]) for root, modules in entry.items() if root in chosen]
    own = [f"import {m}" for root in ours for m in entry.get(root, [])]
    steps.append(("the gateway's own modules (and what they import lazily)", own))
    chain, code, previous = [], [], None
    for label, statements in steps:
        run = run_child([sys.executable, "-c", "; ".join(code + statements)], b"", child_env(), cwd)
        if run["rc"] != 0:
            continue
        code += statements
        rss = run["rss_mib"]
        chain.append(
            {
                "adds": label,
                "peak_rss_mib": round(rss, 1),
                "marginal_mib": round(rss - previous, 1) if previous is not None else None,
            }
        )
        previous = rss
    return chain


async def _measure(idle_seconds: float, quick: bool) -> dict:
    script = console_script()
    if script is None:
        return {"status": "skipped", "note": "no `companion` entry point installed", "ok": None}
    api = FakeBotApi()
    await api.start()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-gateway-") as tmp:
            env = child_env(
                COMPANION_TELEGRAM_TOKEN=TOKEN,
                COMPANION_TELEGRAM_BASE_URL=api.base_url,
                COMPANION_DB_PATH=str(Path(tmp) / "companion.db"),
                COMPANION_ALLOWED_USERS="telegram:1",
                COMPANION_HTTP_PORT=str(_free_port()),  # the default: the HTTP service on
            )
            run = await _run_gateway([script, "run"], env, Path(tmp), idle_seconds)
            calls = dict(api.calls)
            # The same gateway without the HTTP service, the baseline of what the service adds.
            off = await _run_gateway([script, "run"], {**env, "COMPANION_HTTP_PORT": "off"}, Path(tmp), idle_seconds)
            # With Discord configured too, aiohttp is loaded (by discord.py) whether the service runs or not.
            with_discord = await _with_discord(script, env, Path(tmp), idle_seconds)
            imports: dict = {}
            if not run["exited_early"]:
                traced = await _run_gateway(
                    [sys.executable, "-X", "importtime", "-m", "bot", "run"], env, Path(tmp), min(idle_seconds, 2.5)
                )
                imports = import_report(traced["stderr"], NOT_CONFIGURED)
                imports.pop("packages")
                imports["rss_chain"] = _import_chain(parse_importtime(traced["stderr"]), Path(tmp), 3 if quick else 7)
    finally:
        await api.aclose()
    stderr = run["stderr"].replace(TOKEN, "<token>")
    if run["exited_early"] or not run["status"]:
        return {
            "status": "failed",
            "note": f"`companion run` exited with {run['rc']} within {idle_seconds:g} s",
            "stderr_tail": stderr[-800:],
            "api_calls": calls,
            "ok": None,
        }
    baseline = _idle_interpreter_rss()
    rss = run["status"]["VmRSS"]
    connected = calls.get("getMe", 0) > 0 and calls.get("getUpdates", 0) > 0
    off_rss = off["status"].get("VmRSS") if not off["exited_early"] else None
    adds = None if off_rss is None else round((rss - off_rss) / 1e6, 1)
    return {
        "status": "measured",
        "idle_seconds": idle_seconds,
        "rss_mb": round(rss / 1e6, 1),
        "rss_mib": round(rss / 2**20, 1),
        "hwm_mb": round(run["status"]["VmHWM"] / 1e6, 1),
        "baseline_idle_python_mb": round(baseline / 1e6, 1),
        "ratio": round(rss / baseline, 2),
        "budget_mb": BUDGET_MB,
        "api_calls": calls,
        "connected": connected,
        "note": "" if connected else "the adapter did not call getMe and getUpdates on the fake Bot API",
        "sigterm_exit_code": run["rc"],
        "shutdown_s": round(run["shutdown_s"], 2),
        "stderr_tail": stderr[-400:] if run["rc"] not in (0, -15) else "",
        "imports": imports,
        "http_service": {
            "on_rss_mb": round(rss / 1e6, 1),
            "off_rss_mb": None if off_rss is None else round(off_rss / 1e6, 1),
            "adds_mb": adds,
            "budget_mb": HTTP_BUDGET_MB,
            "ok": adds is not None and adds <= HTTP_BUDGET_MB,
            "with_discord": with_discord,
        },
        "ok": rss / 1e6 < BUDGET_MB and connected,
    }


async def _with_discord(script: str, env: dict[str, str], cwd: Path, idle_seconds: float) -> dict:
    """VmRSS of the gateway with Telegram and Discord (the tests' fake Discord server), service on and off."""
    from tests.helpers.fake_discord import FakeDiscordServer

    async with FakeDiscordServer() as discord_server:
        both = {
            **env,
            "COMPANION_DISCORD_TOKEN": discord_server.token,
            "COMPANION_DISCORD_API_BASE": discord_server.api_base,
            "COMPANION_DISCORD_GATEWAY_URL": discord_server.gateway_url,
            "COMPANION_ALLOWED_USERS": "telegram:1,discord:1",
        }
        on = await _run_gateway([script, "run"], both, cwd, idle_seconds)
        off = await _run_gateway([script, "run"], {**both, "COMPANION_HTTP_PORT": "off"}, cwd, idle_seconds)
    if not on["status"] or not off["status"]:
        return {"status": "failed", "stderr_tail": (on["stderr"] or off["stderr"])[-400:]}
    on_rss, off_rss = on["status"]["VmRSS"], off["status"]["VmRSS"]
    return {
        "on_rss_mb": round(on_rss / 1e6, 1),
        "off_rss_mb": round(off_rss / 1e6, 1),
        "adds_mb": round((on_rss - off_rss) / 1e6, 1),
    }


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run(quick: bool = False) -> dict:
    if importlib.util.find_spec("adapters.telegram") is None:
        return {
            "status": "skipped",
            "note": "adapters/telegram.py does not exist yet (another engineer is writing it)",
            "ok": None,
        }
    return asyncio.run(_measure(idle_seconds=3.0 if quick else 5.0, quick=quick))


if __name__ == "__main__":  # a look at this one alone
    print(json.dumps(run(quick="--quick" in sys.argv), indent=1))
