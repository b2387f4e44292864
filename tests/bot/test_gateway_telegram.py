"""`companion run` as a real process, talking to fake Bot API and model servers over real HTTP."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from core.secrets import hash_passphrase
from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.fake_telegram import FakeTelegramServer
from tests.helpers.proc import ROOT

USER = 111
CANARY = "canary-91b7 what I only say in private"


@pytest.fixture
def servers() -> Iterator[tuple[FakeTelegramServer, FakeOpenAIServer]]:
    with FakeTelegramServer.run_in_thread() as telegram, FakeOpenAIServer.run_in_thread() as model:
        yield telegram, model


def gateway_env(tmp_path: Path, telegram: FakeTelegramServer, model: FakeOpenAIServer, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPANION_")}
    env.update(
        COMPANION_TELEGRAM_TOKEN=telegram.token,
        COMPANION_TELEGRAM_BASE_URL=telegram.base_url,
        COMPANION_LLM_BASE_URL=model.base_url,
        COMPANION_ALLOWED_USERS=f"telegram:{USER}",
        COMPANION_PRIVATE_PASSPHRASE_HASH=hash_passphrase("sesame"),
        COMPANION_DB_PATH=str(tmp_path / "companion.db"),
        COMPANION_LOG_LEVEL="INFO",
        PYTHONPATH=str(ROOT),  # the tree under test, not whatever is installed
    )
    env.update(extra)
    return env


def spawn(env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    # This interpreter, not whatever `companion` is first on PATH: the code under test.
    argv = [sys.executable, "-m", "bot", "run"]
    # cwd: a directory without a .env, so only `env` configures the process.
    return subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_until(telegram: FakeTelegramServer, process: subprocess.Popen[str], predicate: Callable[[], bool],
               timeout: float = 20.0) -> None:
    """Wait for `predicate` at the fake server, failing early (with stderr) if the gateway exits."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if process.poll() is not None:
            raise AssertionError(f"the gateway exited with {process.returncode}: {process.stderr.read()}")
        if time.monotonic() > deadline:
            raise TimeoutError("the gateway did not get there in time")
        try:
            telegram.wait_for_blocking(predicate, timeout=0.5)
        except TimeoutError:
            pass


def stop(process: subprocess.Popen[str]) -> tuple[int, str]:
    process.send_signal(signal.SIGTERM)
    try:
        _, stderr = process.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        _, stderr = process.communicate()
        raise
    return process.returncode, stderr


def say(telegram: FakeTelegramServer, process: subprocess.Popen[str], text: str) -> str:
    before = len(telegram.sent)
    telegram.send_text(USER, USER, text)
    wait_until(telegram, process, lambda: len(telegram.sent) > before)
    return telegram.sent[before].text


def test_companion_run_holds_a_conversation_with_private_mode_through_real_http(
    servers: tuple[FakeTelegramServer, FakeOpenAIServer], tmp_path: Path
) -> None:
    telegram, model = servers
    env = gateway_env(tmp_path, telegram, model)
    gateway = spawn(env, tmp_path)
    try:
        wait_until(telegram, gateway, lambda: bool(telegram.calls_of("getUpdates")))
        assert {c["command"] for c in telegram.commands} >= {"help", "private", "normal", "mode"}

        assert say(telegram, gateway, "hello").startswith("fake reply")
        before = len(telegram.sent)
        passphrase_message = telegram.send_text(USER, USER, "/private sesame")
        wait_until(telegram, gateway, lambda: len(telegram.sent) > before)
        assert telegram.sent[before].text.startswith("Private mode is on")
        assert (USER, passphrase_message) in telegram.deleted
        say(telegram, gateway, CANARY)
        assert CANARY.encode() in model.raw_requests[-1]

        first_normal = len(model.raw_requests)
        model.reply_text("Welcome back. Maybe a glass of water?")
        assert say(telegram, gateway, "/normal") == "Welcome back. Maybe a glass of water?"
        say(telegram, gateway, "what shall we do this evening?")
        assert len(model.raw_requests) == first_normal + 2
        assert all(CANARY.encode() not in raw for raw in model.raw_requests[first_normal:])
    finally:
        code, stderr = stop(gateway)
    assert code == 0, stderr
    assert "Traceback" not in stderr
    assert telegram.token not in stderr  # httpx logs every URL at INFO; the adapter redacts the token
    assert CANARY not in stderr and "sesame" not in stderr

    # Restart: what was handled is not handled again, even if Telegram offers it again;
    # what arrived while the gateway was down is handled once.
    answered, asked = len(telegram.sent), len(model.raw_requests)
    telegram.redeliver()
    telegram.send_text(USER, USER, "sent while you were down")
    gateway = spawn(env, tmp_path)
    try:
        wait_until(telegram, gateway, lambda: len(telegram.sent) > answered)
        time.sleep(0.5)
        assert len(telegram.sent) == answered + 1
        assert len(model.raw_requests) == asked + 1
        assert CANARY.encode() not in model.raw_requests[-1]
    finally:
        code, stderr = stop(gateway)
    assert code == 0, stderr
    assert "Traceback" not in stderr


def test_companion_run_with_a_rejected_token_stops_with_one_clear_line(
    servers: tuple[FakeTelegramServer, FakeOpenAIServer], tmp_path: Path
) -> None:
    telegram, model = servers
    env = gateway_env(tmp_path, telegram, model, COMPANION_TELEGRAM_TOKEN="123456:not-the-token")
    gateway = spawn(env, tmp_path)
    _, stderr = gateway.communicate(timeout=30)
    assert gateway.returncode == 2
    lines = [line for line in stderr.splitlines() if line.startswith("companion:")]
    assert lines == ["companion: COMPANION_TELEGRAM_TOKEN: the Bot API server at "
                     f"{telegram.base_url} rejected the token"]
    assert "Traceback" not in stderr and "not-the-token" not in stderr


def test_companion_run_stops_cleanly_on_sigint(tmp_path, servers):
    telegram, model = servers
    process = spawn(gateway_env(tmp_path, telegram, model), tmp_path)
    try:
        assert say(telegram, process, "hello")  # up and answering
    finally:
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=20)
    assert process.returncode == 0
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
