"""One face for both fake platforms, for the lifecycle tests of `companion run` (a real subprocess):
say something in a DM or a group, read what the bot sent there, and make the platform refuse, hang
on or take-and-not-answer the bot's sends."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from pathlib import Path
from typing import Literal, Protocol

from bot.settings import Settings
from tests.helpers.fake_discord import API_PREFIX, FakeDiscordServer
from tests.helpers.fake_telegram import FakeTelegramServer

Where = Literal["dm", "group"]
Fault = Literal["refuse", "hang", "take"]

USER = 111  # the person, allowed on both platforms
TELEGRAM_GROUP = -4242
MESSAGES = "/channels/{channel_id}/messages"


def shipped(name: str) -> str:
    """A setting's default as shipped (bot/settings.py), as its environment variable's value."""
    return str(Settings.model_fields[name].default)


def rows(db_path: Path, sql: str, params: tuple = ()) -> list[tuple]:
    """Read the gateway's database from this process (another process: its locks stay its own)."""
    with contextlib.closing(sqlite3.connect(db_path)) as db:
        return db.execute(sql, params).fetchall()


class WirePlatform(Protocol):
    name: str

    def settings(self) -> dict[str, str]: ...
    def say(self, where: Where, text: str) -> None: ...
    def replies(self, where: Where) -> list[str]: ...
    def fault(self, fault: Fault) -> None: ...
    def faulted(self) -> bool: ...
    def release(self) -> None: ...


class TelegramWire:
    """The fake Bot API: a private chat with USER, and a basic group where USER mentions the bot."""

    name = "telegram"

    def __init__(self, server: FakeTelegramServer) -> None:
        self.server = server
        self._fault: Fault | None = None

    def settings(self) -> dict[str, str]:
        return {"COMPANION_TELEGRAM_TOKEN": self.server.token, "COMPANION_TELEGRAM_BASE_URL": self.server.base_url}

    def chat(self, where: Where) -> int:
        return USER if where == "dm" else TELEGRAM_GROUP

    def say(self, where: Where, text: str) -> None:
        if where == "dm":
            self.server.send_text(USER, USER, text)
        else:
            self.server.send_text(TELEGRAM_GROUP, USER, f"@{self.server.username} {text}", chat_type="group")

    def replies(self, where: Where) -> list[str]:
        return self.server.texts_to(self.chat(where))

    def fault(self, fault: Fault) -> None:
        """refuse: every send answered 502; hang: sends wait unanswered, nothing taken; take: sends are
        taken, then their answers wait."""
        self._fault = fault
        if fault == "refuse":
            self.server.fail_next("sendMessage", 502, times=10_000)
        elif fault == "hang":
            self.server.hold_sends = True
        else:
            self.server.hold_answers = True

    def faulted(self) -> bool:
        """Whether the fault has met a send of the bot."""
        if self._fault == "refuse":
            return bool(self.server.calls_of("sendMessage"))
        if self._fault == "hang":
            return self.server.holding > 0
        return self.server.holding > 0 and bool(self.server.sent)

    def release(self) -> None:
        """The platform works again, once the sends held for a process that is gone were hung up on
        (let through afterwards, such a send would still be taken: a copy no gateway is waiting for)."""
        deadline = time.monotonic() + 10
        while self.server.holding and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not self.server.holding, "a send of the stopped gateway is still held"
        self.server.forget_failures("sendMessage")
        self.server.hold_sends = self.server.hold_answers = False
        self._fault = None


class DiscordWire:
    """The fake Discord: a DM with USER, and the guild channel where USER mentions the bot."""

    name = "discord"

    def __init__(self, server: FakeDiscordServer) -> None:
        self.server = server
        self._fault: Fault | None = None

    def settings(self) -> dict[str, str]:
        return {
            "COMPANION_DISCORD_TOKEN": self.server.token,
            "COMPANION_DISCORD_API_BASE": self.server.api_base,
            "COMPANION_DISCORD_GATEWAY_URL": self.server.gateway_url,
        }

    def chat(self, where: Where) -> int:
        return self.server.dm_channel_id(USER) if where == "dm" else self.server.guild_channel_id

    def say(self, where: Where, text: str) -> None:
        if where == "dm":
            self.server.call(self.server.send_dm(USER, text))
        else:
            self.server.call(self.server.send_guild_message(USER, text))

    def replies(self, where: Where) -> list[str]:
        chat = self.chat(where)
        return [m.content for m in self.server.sent if m.channel_id == chat]

    def posts(self, where: Where) -> list[str | None]:
        """The nonce of each message POST to the chat that got through, in order (one that returned
        an earlier message by its nonce too)."""
        chat = self.chat(where)
        return [nonce for channel, nonce in self.server.message_posts if channel == chat]

    def fault(self, fault: Fault) -> None:
        self._fault = fault
        if fault == "refuse":
            self.server.fail_next("POST", MESSAGES, 502, times=10_000)
        elif fault == "hang":
            self.server.hold_messages = True
        else:
            self.server.hold_answers = True

    def faulted(self) -> bool:
        if self._fault == "refuse":
            return ("POST", API_PREFIX + MESSAGES, 502) in self.server.requests
        if self._fault == "hang":
            return self.server.holding > 0
        return self.server.holding > 0 and bool(self.server.sent)

    def release(self) -> None:
        deadline = time.monotonic() + 10
        while self.server.holding and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not self.server.holding, "a send of the stopped gateway is still held"
        self.server.forget_faults("POST", MESSAGES)
        self.server.hold_messages = self.server.hold_answers = False
        self._fault = None
