"""discord.py's Client and HTTP client as the adapter uses them: no message cache, its own REST base and gateway."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import aiohttp

# The library, not this package: imports are absolute and `adapters/` itself is never on sys.path.
# Only adapters/discord/ imports discord.py (the terminal chat never loads it).
import discord
import yarl
from discord.gateway import DiscordWebSocket
from discord.http import HTTPClient, Route

PLATFORM = "discord"
MESSAGE_LIMIT = 2000
NO_MENTIONS = discord.AllowedMentions.none()


class RoutedHTTPClient(HTTPClient):
    """discord.py's HTTP client, pointed at another REST base and gateway for this client only.

    discord.py keeps both addresses in class attributes (`Route.BASE`,
    `DiscordWebSocket.DEFAULT_GATEWAY`); rewriting them per request instead of
    setting them keeps the change inside this client and out of the process.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, *, api_base: str | None, gateway_url: str | None) -> None:
        super().__init__(loop)
        self.api_base = api_base
        self.gateway_url: yarl.URL | None = yarl.URL(gateway_url) if gateway_url else None

    async def request(self, route: Route, **kwargs: Any) -> Any:
        if self.api_base and route.url.startswith(Route.BASE):
            route.url = self.api_base + route.url[len(Route.BASE) :]
        return await super().request(route, **kwargs)

    async def ws_connect(self, url: str, *, compress: int = 0) -> aiohttp.ClientWebSocketResponse:
        target = yarl.URL(url)
        # The first connection and the one after an invalidated session go to the default
        # gateway; resuming goes to READY's resume_gateway_url, which the server chose.
        if self.gateway_url is not None and target.with_query(None) == DiscordWebSocket.DEFAULT_GATEWAY:
            url = str(self.gateway_url.with_query(target.query))
        return await super().ws_connect(url, compress=compress)


class CompanionClient(discord.Client):
    """A discord.Client that hands messages and connection events to the adapter's callbacks
    and keeps no message cache.

    Args:
        on_message: a message or an edit of one (`edited`), as discord.py delivered it.
        on_down: discord.py lost the gateway and is reconnecting.
        on_up: READY or RESUMED arrived.
    """

    def __init__(
        self,
        *,
        api_base: str | None,
        gateway_url: str | None,
        guild_ready_timeout: float,
        on_message: Callable[[discord.Message, bool], None],
        on_down: Callable[[], None],
        on_up: Callable[[], None],
    ) -> None:
        # No voice here: without these, every start logs two warnings about voice libraries.
        discord.VoiceClient.warn_nacl = False
        discord.VoiceClient.warn_dave = False
        intents = discord.Intents.none()
        intents.guilds = True  # the channel cache, and the guild role a mention may use
        intents.guild_messages = True
        intents.dm_messages = True
        intents.message_content = True  # privileged: enabled per bot in the Developer Portal
        super().__init__(
            intents=intents,
            allowed_mentions=NO_MENTIONS,
            max_messages=None,  # the cache would hold message text in memory; replies carry what we need
            chunk_guilds_at_startup=False,
            guild_ready_timeout=guild_ready_timeout,
        )
        self.http: RoutedHTTPClient = RoutedHTTPClient(self.loop, api_base=api_base, gateway_url=gateway_url)
        self._connection.http = self.http
        self._take_message = on_message
        self._went_down = on_down
        self._came_up = on_up

    async def on_message(self, message: discord.Message) -> None:
        self._take_message(message, False)

    async def on_raw_message_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
        # Raw: no message cache is kept. An update that leaves the words as they were (a link
        # preview added, a pin) changes nothing: the store's edit keeps only a changed text.
        self._take_message(payload.message, True)

    # discord.py's connection events: the adapter times how long the gateway stays down.
    async def on_disconnect(self) -> None:
        self._went_down()

    async def on_ready(self) -> None:
        self._came_up()

    async def on_resumed(self) -> None:
        self._came_up()
