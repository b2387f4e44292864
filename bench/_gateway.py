"""`companion run` (and the bare baseline bot) as child processes of a benchmark, on fake servers
served by the benchmark's own event loop: start, wait while checking they are alive, read memory,
stop with SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from bench._common import ROOT, child_env
from tests.helpers.fake_telegram import FakeTelegramServer

Waiter = Callable[[Callable[[], bool], float], Awaitable[None]]


class TimedBotApi(FakeTelegramServer):
    """The shared fake Bot API, also noting when each sendMessage arrived (perf_counter), so a
    round trip ends when the reply reaches the server, not when the waiting task wakes up; and
    how many updates its getUpdates answers carried (each one is parsed by the bot)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.sent_at: list[float] = []
        self.updates_returned = 0

    def _api_sendMessage(self, params):
        self.sent_at.append(time.perf_counter())
        return super()._api_sendMessage(params)

    async def _api_getUpdates(self, params):
        batch = await super()._api_getUpdates(params)
        self.updates_returned += len(batch)
        return batch


class ChildProcess:
    """One child with its stderr in a file; `alive()` raises with the stderr tail once it died."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.cwd = cwd
        self.proc: asyncio.subprocess.Process | None = None
        self._stderr_path = cwd / f"{name}.stderr"
        self._stderr = None

    async def start(self) -> None:
        self._stderr = open(self._stderr_path, "w+b")  # noqa: SIM115 - closed in stop()
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
            env=self.env,
            cwd=self.cwd,
        )

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stderr_tail(self, chars: int = 800) -> str:
        """The end of the child's stderr on one line (" | " between lines), for an error message."""
        if not self._stderr_path.exists():
            return ""
        return " | ".join(self._stderr_path.read_bytes()[-chars:].decode(errors="replace").splitlines())

    def stderr_text(self) -> str:
        return self._stderr_path.read_bytes().decode(errors="replace") if self._stderr_path.exists() else ""

    def alive(self) -> None:
        if self.proc is None or self.proc.returncode is not None:
            code = None if self.proc is None else self.proc.returncode
            raise RuntimeError(f"{self.name} exited with {code}: {self.stderr_tail()}")

    async def wait_until(
        self, condition: Callable[[], bool], timeout: float, what: str, waiter: Waiter | None = None
    ) -> None:
        """Wait for `condition`, checking every half second that the child is still running.
        `waiter(condition, seconds)` waits on a server's own event (a fake Bot API wakes on each
        call); without one, the condition is polled every 5 ms."""
        deadline = time.monotonic() + timeout
        while not condition():
            self.alive()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(
                    f"{self.name}: {what} did not happen within {timeout:g} s; stderr: {self.stderr_tail(400)}"
                )
            with contextlib.suppress(TimeoutError):
                await (waiter or _poll)(condition, min(remaining, 0.5))

    def vm_rss(self) -> int:
        """VmRSS of the child in bytes (/proc reports KiB as "kB")."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS in /proc status")

    def cpu_seconds(self) -> float:
        """User and system time of the child so far, every thread (/proc/PID/stat, clock ticks)."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    async def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM, wait, kill if it hangs; returns the exit code. Safe to call twice."""
        proc = self.proc
        try:
            if proc is not None and proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), timeout)
                except TimeoutError:
                    proc.kill()
                    await proc.wait()
        finally:
            if self._stderr is not None:
                self._stderr.close()
                self._stderr = None
        return None if proc is None else proc.returncode


def gateway(cwd: Path, *, tree: Path | None = None, name: str = "companion run", **settings: str) -> ChildProcess:
    """`companion run` from this interpreter (the code in this checkout), or from another checkout
    `tree` with its own .venv (the tree before a change, timed in the same run), configured by
    `settings` only: cwd is a scratch directory without a .env."""
    root = ROOT if tree is None else tree.resolve()
    python = sys.executable if tree is None else str(root / ".venv" / "bin" / "python")
    defaults = {
        "PYTHONPATH": str(root),
        "COMPANION_DB_PATH": str(cwd / "companion.db"),
        "COMPANION_HTTP_PORT": "0",
        "COMPANION_LOG_LEVEL": "WARNING",
        # The benches measure one answer per message: a burst window would add its own wait to
        # each round trip and merge the load bench's quick turns (README, "Bursts").
        "COMPANION_BURST_SECONDS": "0",
    }
    env = child_env(**{**defaults, **settings})
    return ChildProcess(name, [python, "-m", "bot", "run"], env, cwd)


def bare_bot(cwd: Path, token: str, base_url: str, model_url: str, database: str | None = None) -> ChildProcess:
    """bench/bare_bot.py committing twice a turn to `database` (a SQLite file, by default in `cwd`, or a postgresql:// URL)."""
    env = child_env(
        BARE_TELEGRAM_TOKEN=token,
        BARE_TELEGRAM_BASE_URL=base_url,
        BARE_LLM_BASE_URL=model_url,
        BARE_DATABASE=database or str(cwd / "bare.db"),
    )
    return ChildProcess("bare bot", [sys.executable, str(ROOT / "bench" / "bare_bot.py")], env, cwd)


async def _poll(condition: Callable[[], bool], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    # Polled: the condition is another process's side effect seen through a fake server; no event to await.
    while not condition() and time.monotonic() < deadline:  # noqa: ASYNC110 - see above
        await asyncio.sleep(0.005)
