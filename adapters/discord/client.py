"""discord.py's Client and HTTP client as the adapter uses them: no message cache, its own REST base and
gateway, and a 429 that ends a streamed reply's request at once (`raising_429`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Iterator
from contextvars import ContextVar
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

# Set while a request of a reply shown as it is written is made (`raising_429`): a 429 then ends
# the request at once with `Throttled`, instead of discord.py sleeping through `retry_after` and
# sending the request again (its own handling, kept for every other request). A stale edit sent
# again late would only hold up the outbox lane the reply's final edit waits in.
_RAISE_429: ContextVar[bool] = ContextVar("companion_discord_raise_429", default=False)
# When Discord's answer names no wait we can read: one second, the pace of a streamed reply.
_DEFAULT_RETRY_AFTER = 1.0


class Throttled(Exception):
    """Discord answered 429 to a request made inside `raising_429()`: wait `retry_after` seconds."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"rate limited for {retry_after:.2f} s")
        self.retry_after = retry_after


@contextlib.contextmanager
def raising_429() -> Iterator[None]:
    """Requests made in this block (this task) end with `Throttled` on a 429."""
    token = _RAISE_429.set(True)
    try:
        yield
    finally:
        _RAISE_429.reset(token)


async def _on_request_end(
    _session: aiohttp.ClientSession, _context: Any, params: aiohttp.TraceRequestEndParams
) -> None:
    # aiohttp awaits this inside the request, in the task that made it, before discord.py sees the
    # answer; what it raises ends the request (aiohttp closes the response).
    if params.response.status == 429 and _RAISE_429.get():
        raise Throttled(await _retry_after(params.response))


async def _retry_after(response: aiohttp.ClientResponse) -> float:
    """Discord's wait: the body's `retry_after` (seconds, a float), else its headers."""
    try:
        body = json.loads(await response.read())
        return max(float(body["retry_after"]), 0.0)
    except (ValueError, TypeError, KeyError, aiohttp.ClientError):
        pass
    for header in ("X-RateLimit-Reset-After", "Retry-After"):
        try:
            return max(float(response.headers[header]), 0.0)
        except (KeyError, ValueError):
            continue
    return _DEFAULT_RETRY_AFTER


def _throttle_trace() -> aiohttp.TraceConfig:
    trace = aiohttp.TraceConfig()
    trace.on_request_end.append(_on_request_end)
    return trace


class RoutedHTTPClient(HTTPClient):
    """discord.py's HTTP client, pointed at another REST base and gateway for this client only.

    discord.py keeps both addresses in class attributes (`Route.BASE`,
    `DiscordWebSocket.DEFAULT_GATEWAY`); rewriting them per request instead of
    setting them keeps the change inside this client and out of the process. Its session is traced:
    a request made inside `raising_429()` that Discord answers 429 raises `Throttled`.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, *, api_base: str | None, gateway_url: str | None) -> None:
        super().__init__(loop, http_trace=_throttle_trace())
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
