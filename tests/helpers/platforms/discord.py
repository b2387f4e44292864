"""Discord as the tests drive it: the real discord.py adapter against the fake Discord (REST and
gateway), a person's DM with it (in process), and the same for `companion run` (in a subprocess)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import ClassVar, Literal

from core.turn.companion import Companion
from core.turn.recovery import SENT_AT_MARGIN
from tests.helpers.adapters import DISCORD_TIMINGS, PlatformRun, discord_adapter
from tests.helpers.fake_discord import API_PREFIX, FakeDiscordServer
from tests.helpers.platforms import HAS, USER, ChatAppDriver, Fault, Origin, Where, hung_up

MESSAGES = "/channels/{channel_id}/messages"
SOMEONE = 222  # a member of the guild whose message the person forwards


class DiscordDriver(ChatAppDriver):
    """The person's DM with the bot on the fake Discord (`async with` serves it). A forward carries
    the words of the message it forwards (Discord's snapshot), not the text `say` is given with it;
    a reply quotes its whole message."""

    name = "discord"
    has = HAS["discord"]
    person = f"discord:{USER}"
    serves = None
    forward_names: ClassVar[Mapping[str, str]] = {
        "person": "another Discord chat",
        "companion": "another Discord chat",
        "someone": "#general",
    }
    send_tries = len(DISCORD_TIMINGS["retry_delays"]) + 1  # the adapter's tries of one send
    date_step = SENT_AT_MARGIN + 0.1  # past the restart's margin

    def __init__(self) -> None:
        self.server = FakeDiscordServer()
        self.mirror_chat = f"discord:{self.server.guild_channel_id}"

    def build(self, companion: Companion) -> PlatformRun:
        return discord_adapter(self.server, companion)

    async def post(
        self, text: str, *, reply_to: str | None = None, quote: str | None = None, forward: Origin | None = None
    ) -> str:
        reply = None if reply_to is None else int(reply_to)
        if forward is None:
            return str(await self.server.send_dm(USER, text, reply_to=reply))
        return str(await self.server.send_dm(USER, "", reply_to=reply, forward_of=await self._forwarded(forward, text)))

    async def _forwarded(self, forward: Origin, text: str) -> int:
        """The message a forward of `forward` carries: the person's, the companion's answer to it (the
        bot's next message in the DM), or someone's, written now in the guild's channel."""
        if forward.who == "someone":
            return await self.server.send_guild_message(SOMEONE, text, mention_bot=False)
        assert forward.of is not None
        if forward.who == "person":
            return int(forward.of)
        dm = self.server.dm_channel_id(USER)
        return next(m.id for m in self.server.sent if m.channel_id == dm and m.id > int(forward.of))

    async def edit(self, message_id: str, text: str) -> None:
        await self.server.edit_message(int(message_id), text)

    async def send_photo(self, caption: str) -> None:
        before = len(self.shown())
        await self.server.send_dm_media(USER, caption, files=[("cat.jpg", b"\xff\xd8 cat", "image/jpeg")])
        await self.server.wait_until(lambda: len(self.shown()) > before, what="the answer to the photo")

    async def press(self, command: str) -> None:
        asked = self.server.sent[-1].id
        pressed = await self.server.interactions.press_button(USER, asked, f"companion:{command}")
        await self.server.interactions.wait_for_responses(pressed, 3)  # acknowledged, the answer, its file

    def post_while_down(self, text: str) -> None:
        self.server.post_dm_while_offline(USER, text)

    def shown(self, chat: Literal["dm", "mirror"] = "dm") -> list[str]:
        channel = self.server.dm_channel_id(USER) if chat == "dm" else self.server.guild_channel_id
        return [m.content or "" for m in self.server.sent if m.channel_id == channel]

    def sent(self) -> list[str]:
        return [m.content or "" for m in self.server.sent]

    def fail_sends(self) -> None:
        # 503: discord.py itself waits out a 502 for half a minute before the adapter sees it; for the
        # outbox both are an outage.
        self.server.fail_next("POST", MESSAGES, 503, times=self.send_tries)

    def send_calls(self) -> int:
        return sum(1 for r in self.server.requests if r[:2] == ("POST", API_PREFIX + MESSAGES))

    async def wait_until(self, predicate: Callable[[], bool], what: str) -> None:
        await self.server.wait_until(predicate, what=what)


class DiscordWire:
    """The fake Discord for `companion run`: a DM with USER, and the guild channel where USER mentions
    the bot."""

    name = "discord"
    account = f"discord:{USER}"
    wheres: tuple[Where, ...] = ("dm", "group")
    faults: tuple[Fault, ...] = ("refuse", "hang", "take")

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
        """The platform works again, once the sends it held for a process that is gone were hung up on."""
        hung_up(self.server)
        self.server.forget_faults("POST", MESSAGES)
        self.server.hold_messages = self.server.hold_answers = False
        self._fault = None
