"""`companion run` as a real process, talking to fake Bot API and model telegram_servers over real HTTP."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from core.values import copy
from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.fake_telegram import FakeTelegramServer
from tests.helpers.telegram_gateway import USER, gateway_env, say, spawn, stop, wait_until

pytestmark = pytest.mark.wire

CANARY = "canary-91b7 what I only say in private"


def test_companion_run_holds_a_conversation_with_private_mode_through_real_http(
    telegram_servers: tuple[FakeTelegramServer, FakeOpenAIServer], tmp_path: Path
) -> None:
    telegram, model = telegram_servers
    env = gateway_env(tmp_path, telegram, model)
    gateway = spawn(env)
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
        assert say(telegram, gateway, "/normal") == copy.TRANSITION_FALLBACK
        say(telegram, gateway, "what shall we do this evening?")
        assert len(model.raw_requests) == first_normal + 1
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
    gateway = spawn(env)
    try:
        wait_until(telegram, gateway, lambda: len(telegram.sent) > answered)
        assert CANARY.encode() not in model.raw_requests[-1]
        # The chat's turns run in order: by the answer to a later /mode (which asks no model),
        # a redelivered update handled again would have been answered.
        assert say(telegram, gateway, "/mode").startswith("You are in ")
        assert len(telegram.sent) == answered + 2
        assert len(model.raw_requests) == asked + 1
    finally:
        code, stderr = stop(gateway)
    assert code == 0, stderr
    assert "Traceback" not in stderr


def test_companion_run_with_a_rejected_token_stops_with_one_clear_line(
    telegram_servers: tuple[FakeTelegramServer, FakeOpenAIServer], tmp_path: Path
) -> None:
    telegram, model = telegram_servers
    env = gateway_env(tmp_path, telegram, model, COMPANION_TELEGRAM_TOKEN="123456:not-the-token")
    gateway = spawn(env)
    _, stderr = gateway.communicate(timeout=30)
    assert gateway.returncode == 2
    lines = [line for line in stderr.splitlines() if line.startswith("companion:")]
    assert lines == [
        f"companion: COMPANION_TELEGRAM_TOKEN: the Bot API server at {telegram.base_url} rejected the token"
    ]
    assert "Traceback" not in stderr and "not-the-token" not in stderr


def test_companion_run_stops_cleanly_on_sigint(tmp_path, telegram_servers):
    telegram, model = telegram_servers
    process = spawn(gateway_env(tmp_path, telegram, model))
    try:
        assert say(telegram, process, "hello")  # up and answering
    finally:
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=20)
    assert process.returncode == 0
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr


def test_a_token_revoked_while_running_stops_the_gateway_with_one_line(
    telegram_servers: tuple[FakeTelegramServer, FakeOpenAIServer], tmp_path: Path
) -> None:
    telegram, model = telegram_servers
    gateway = spawn(gateway_env(tmp_path, telegram, model))
    try:
        assert say(telegram, gateway, "hello")  # up and answering
        telegram.fail_next("getUpdates", 401, times=100)  # the token is revoked
        telegram.end_long_poll()  # the poll waiting now returns: the next one meets the revoked token
        _, stderr = gateway.communicate(timeout=30)
    finally:
        if gateway.poll() is None:
            gateway.kill()
            gateway.communicate()
    assert gateway.returncode == 2
    lines = [line for line in stderr.splitlines() if line.startswith("companion:")]
    assert len(lines) == 1 and "COMPANION_TELEGRAM_TOKEN" in lines[0]
    assert "Traceback" not in stderr and telegram.token not in stderr
