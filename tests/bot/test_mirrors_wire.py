"""Mirrors end to end (issue 13): one `companion run` with a fake Bot API, a fake Discord and a
fake model on 127.0.0.1; a Telegram DM bound to a Discord channel shows every normal exchange,
in order, exactly once across a SIGKILL, and nothing at all of a private interval."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.values.copy import TRANSITION_FALLBACK
from tests.helpers.fake_discord import FakeDiscordServer
from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.fake_telegram import FakeTelegramServer
from tests.helpers.telegram_gateway import gateway_env, say, spawn, stop, wait_until

pytestmark = pytest.mark.wire

CANARY = "canary-3f9a what I only say in private"


@pytest.fixture
def servers() -> Iterator[tuple[FakeTelegramServer, FakeDiscordServer, FakeOpenAIServer]]:
    with (
        FakeTelegramServer.run_in_thread() as telegram,
        FakeDiscordServer.run_in_thread() as discord_server,
        FakeOpenAIServer.run_in_thread() as model,
    ):
        yield telegram, discord_server, model


def answer(body: dict) -> str:
    """The model answers each message with a line naming it, so every copy can be matched."""
    said = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
    return f"answer to {said}"


def rows(tmp_path: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(tmp_path / "companion.db") as db:
        return db.execute(sql).fetchall()


def copies(discord_server: FakeDiscordServer) -> list[str]:
    return [m.content for m in discord_server.sent if m.channel_id == discord_server.guild_channel_id]


def exchange(text: str) -> str:
    return f"[telegram DM] you: {text}\ncompanion: answer to {text}"


def test_a_telegram_dm_mirrored_to_discord_shows_every_normal_exchange_once_and_nothing_private(
    tmp_path: Path, servers: tuple[FakeTelegramServer, FakeDiscordServer, FakeOpenAIServer]
) -> None:
    telegram, discord_server, model = servers
    model.responder = answer
    channel = discord_server.guild_channel_id
    env = gateway_env(
        tmp_path,
        telegram,
        model,
        COMPANION_DISCORD_TOKEN=discord_server.token,
        COMPANION_DISCORD_API_BASE=discord_server.api_base,
        COMPANION_DISCORD_GATEWAY_URL=discord_server.gateway_url,
        COMPANION_HTTP_PORT="0",
    )
    gateway = spawn(env)
    try:
        discord_server.call(discord_server.wait_for_ready(timeout=30), timeout=40)
        for _ in range(40):  # Telegram answers while the Discord adapter is still connecting
            bound = say(telegram, gateway, f"/mirror discord:{channel}")
            if "not connected yet" not in bound:
                break
            time.sleep(0.25)
        assert bound.startswith("Mirror 1 is on"), bound
        assert copies(discord_server) == ["Mirroring telegram DM here. /unmirror in the source stops it."]

        normal = ["first of all", "second thing", "third and last"]
        for text in normal:
            assert say(telegram, gateway, text) == f"answer to {text}"
        wait_until(telegram, gateway, lambda: len(copies(discord_server)) >= 4)
        assert copies(discord_server)[1:] == [exchange(t) for t in normal]

        assert say(telegram, gateway, "/private sesame").startswith("Private mode is on")
        say(telegram, gateway, f"{CANARY} one")
        say(telegram, gateway, f"{CANARY} two")
        assert say(telegram, gateway, "/normal") == TRANSITION_FALLBACK
        assert say(telegram, gateway, "back again") == "answer to back again"
        wait_until(telegram, gateway, lambda: len(copies(discord_server)) >= 5)
        # The channel shows nothing for the private interval: the next copy follows the third.
        assert copies(discord_server)[4:] == [exchange("back again")]
        assert rows(tmp_path, "SELECT count(*) FROM deliveries WHERE kind = 'mirror'") == [(4,)]

        # Discord stops answering sends: the next copies stay pending while the replies go on.
        discord_server.hold_messages = True
        heard_before = len(discord_server.bodies)
        held = ["while discord hangs", "and one more"]
        for text in held:
            assert say(telegram, gateway, text) == f"answer to {text}"
        wait_until(
            telegram,
            gateway,
            lambda: (
                rows(tmp_path, "SELECT count(*) FROM deliveries WHERE kind = 'mirror' AND status = 'pending'") == [(2,)]
            ),
        )
        # The first held copy reaches the fake and waits there, unanswered.
        wait_until(telegram, gateway, lambda: len(discord_server.bodies) > heard_before)
    finally:
        gateway.kill()  # SIGKILL, with copies pending (one of them in flight)
        _, killed_stderr = gateway.communicate()

    posts = "/api/v10/channels/{channel_id}/messages"
    discord_server.call(discord_server.wait_until(lambda: ("POST", posts, 0) in discord_server.requests, 10, "hang-up"))
    discord_server.hold_messages = False
    gateway = spawn(env)
    try:
        wait_until(telegram, gateway, lambda: len(copies(discord_server)) >= 7, timeout=60)
        discord_server.call(discord_server.settle(1.0))
    finally:
        code, stderr = stop(gateway)
    assert code == 0, stderr
    assert copies(discord_server)[5:] == [exchange(t) for t in held]  # each pending copy exactly once, in order
    assert rows(tmp_path, "SELECT status, count(*) FROM deliveries WHERE kind = 'mirror' GROUP BY status") == [
        ("sent", 6)
    ]

    # Nothing of the private interval ever reached Discord: every request body and gateway frame.
    heard = b"\n".join(discord_server.bodies) + "\n".join(discord_server.frames).encode()
    assert heard, "the fake Discord heard nothing: the test proves nothing"
    assert CANARY.split()[0].encode() not in heard
    assert TRANSITION_FALLBACK.encode() not in heard and b"sesame" not in heard
    assert CANARY not in stderr and CANARY not in killed_stderr
