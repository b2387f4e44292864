"""Telegram as the tests drive it: the real python-telegram-bot adapter against the fake Bot API, a
person's private chat with it (in process), and the same for `companion run` (in a subprocess)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Literal

from bot.bootstrap import core_entry
from core.turn.companion import Companion
from core.values.edge import EdgeSettings
from tests.helpers.adapters import AttachedPlatform, telegram_adapter
from tests.helpers.fake_telegram import FakeTelegramServer
from tests.helpers.platforms import HAS, USER, ChatAppDriver, Fault, Origin, Where, hung_up

BOT = "companion_test_bot"
MIRROR_CHAT = -100777  # a Telegram group the DM is mirrored to
GROUP = -4242  # the group of the wire tests, where the person mentions the bot
SOMEONE = 5  # a Telegram user whose message the person forwards


class TelegramDriver(ChatAppDriver):
    """The person's private chat with the bot on the fake Bot API (`async with` serves it)."""

    name = "telegram"
    has = HAS["telegram"]
    person = f"telegram:{USER}"
    serves = None
    mirror_chat = f"telegram:{MIRROR_CHAT}"
    forward_names: ClassVar[Mapping[str, str]] = {"person": "Me", "companion": "C", "someone": "Bob"}
    send_tries = EdgeSettings().send_attempts  # the sender's tries of one send, as built
    date_step = 1.6  # Telegram's dates are whole seconds: past the restart's margin

    def __init__(self) -> None:
        self.server = FakeTelegramServer(username=BOT)

    def build(self, companion: Companion) -> AttachedPlatform:
        # Every try as built (`send_tries`), the pauses between them short, as the Discord driver's
        # (DISCORD_TIMINGS): the harness's tests count tries and outcomes, not pauses (0.5 s doubling as
        # shipped: 7.5 s for each send refused throughout); tests/adapters/test_telegram.py retries as shipped.
        edge = EdgeSettings(send_backoff=0.01, send_max_delay=0.01)
        return telegram_adapter(self.server, core_entry(companion, edge=edge), edge=edge)

    async def post(
        self, text: str, *, reply_to: str | None = None, quote: str | None = None, forward: Origin | None = None
    ) -> str:
        origin = None if forward is None else self._origin(forward)
        reply = None if reply_to is None else int(reply_to)
        return str(self.server.send_text(USER, USER, text, reply_to=reply, quote=quote, forward_origin=origin))

    def _origin(self, forward: Origin) -> dict[str, Any]:
        """A Bot API `MessageOrigin` of a user, dated as the person's message `forward.of` was."""
        sent_at = 1 if forward.of is None else self.server._messages[(USER, int(forward.of))]["date"]
        user = {"person": USER, "companion": self.server.bot_id, "someone": SOMEONE}[forward.who]
        sender = {"id": user, "is_bot": forward.who == "companion", "first_name": self.forward_names[forward.who]}
        return {"type": "user", "date": sent_at, "sender_user": sender}

    async def edit(self, message_id: str, text: str) -> None:
        self.server.edit_text(USER, int(message_id), text)

    async def send_photo(self, caption: str) -> None:
        before = len(self.shown())
        self.server.send_photo(USER, USER, b"\xff\xd8 a photo", caption=caption)
        await self.server.wait_for(lambda: len(self.shown()) > before)

    async def press(self, command: str) -> None:
        asked = self.server.sent[-1]
        before = len(self.shown())
        self.server.press_button(USER, USER, asked.message_id, f"companion:{command}")
        await self.server.wait_for(lambda: len(self.shown()) >= before + 2)  # the answer and its file

    def post_while_down(self, text: str) -> None:
        self.server.send_text(USER, USER, text)  # an update Telegram keeps until the bot asks again

    def shown(self, chat: Literal["dm", "mirror"] = "dm") -> list[str]:
        return self.server.texts_to(USER if chat == "dm" else MIRROR_CHAT)

    def sent(self) -> list[str]:
        return [m.text for m in self.server.sent]

    def fail_sends(self) -> None:
        self.server.fail_next("sendMessage", 502, times=self.send_tries)

    def send_calls(self) -> int:
        return len(self.server.calls_of("sendMessage"))

    async def wait_until(self, predicate: Callable[[], bool], what: str) -> None:
        await self.server.wait_for(predicate)


class TelegramWire:
    """The fake Bot API for `companion run`: a private chat with USER, and a basic group where USER
    mentions the bot."""

    name = "telegram"
    account = f"telegram:{USER}"
    wheres: tuple[Where, ...] = ("dm", "group")
    faults: tuple[Fault, ...] = ("refuse", "hang", "take")

    def __init__(self, server: FakeTelegramServer) -> None:
        self.server = server
        self._fault: Fault | None = None

    def settings(self) -> dict[str, str]:
        return {"COMPANION_TELEGRAM_TOKEN": self.server.token, "COMPANION_TELEGRAM_BASE_URL": self.server.base_url}

    def chat(self, where: Where) -> int:
        return USER if where == "dm" else GROUP

    def say(self, where: Where, text: str) -> None:
        if where == "dm":
            self.server.send_text(USER, USER, text)
        else:
            self.server.send_text(GROUP, USER, f"@{self.server.username} {text}", chat_type="group")

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
        """The platform works again, once the sends it held for a process that is gone were hung up on."""
        hung_up(self.server)
        self.server.forget_failures("sendMessage")
        self.server.hold_sends = self.server.hold_answers = False
        self._fault = None
