"""Reminders and nudges on Discord, and to a linked person's last chat, through real `companion run`
subprocesses: discord.py against the fake Discord server, python-telegram-bot against the fake Bot
API, the model behind the fake OpenAI-compatible server, and a one-second tick (issues 14 and 16).

No fixed sleep decides a negative: "nothing more arrived" is checked once a later message (a
probe reminder, or the next nudge) has arrived, which the same ticks had to send."""

from __future__ import annotations

import re
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from tests.bot import test_links_wire as links_wire
from tests.bot.test_gateway_discord import FRIEND, discord_env, stop
from tests.bot.test_links_wire import FRIEND as LINKED_FRIEND
from tests.bot.test_links_wire import dm
from tests.helpers.fake_discord import FakeDiscordServer
from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.fake_telegram import FakeTelegramServer
from tests.helpers.proc import spawn_companion
from tests.helpers.telegram_gateway import USER, gateway_env, say, spawn, wait_until

pytestmark = pytest.mark.wire

FAST = {
    "COMPANION_PROACTIVE_TICK_SECONDS": "1",
    "COMPANION_OUTBOX_TICK_SECONDS": "1",
    "COMPANION_QUIET_HOURS": "off",
}
NUDGE = "How did the interview go?"
servers = links_wire.servers  # the pytest fixture of both fake platforms and a fake model


def rows(tmp_path: Path, sql: str, params: tuple = ()) -> list[tuple]:
    with sqlite3.connect(tmp_path / "companion.db", timeout=10) as db:
        return db.execute(sql, params).fetchall()


def write(tmp_path: Path, sql: str, params: tuple = ()) -> None:
    with sqlite3.connect(tmp_path / "companion.db", timeout=10) as db:
        db.execute(sql, params)


def plant_due_watch(tmp_path: Path, what: str, *, platform: str = "discord") -> None:
    """An event two hours ago, made in the person's `platform` chat, and a person who last wrote two
    hours ago (the activity rule would hold a nudge for 30 minutes otherwise)."""
    now = time.time()
    write(
        tmp_path,
        "INSERT INTO followups (person_id, conversation_id, kind, text, due_at, created_at, updated_at)"
        " SELECT person_id, id, 'watch', ?, ?, ?, ? FROM conversations WHERE platform = ? AND kind = 'direct'",
        (what, now - 7200, now, now, platform),
    )
    write(tmp_path, "UPDATE proactive_people SET last_wrote_at = ?", (now - 7200,))


def nudge_or_reply(body: dict[str, Any]) -> str:
    """The model: a nudge when asked for one, a plain answer otherwise."""
    asked = "\n".join(str(m.get("content")) for m in body["messages"])
    return NUDGE if "one short, unprompted message" in asked else "noted"


def test_on_discord_a_reminder_and_a_nudge_arrive_once_in_the_dm_and_not_again_after_a_kill(
    discord_servers: tuple[FakeDiscordServer, FakeOpenAIServer], tmp_path: Path, passphrase_hash: str
) -> None:
    discord_server, model = discord_servers
    call = discord_server.call
    model.responder = nudge_or_reply
    env = discord_env(tmp_path, discord_server, model, passphrase_hash, **FAST)
    dm_channel = discord_server.dm_channel_id(FRIEND)

    def in_dm(text: str) -> list[str]:
        return [m.content for m in discord_server.sent if m.channel_id == dm_channel and m.content.startswith(text)]

    def arrived(text: str, timeout: float = 30) -> None:
        call(discord_server.wait_until(lambda: in_dm(text) != [], timeout, text), timeout=timeout + 10)

    proc = spawn_companion(["run"], env)
    try:
        call(discord_server.wait_for_ready(timeout=30), timeout=40)
        call(discord_server.send_dm(FRIEND, "/followup 5s stretch"))
        arrived("Follow-up #1 scheduled")
        arrived("Reminder: stretch")
        plant_due_watch(tmp_path, "the interview")
        arrived(NUDGE)
        # Both marked sent (the kill below must not find them mid-delivery), then killed.
        call(
            discord_server.wait_until(
                lambda: (
                    rows(tmp_path, "SELECT DISTINCT status FROM deliveries WHERE kind IN ('reminder', 'nudge')")
                    == [("sent",)]
                ),
                20,
                "both deliveries marked sent",
            ),
            timeout=30,
        )
    finally:
        proc.kill()
        proc.communicate()
    sessions = discord_server.sessions_opened
    proc = spawn_companion(["run"], env)
    try:
        call(discord_server.wait_for_ready(timeout=30, since=sessions), timeout=40)
        call(discord_server.send_dm(FRIEND, "/followup 1s probe"))
        arrived("Reminder: probe")  # the ticks after the restart have run
    finally:
        _, stderr = stop(proc)
    assert proc.returncode == 0, stderr
    assert in_dm("Reminder: stretch") == ["Reminder: stretch"]
    assert in_dm(NUDGE) == [NUDGE]
    assert rows(tmp_path, "SELECT kind, status FROM deliveries WHERE kind IN ('reminder', 'nudge') ORDER BY id") == [
        ("reminder", "sent"),
        ("nudge", "sent"),
        ("reminder", "sent"),
    ]
    assert "stretch" not in stderr and "interview" not in stderr  # logs carry ids and sizes, never text


def test_a_linked_persons_nudge_goes_to_the_platform_they_last_wrote_on_in_normal_mode(
    tmp_path: Path, servers: tuple[FakeTelegramServer, FakeDiscordServer, FakeOpenAIServer]
) -> None:
    telegram, discord_server, model = servers
    model.responder = nudge_or_reply
    env = gateway_env(
        tmp_path,
        telegram,
        model,
        COMPANION_DISCORD_TOKEN=discord_server.token,
        COMPANION_DISCORD_API_BASE=discord_server.api_base,
        COMPANION_DISCORD_GATEWAY_URL=discord_server.gateway_url,
        COMPANION_ALLOWED_USERS=f"telegram:{USER},discord:{LINKED_FRIEND}",
        COMPANION_HTTP_PORT="0",
        COMPANION_NUDGE_COOLDOWN_MINUTES="0",
        COMPANION_NUDGES_PER_DAY="10",
        COMPANION_EXPIRY_SWEEP_SECONDS="1",
        **FAST,
    )
    dm_channel = discord_server.dm_channel_id(LINKED_FRIEND)

    def on_discord() -> list[str]:
        return [m.content for m in discord_server.sent if m.channel_id == dm_channel and m.content == NUDGE]

    def on_telegram() -> list[str]:
        return [t for t in telegram.texts_to(USER) if t == NUDGE]

    gateway = spawn(env)
    try:
        discord_server.call(discord_server.wait_for_ready(timeout=30), timeout=40)
        match = re.search(r"link code: (\d{8})", say(telegram, gateway, "/link"))
        assert match
        assert dm(discord_server, f"/link {match.group(1)}").startswith("Linked.")

        # Last written on Discord: the watch made on Telegram is asked about on Discord.
        assert dm(discord_server, "hello from discord") == "noted"
        plant_due_watch(tmp_path, "the interview", platform="telegram")
        wait_until(telegram, gateway, lambda: on_discord() == [NUDGE])

        # Then on Telegram: the next nudge goes there.
        assert say(telegram, gateway, "hello from telegram") == "noted"
        plant_due_watch(tmp_path, "the concert", platform="telegram")
        wait_until(telegram, gateway, lambda: on_telegram() == [NUDGE])

        # Private mode on Discord (the command itself is a normal message there), then Telegram in
        # normal mode, then words in the Discord interval: those do not move the destination.
        assert dm(discord_server, "/private sesame 10s").startswith("Private mode is on")
        assert say(telegram, gateway, "hello again from telegram") == "noted"
        dm(discord_server, "said only in private on discord")
        plant_due_watch(tmp_path, "the match", platform="discord")
        # It waits while the Discord interval is open, and comes to Telegram once it has expired.
        wait_until(telegram, gateway, lambda: on_telegram() == [NUDGE, NUDGE], timeout=40)
    finally:
        gateway.kill()
        gateway.communicate()
    assert on_discord() == [NUDGE]
