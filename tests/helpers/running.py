"""`companion run` in a subprocess whose stderr is read as it comes (a thread), so a test can wait for
the line that says the gateway is up, stop or kill it at a chosen moment, and read what it logged."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Callable

from tests.helpers.proc import spawn_companion

RUNNING = "bot.gateway: gateway running"


class Running:
    """`with Running(env) as gateway:`; leaving the block stops it (SIGTERM, killed after 30 s)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.proc = spawn_companion(["run"], env)
        self._lines: list[str] = []
        self._seen = threading.Condition()
        self._eof = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            with self._seen:
                self._lines.append(line.rstrip("\n"))
                self._seen.notify_all()
        with self._seen:
            self._lines.append("")  # end of stream
            self._eof = True
            self._seen.notify_all()

    @property
    def stderr(self) -> str:
        """What it logged so far."""
        with self._seen:
            return "\n".join(self._lines)

    def wait_running(self, timeout: float = 30) -> None:
        """Until the gateway logs "gateway running" (INFO): every adapter started, the watches set."""
        self.wait_logged(RUNNING, timeout, what="the gateway did not start")

    def wait_logged(self, ending: str, timeout: float = 30, *, what: str | None = None) -> None:
        """Until a line of the log ends with `ending` (or the log ends)."""
        with self._seen:
            self._seen.wait_for(lambda: any(line.endswith(ending) for line in self._lines) or self._eof, timeout)
            found = any(line.endswith(ending) for line in self._lines)
        if not found:
            raise AssertionError(f"{what or 'no line ending ' + repr(ending)}:\n" + "\n".join(self._lines[-30:]))

    def wait_for(self, predicate: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
        """Poll `predicate` until it holds; fail early, with the log, if the gateway exits."""
        deadline = time.monotonic() + timeout
        while not predicate():
            if self.proc.poll() is not None:
                self._reader.join(10)
                raise AssertionError(f"the gateway exited with {self.proc.returncode} before {what}:\n{self.stderr}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not within {timeout} s")
            time.sleep(0.05)

    def end(self, how: signal.Signals = signal.SIGTERM, timeout: float = 60) -> tuple[int, str]:
        """Send `how` and wait for the exit: the exit code and stderr (killed, and failing, after `timeout`)."""
        if self.proc.poll() is None:
            self.proc.send_signal(how)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            self._reader.join(10)
            raise AssertionError(f"still running {timeout} s after {how.name}:\n{self.stderr}") from None
        self._reader.join(10)
        return self.proc.returncode, self.stderr

    def exited(self, timeout: float = 30) -> tuple[int, str, list[str]]:
        """Wait for it to end by itself: the exit code, stderr, and its `companion:` lines."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"still running after {timeout} s:\n" + "\n".join(self._lines[-30:])) from None
        self._reader.join(10)
        err = "\n".join(self._lines)
        return self.proc.returncode, err, [line for line in self._lines if line.startswith("companion:")]

    def __enter__(self) -> Running:
        return self

    def __exit__(self, *exc_info: object) -> None:
        """SIGTERM if still running (killed after 30 s), then every pipe closed."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(10)
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            pipe.close()
