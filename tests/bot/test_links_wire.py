"""Linked accounts end to end (issue 16): one `companion run` with a fake Bot API, a fake Discord
and a fake model on 127.0.0.1. A Telegram account and a Discord account linked with a `/link`
code share memory, and a canary said in a Telegram private interval never reaches a request body
the model receives for the Discord account's normal turns."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.values.copy import TRANSITION_FALLBACK
from tests.helpers.fake_discord import FakeDiscordServer
from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.fake_telegram import FakeTelegramServer
from tests.helpers.telegram_gateway import USER, gateway_env, say, spawn, stop

pytestmark = pytest.mark.wire

CANARY = "canary-5be1 the one thing said only in private"
FRIEND = 222  # the same person's Discord user id


@pytest.fixture
def servers() -> Iterator[tuple[FakeTelegramServer, FakeDiscordServer, FakeOpenAIServer]]:
    with (
        FakeTelegramServer.run_in_thread() as telegram,
        FakeDiscordServer.run_in_thread() as discord_server,
        FakeOpenAIServer.run_in_thread() as model,
    ):
        yield telegram, discord_server, model


def dm(discord_server: FakeDiscordServer, text: str) -> str:
    """Send `text` as FRIEND in their Discord DM and return the bot's next message."""
    before = len(discord_server.sent)
    discord_server.call(discord_server.send_dm(FRIEND, text))
    return discord_server.call(discord_server.wait_for_sent(before + 1, timeout=20))[before].content


def every_value(db_path: Path) -> str:
    with sqlite3.connect(db_path) as db:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return "\n".join(str(v) for t in tables for row in db.execute(f"SELECT * FROM {t}") for v in row)


def test_linked_telegram_and_discord_share_memory_and_a_telegram_private_canary_never_reaches_discord_turns(
    tmp_path: Path, servers: tuple[FakeTelegramServer, FakeDiscordServer, FakeOpenAIServer]
) -> None:
    telegram, discord_server, model = servers
    model.responder = lambda body: "noted"
    env = gateway_env(
        tmp_path,
        telegram,
        model,
        COMPANION_DISCORD_TOKEN=discord_server.token,
        COMPANION_DISCORD_API_BASE=discord_server.api_base,
        COMPANION_DISCORD_GATEWAY_URL=discord_server.gateway_url,
        COMPANION_ALLOWED_USERS=f"telegram:{USER},discord:{FRIEND}",
        COMPANION_LOG_LEVEL="DEBUG",
        COMPANION_HTTP_PORT="0",
    )
    gateway = spawn(env)
    try:
        discord_server.call(discord_server.wait_for_ready(timeout=30), timeout=40)
        issued = say(telegram, gateway, "/link")
        match = re.search(r"link code: (\d{8})", issued)
        assert match, issued
        code = match.group(1)
        assert dm(discord_server, f"/link {code}").startswith("Linked.")
        assert "sister is called Ana" in dm(discord_server, "/remember my sister is called Ana")

        assert say(telegram, gateway, "/private sesame").startswith("Private mode is on")
        say(telegram, gateway, f"{CANARY}")
        assert CANARY.encode() in model.raw_requests[-1]
        seen = len(model.raw_requests)
        dm(discord_server, "while telegram is private, what do you know about me?")
        assert say(telegram, gateway, "/normal") == TRANSITION_FALLBACK
        dm(discord_server, "and now?")
        dm(discord_server, f"/recall {CANARY.split()[0]}")
        discord_turns = model.raw_requests[seen:]
        assert len(discord_turns) == 2
        assert all(b"sister is called Ana" in raw for raw in discord_turns)  # memory is shared...
        assert all(CANARY.encode() not in raw for raw in discord_turns)  # ...never private mode

        say(telegram, gateway, "who is my sister?")
        assert b"sister is called Ana" in model.raw_requests[-1]  # saved on Discord, read on Telegram
    finally:
        code_exit, stderr = stop(gateway)
    assert code_exit == 0, stderr
    assert code not in stderr and CANARY not in stderr
    heard = b"\n".join(discord_server.bodies) + "\n".join(discord_server.frames).encode()
    assert CANARY.encode() not in heard
    assert code not in every_value(tmp_path / "companion.db")
