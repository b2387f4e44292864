"""Drive a real `companion run` subprocess against a FakeTelegramServer (running in a thread)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from core.privacy.secrets import hash_passphrase
from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.fake_telegram import FakeTelegramServer
from tests.helpers.proc import companion_env, spawn_companion

USER = 111


def gateway_env(tmp_path: Path, telegram: FakeTelegramServer, model: FakeOpenAIServer, **extra: str) -> dict[str, str]:
    """`companion_env` (the tree under test, a database in `tmp_path`) for a gateway on these fake servers."""
    settings = {
        "COMPANION_TELEGRAM_TOKEN": telegram.token,
        "COMPANION_TELEGRAM_BASE_URL": telegram.base_url,
        "COMPANION_LLM_BASE_URL": model.base_url,
        "COMPANION_ALLOWED_USERS": f"telegram:{USER}",
        "COMPANION_PRIVATE_PASSPHRASE_HASH": hash_passphrase("sesame"),
        "COMPANION_LOG_LEVEL": "INFO",
    }
    return companion_env(tmp_path, **{**settings, **extra})


def spawn(env: dict[str, str]) -> subprocess.Popen[str]:
    """`companion run` of the tree under test, in the database's folder (no .env there)."""
    return spawn_companion(["run"], env)


def wait_until(
    telegram: FakeTelegramServer, process: subprocess.Popen[str], predicate: Callable[[], bool], timeout: float = 30.0
) -> None:
    """Wait for `predicate` at the fake server, failing early (with stderr) if the gateway exits."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if process.poll() is not None:
            raise AssertionError(f"the gateway exited with {process.returncode}: {process.stderr.read()}")
        if time.monotonic() > deadline:
            raise TimeoutError("the gateway did not get there in time")
        with contextlib.suppress(TimeoutError):
            telegram.wait_for_blocking(predicate, timeout=0.5)


def polling(telegram: FakeTelegramServer, gateway: subprocess.Popen[str]) -> None:
    """Wait until this gateway polls (calls getUpdates after now)."""
    seen = len(telegram.calls_of("getUpdates"))
    wait_until(telegram, gateway, lambda: len(telegram.calls_of("getUpdates")) > seen)


def say(telegram: FakeTelegramServer, process: subprocess.Popen[str], text: str) -> str:
    """Send `text` as USER and return the text of the first reply after it."""
    before = len(telegram.sent)
    telegram.send_text(USER, USER, text)
    wait_until(telegram, process, lambda: len(telegram.sent) > before)
    return telegram.sent[before].text


def stop(process: subprocess.Popen[str]) -> tuple[int, str]:
    """SIGTERM, and the exit code and stderr (killed, and raising, after 30 s)."""
    process.send_signal(signal.SIGTERM)
    try:
        _, stderr = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise
    return process.returncode, stderr
