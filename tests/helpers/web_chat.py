"""The web chat with the real core, store and outbox, as the gateway wires it (bot/bootstrap.py)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from adapters.storage.outbox import SqliteOutboxStore
from adapters.web.chat import Page, WebChat, WebEvent
from bot.bootstrap import build_companion, web_chat
from core.delivery.outbox import SHIPPED_PACING, Outbox
from core.delivery.streams import StreamPacing
from core.turn.companion import Companion
from core.turn.config import CompanionConfig

WEB = frozenset({"web"})


@dataclass
class WebSide:
    companion: Companion
    chat: WebChat

    @property
    def outbox(self) -> Outbox:
        assert self.companion.outbox is not None
        return self.companion.outbox

    async def settled(self) -> None:
        """Wait until what was handed to the outbox went out (published and marked)."""
        await self.companion.drain()


@contextlib.asynccontextmanager
async def web_side(store, provider, clock, **config) -> AsyncIterator[WebSide]:
    """A started companion serving the web chat (and any other `platforms` given), and its WebChat.
    `pacing`: how replies are shown while written (the shipped pacing unless given; None: off)."""
    platforms = config.pop("platforms", WEB)
    pacing: StreamPacing | None = config.pop("pacing", SHIPPED_PACING)
    outbox = Outbox(SqliteOutboxStore(store.database), clock, rand=lambda: 1.0, platforms=platforms, pacing=pacing)
    companion = build_companion(
        store, provider, CompanionConfig(platforms=platforms, **config), clock=clock, outbox=outbox
    )
    await companion.start()
    chat = web_chat(companion, stop_grace=5.0)
    await chat.start()
    try:
        yield WebSide(companion, chat)
    finally:
        await chat.aclose()
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
