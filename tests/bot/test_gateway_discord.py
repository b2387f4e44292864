"""`companion run` end to end on Discord: a real subprocess, a real websocket, real HTTP."""

from __future__ import annotations

import signal
import subprocess

import pytest

from core.values.copy import DELETE_SECRET_NOTE, TRANSITION_FALLBACK
from tests.conftest import PASSPHRASE
from tests.helpers.fake_discord import FakeDiscordServer
from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.proc import companion_env, spawn_companion

pytestmark = pytest.mark.wire

CANARY = "canary-81c4 the thing I never told anyone"
FRIEND = 111


def discord_env(tmp_path, discord_server, model, passphrase_hash, **extra: str) -> dict[str, str]:
    settings = {
        "COMPANION_DISCORD_TOKEN": discord_server.token,
        "COMPANION_DISCORD_API_BASE": discord_server.api_base,
        "COMPANION_DISCORD_GATEWAY_URL": discord_server.gateway_url,
        "COMPANION_LLM_BASE_URL": model.base_url,
        "COMPANION_ALLOWED_USERS": f"discord:{FRIEND}",
        "COMPANION_PRIVATE_PASSPHRASE_HASH": passphrase_hash,
        "COMPANION_LOG_LEVEL": "INFO",  # the log must carry no message text even here
        "COMPANION_HTTP_PORT": "0",
    }
    return companion_env(tmp_path, **{**settings, **extra})


def last_user_text(request: dict) -> str:
    return [m for m in request["messages"] if m["role"] == "user"][-1]["content"]


def stop(proc: subprocess.Popen) -> tuple[str, str]:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()


def test_companion_run_holds_a_discord_dm_conversation_with_private_mode_and_answers_a_guild_mention(
    tmp_path, discord_servers, passphrase_hash
):
    discord_server, model = discord_servers
    call = discord_server.call
    proc = spawn_companion(["run"], discord_env(tmp_path, discord_server, model, passphrase_hash))
    try:
        call(discord_server.wait_for_ready(timeout=30), timeout=40)
        assert discord_server.identifies[0]["token"] == discord_server.token

        model.reply_text("Hello! Good to see you.")
        call(discord_server.send_dm(FRIEND, "hello"))
        sent = call(discord_server.wait_for_sent(1, timeout=20))
        assert sent[0].content == "Hello! Good to see you."

        call(discord_server.send_dm(FRIEND, f"/private {PASSPHRASE}"))
        sent = call(discord_server.wait_for_sent(2, timeout=20))
        assert "private mode" in sent[1].content.lower() and sent[1].content.endswith(DELETE_SECRET_NOTE)

        call(discord_server.send_dm(FRIEND, CANARY))
        call(discord_server.wait_for_sent(3, timeout=20))
        assert CANARY.encode() in model.raw_requests[-1]

        before_normal = len(model.raw_requests)
        call(discord_server.send_dm(FRIEND, "/normal"))
        sent = call(discord_server.wait_for_sent(4, timeout=20))
        assert sent[3].content == TRANSITION_FALLBACK  # the constant line: no model call
        model.reply_text("Back to ordinary things, then.")
        call(discord_server.send_dm(FRIEND, "so, what's new?"))
        sent = call(discord_server.wait_for_sent(5, timeout=20))
        assert sent[4].content == "Back to ordinary things, then."
        assert len(model.raw_requests) - before_normal == 1
        assert all(CANARY.encode() not in raw for raw in model.raw_requests[before_normal:])

        model.reply_text("Hi, channel!")
        call(discord_server.send_guild_message(FRIEND, "say hi"))
        sent = call(discord_server.wait_for_sent(6, timeout=20))
        assert sent[5].channel_id == discord_server.guild_channel_id and sent[5].content == "Hi, channel!"
        assert all(m.pings == frozenset() for m in sent)
    finally:
        out, err = stop(proc)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert CANARY not in err and PASSPHRASE not in err and CANARY not in out
    assert all(PASSPHRASE.encode() not in raw for raw in model.raw_requests)
    call(discord_server.wait_until(lambda: not discord_server.sessions, timeout=5, what="the gateway to close"))


def test_companion_run_stops_with_one_line_when_the_token_lacks_the_message_content_intent(tmp_path, passphrase_hash):
    with (
        FakeDiscordServer.run_in_thread(privileged_intents=0) as discord_server,
        FakeOpenAIServer.run_in_thread() as model,
    ):
        proc = spawn_companion(
            ["run"], discord_env(tmp_path, discord_server, model, passphrase_hash, COMPANION_LOG_LEVEL="WARNING")
        )
        _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("companion:")]
    assert len(lines) == 1 and "Message Content" in lines[0]


def test_companion_run_stops_with_one_line_when_the_token_is_invalid(tmp_path, passphrase_hash):
    with (
        FakeDiscordServer.run_in_thread(token="the-real-token") as discord_server,
        FakeOpenAIServer.run_in_thread() as model,
    ):
        env = discord_env(tmp_path, discord_server, model, passphrase_hash, COMPANION_LOG_LEVEL="WARNING")
        env["COMPANION_DISCORD_TOKEN"] = "a-wrong-token"
        proc = spawn_companion(["run"], env)
        _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "Traceback" not in err and "a-wrong-token" not in err
    assert err.strip().splitlines()[-1].startswith("companion: COMPANION_DISCORD_TOKEN was rejected")


def test_telegram_and_discord_run_side_by_side_in_one_gateway_process(tmp_path, discord_servers, passphrase_hash):
    from tests.helpers.fake_telegram import FakeTelegramServer

    discord_server, model = discord_servers
    with FakeTelegramServer.run_in_thread() as telegram:
        env = discord_env(
            tmp_path,
            discord_server,
            model,
            passphrase_hash,
            COMPANION_TELEGRAM_TOKEN=telegram.token,
            COMPANION_TELEGRAM_BASE_URL=telegram.base_url,
            COMPANION_ALLOWED_USERS=f"discord:{FRIEND},telegram:{FRIEND}",
        )
        proc = spawn_companion(["run"], env)
        try:
            discord_server.call(discord_server.wait_for_ready(timeout=30), timeout=40)
            telegram.send_text(FRIEND, FRIEND, "hello from telegram")
            discord_server.call(discord_server.send_dm(FRIEND, "hello from discord"))
            assert len(telegram.wait_for_sent_blocking(1, timeout=20)) == 1
            assert len(discord_server.call(discord_server.wait_for_sent(1, timeout=20))) == 1
        finally:
            _out, err = stop(proc)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    said = [last_user_text(request) for request in model.requests]
    assert sorted(said) == ["hello from discord", "hello from telegram"]
