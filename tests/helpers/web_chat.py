"""The web chat with the real core, store and outbox, as the gateway wires it (bot/bootstrap.py)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from adapters.web.chat import Page, WebEvent, WebIntake, WebPlatform, WebSender, WebStreamer
from bot.bootstrap import build_companion, core_entry, web_chat
from core.delivery.outbox import SHIPPED_PACING, Outbox
from core.delivery.streams import StreamPacing
from core.turn.companion import Companion
from core.turn.config import CompanionConfig
from core.turn.entry import CoreEntry
from core.values.edge import EdgeSettings

WEB = frozenset({"web"})


@dataclass
class WebSide:
    companion: Companion
    entry: CoreEntry
    platform: WebPlatform

    @property
    def chat(self) -> WebIntake:
        """What the chat's pages call: send, open_page, history."""
        return self.platform.intake

    @property
    def sender(self) -> WebSender:
        return self.platform.sender

    @property
    def streamer(self) -> WebStreamer:
        return self.platform.streamer

    @property
    def outbox(self) -> Outbox:
        assert self.companion.outbox is not None
        return self.companion.outbox

    async def settled(self) -> None:
        """Wait until what was handed to the outbox went out (published and marked)."""
        await self.companion.drain()


@contextlib.asynccontextmanager
async def web_side(stores, provider, clock, **config) -> AsyncIterator[WebSide]:
    """A started companion serving the web chat (and any other `platforms` given), and the web chat
    attached to its entry as the gateway attaches it. `pacing`: how replies are shown while written
    (the shipped pacing unless given; None: off); `servers`: MCP servers whose tools are offered."""
    platforms = config.pop("platforms", WEB)
    pacing: StreamPacing | None = config.pop("pacing", SHIPPED_PACING)
    servers = config.pop("servers", None)  # MCP servers' tools (a core.ports.tools.ToolServers)
    outbox = Outbox(stores.outbox, clock, rand=lambda: 1.0, platforms=platforms, pacing=pacing)
    companion = build_companion(
        stores, provider, CompanionConfig(platforms=platforms, **config), clock=clock, outbox=outbox, servers=servers
    )
    await companion.start()
    edge = EdgeSettings(stop_grace=5.0)
    entry = core_entry(companion, edge=edge)
    platform = web_chat(companion, entry, edge)
    await platform.intake.start()
    entry.attach(platform)
    try:
        yield WebSide(companion, entry, platform)
    finally:
        entry.detach(platform)
        await platform.intake.aclose()
        await companion.drain()


async def next_event(page: Page, timeout: float = 10.0, *, partial: bool = False) -> WebEvent:
    """The page's next live event (the test fails after `timeout` seconds without one); a reply shown
    while written (a slow machine may let a quick answer stream) is skipped to its final event,
    unless `partial`."""
    async with asyncio.timeout(timeout):
        while True:
            event = await anext(page)
            if partial or event.kind != "partial":
                return event
