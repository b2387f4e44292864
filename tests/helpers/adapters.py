"""One builder per platform: its real parts pointed at its fake server, with the tests' quick timings.

`link` is what the gateway gives a Discord adapter: `bot.bootstrap.core_link(companion)`, or a
`CoreLink(handler, ...)` around a handler a test writes itself. A platform of three parts
(Telegram) takes the core's entry instead: `bot.bootstrap.core_entry(companion)`, or `core_for(handler)`.
Any option overrides the defaults (`token=` a wrong token, `gateway_url=None` to have it asked from
the API base).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from adapters.discord import DiscordAdapter
from adapters.telegram import telegram_platform
from core.delivery.handoff import HandOff
from core.delivery.typing import TypingService
from core.ports import AdapterStateStore, Platform
from core.turn.entry import CoreEntry
from core.turn.lanes import Lanes
from core.turn.link import CoreLink
from core.values.edge import EdgeSettings, Held, Silence, Silent
from core.values.model import InboundMessage, OutboundDelivery, Reply
from tests.helpers.fake_discord import FakeDiscordServer
from tests.helpers.fake_telegram import FakeTelegramServer

TELEGRAM_TIMINGS: dict[str, Any] = {"poll_timeout": 2.0, "repoll_interval": 0.05}
DISCORD_TIMINGS: dict[str, Any] = {"guild_ready_timeout": 0.05, "retry_delays": (0.01, 0.01), "ready_timeout": 10.0}


class AttachedPlatform:
    """A platform's three parts on a core's entry, started and closed as the gateway does it, but
    without the core's stop (a test keeps using its companion after a close):
    `start` starts the intake and attaches the platform; `aclose` stops the intake, lets it wait for
    the outcomes still coming and close its connection, then detaches the platform."""

    def __init__(self, platform: Platform, core: CoreEntry) -> None:
        self.platform = platform
        self.core = core

    @property
    def streamer(self) -> Any:
        return self.platform.streamer

    @property
    def bot(self) -> Any:
        return self.platform.intake._connection.bot  # type: ignore[attr-defined]

    async def start(self) -> None:
        await self.platform.intake.start()
        self.core.attach(self.platform)  # no await since the start: nothing could be answered before

    async def aclose(self) -> None:
        await self.platform.intake.stop_intake()
        await self.platform.intake.aclose()
        self.core.detach(self.platform)

    def ready(self) -> str | None:
        return self.platform.intake.ready()

    async def wait_lost(self) -> str:
        return await self.platform.intake.wait_lost()

    async def send_delivery(self, delivery: OutboundDelivery) -> int:
        return await self.platform.sender.send_delivery(delivery)


def telegram_adapter(
    server: FakeTelegramServer,
    core: CoreEntry,
    *,
    token: str | None = None,
    edge: EdgeSettings | None = None,
    **options: Any,
) -> AttachedPlatform:
    """Telegram's three parts on `server`, handing updates to `core` (not started)."""
    options = {"base_url": server.base_url, **TELEGRAM_TIMINGS, **options}
    token = server.token if token is None else token
    return AttachedPlatform(telegram_platform(core, edge or EdgeSettings(), token=token, **options), core)


def discord_adapter(
    server: FakeDiscordServer, link: CoreLink, *, token: str | None = None, **options: Any
) -> DiscordAdapter:
    """A DiscordAdapter on `server` (not started)."""
    options = {"api_base": server.api_base, "gateway_url": server.gateway_url, **DISCORD_TIMINGS, **options}
    return DiscordAdapter(server.token if token is None else token, link, **options)


# --- a core whose turn is a handler a test writes ---------------------------------------------------

Handler = Callable[[InboundMessage], Awaitable[Reply | None]]


class _HandlerCompanion:
    """What the core's entry asks of a Companion, around `handler`: everyone is allowed, each
    chat's events run in order in its lane, and None is an event answered with silence."""

    def __init__(self, handler: Handler, state: AdapterStateStore | None) -> None:
        self.store = state
        self._handler = handler
        self._lanes: Lanes[tuple[str, str]] = Lanes()

    def is_allowed(self, message: InboundMessage) -> bool:
        return True

    def refusal(self, message: InboundMessage) -> Reply | None:
        return None

    def submit(self, message: InboundMessage) -> asyncio.Future[Reply | Held | Silent]:
        return self._lanes.submit((message.platform, message.chat_id), lambda: self._turn(message))

    async def _turn(self, message: InboundMessage) -> Reply | Silent:
        reply = await self._handler(message)
        return Silent(Silence.NO_ANSWER) if reply is None else reply

    async def chat_moved(self, platform: str, old_chat_id: str, new_chat_id: str) -> None:
        self._lanes.follow((platform, old_chat_id), (platform, new_chat_id))

    async def finish_turns(self, grace: float) -> int:
        return await self._lanes.drain(grace)

    async def flush(self, grace: float) -> None:
        return None


def core_for(
    handler: Handler, *, state: AdapterStateStore | None = None, edge: EdgeSettings | None = None
) -> CoreEntry:
    """A real core's entry (its hand-off and typing indicator) whose turn is `handler` (no outbox:
    every answer is sent directly); `state` keeps the platforms' offsets."""
    edge = edge or EdgeSettings()
    typing = TypingService(edge)
    companion: Any = _HandlerCompanion(handler, state)
    return CoreEntry(companion, HandOff(None, typing), typing, edge=edge)
