"""The web chat with the real core, store and outbox, as the gateway wires it (bot/bootstrap.py)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from adapters.storage.outbox import SqliteOutboxStore
from adapters.web.chat import Page, WebChat, WebEvent
from bot.bootstrap import build_companion, web_chat
from core.delivery.outbox import Outbox
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
    """A started companion serving the web chat (and any other `platforms` given), and its WebChat."""
    platforms = config.pop("platforms", WEB)
    outbox = Outbox(SqliteOutboxStore(store.database), clock, rand=lambda: 1.0, platforms=platforms)
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


async def next_event(page: Page, timeout: float = 10.0) -> WebEvent:
    """The page's next live event (the test fails after `timeout` seconds without one)."""
    async with asyncio.timeout(timeout):
        return await anext(page)
