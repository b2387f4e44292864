"""One builder per platform: its real parts pointed at its fake server, with the tests' quick timings.

Every chat platform is three parts on the core's entry: a companion (its entry is made here, for
Discord), `bot.bootstrap.core_entry(companion)` (Telegram), or `core_for(handler)`, a real entry
whose turn is a handler the test writes. Telegram runs as `AttachedPlatform` (without the core's
stop, so a test keeps its companion), Discord as the gateway runs it (`PlatformRun`). Any option
overrides the defaults (`token=` a wrong token, `gateway_url=None` to have it asked from the API base).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from adapters.discord import discord_platform
from adapters.telegram import telegram_platform
from bot.bootstrap import core_entry
from core.delivery.handoff import HandOff
from core.delivery.outbox import Outbox
from core.delivery.typing import TypingService
from core.ports.chat import AdapterStateStore, Platform
from core.turn.companion import Companion
from core.turn.config import CompanionConfig
from core.turn.entry import CoreEntry
from core.turn.lanes import Lanes
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
    server: FakeDiscordServer,
    core: Companion | CoreEntry,
    *,
    token: str | None = None,
    stop_grace: float = 10.0,
    retry_delays: tuple[float, ...] = DISCORD_TIMINGS["retry_delays"],
    **options: Any,
) -> PlatformRun:
    """Discord as a platform on `server` (not started), on `core` (a companion: its entry is made
    here). `stop_grace` and `retry_delays` (one try more than pauses) make its EdgeSettings."""
    options = {"api_base": server.api_base, "gateway_url": server.gateway_url, **DISCORD_TIMINGS, **options}
    options.pop("retry_delays")
    edge = EdgeSettings(
        stop_grace=stop_grace,
        send_attempts=len(retry_delays) + 1,
        send_backoff=min(retry_delays, default=0.0),
        send_max_delay=max(retry_delays, default=0.0),
    )
    entry = core_entry(core, edge=edge) if isinstance(core, Companion) else core
    platform = discord_platform(entry, edge, token=server.token if token is None else token, **options)
    return PlatformRun(platform, entry, grace=stop_grace)


class PlatformRun:
    """One platform as the gateway runs it (bot/gateway.py): its intake started, then its parts attached
    to the core's entry with no await between; `aclose` stops it in the gateway's order (intake, the
    core's stop within the grace, detach, the connection) and is safe to call twice."""

    def __init__(self, platform: Platform, entry: CoreEntry, *, grace: float = 10.0) -> None:
        self.platform = platform
        self.entry = entry
        self.grace = grace
        self.intake: Any = platform.intake
        self.sender: Any = platform.sender
        self.streamer: Any = platform.streamer
        self._attached = False

    async def start(self) -> None:
        await self.intake.start()
        self.entry.attach(self.platform)
        self._attached = True

    async def stop_intake(self) -> None:
        await self.intake.stop_intake()

    async def aclose(self) -> None:
        if self._attached:
            self._attached = False
            await self.intake.stop_intake()
            await self.entry.stop(self.grace)
            self.entry.detach(self.platform)
        await self.intake.aclose()

    async def wait_lost(self) -> str:
        return await self.intake.wait_lost()

    def ready(self) -> str | None:
        return self.intake.ready()

    @property
    def bot_user_id(self) -> int | None:
        return self.intake.bot_user_id

    @property
    def client(self) -> Any:
        """The platform's library client (Discord: the connection's discord.Client)."""
        return self.intake.connection.client

    async def send_delivery(self, delivery: Any) -> int:
        return await self.sender.send_delivery(delivery)


Handler = Callable[[InboundMessage], Awaitable[Reply | None]]


def core_for(
    handler: Handler,
    *,
    outbox: Outbox | None = None,
    state: AdapterStateStore | None = None,
    edge: EdgeSettings | None = None,
) -> CoreEntry:
    """The core's real entry (its hand-off, typing, fallback and stop), whose turn is `handler` (a
    test's; None from it: no answer), run in the core's own lanes; everyone is allowed."""
    edge = edge or EdgeSettings()
    typing = TypingService(edge)
    turns: Any = _HandlerTurns(handler, outbox)  # a Companion as far as the entry asks
    return CoreEntry(turns, HandOff(outbox, typing), typing, edge=edge, state=state)


class _HandlerTurns:
    """What the core's entry asks of a Companion, with `handler` as the turn."""

    def __init__(self, handler: Handler, outbox: Outbox | None) -> None:
        self.outbox = outbox
        self.config = CompanionConfig()
        self._handler = handler
        self._lanes: Lanes[tuple[str, str]] = Lanes()

    def is_allowed(self, message: InboundMessage) -> bool:
        return True

    def refusal(self, message: InboundMessage) -> Reply | None:
        return None

    def submit(self, message: InboundMessage):
        return self._lanes.submit((message.platform, message.chat_id), lambda: self._turn(message))

    async def _turn(self, message: InboundMessage) -> Reply | Held | Silent:
        reply = await self._handler(message)
        return Silent(Silence.NO_ANSWER) if reply is None else reply

    async def chat_moved(self, platform: str, old_chat_id: str, new_chat_id: str) -> None:
        self._lanes.follow((platform, old_chat_id), (platform, new_chat_id))

    async def finish_turns(self, grace: float) -> int:
        return await self._lanes.drain(grace)

    async def flush(self, grace: float) -> None:
        if self.outbox is not None:
            await self.outbox.flush(grace)
