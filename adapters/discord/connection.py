"""Discord's gateway connection as the intake holds it: login, the gateway session and its READY, the
outages discord.py reconnects through, and the one line saying why a start failed or the connection
was lost. The sender and the streamer use its client (`DiscordConnection.client`) for their requests."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import aiohttp

# The library, not this package: imports are absolute (see adapters/discord/client.py).
import discord
import yarl
from discord.gateway import DiscordWebSocket
from discord.http import Route

from adapters.discord.client import CompanionClient
from core.values.errors import CompanionError

log = logging.getLogger(__name__)


class DiscordStartError(CompanionError):
    """Discord could not be used at start-up; the message is one line saying what to fix."""


class DiscordConnection:
    """The client and its gateway session (READY, outages, loss).

    Args:
        token: the bot token (COMPANION_DISCORD_TOKEN).
        api_base: REST base including the version (default https://discord.com/api/v10).
        gateway_url: websocket URL of the gateway. Unset: asked from `{api_base}/gateway/bot`
            when api_base is set, else Discord's.
        on_fatal: called with one line when Discord refuses the token or the intents while
            running (close code 4004 or 4014): starting again cannot help until they are fixed.
        outage_limit: seconds the gateway may stay down while discord.py reconnects before the
            connection counts as lost for good (`wait_lost`); None: it reconnects for ever.
        ready_timeout, guild_ready_timeout: how long READY, and the guilds after it, may take.
    """

    def __init__(
        self,
        token: str,
        *,
        api_base: str | None = None,
        gateway_url: str | None = None,
        on_fatal: Callable[[str], None] | None = None,
        outage_limit: float | None = None,
        ready_timeout: float = 60.0,
        guild_ready_timeout: float = 2.0,
    ) -> None:
        self._token = token
        self._api_base = api_base.rstrip("/") if api_base else None
        self._gateway_url = gateway_url
        self._ready_timeout = ready_timeout
        self._guild_ready_timeout = guild_ready_timeout
        self._on_fatal = on_fatal
        self._outage_limit = outage_limit
        self.client: CompanionClient | None = None
        # Set by the intake's stop: the connection ending from here on is no loss.
        self.closing = False
        # The DM channels this run has seen: discord.py keeps no DM channel without a message cache,
        # and a bot may delete nothing of the person's in one (the sender's `delete`).
        self.dm_channels: set[int] = set()
        self._connection: asyncio.Task | None = None
        self._outage: asyncio.TimerHandle | None = None
        self._lost: asyncio.Future[str] | None = None
        self._down = False  # between a disconnect and the next READY or RESUMED

    @property
    def api_base(self) -> str | None:
        return self._api_base

    @property
    def bot_user_id(self) -> int | None:
        user = self.client.user if self.client is not None else None
        return user.id if user is not None else None

    def open(self, on_message: Callable[[discord.Message, bool], None]) -> CompanionClient:
        """A new client handing messages and edits to `on_message` (not logged in yet)."""
        self.closing = False
        self._lost = asyncio.get_running_loop().create_future()
        self.client = CompanionClient(
            api_base=self._api_base,
            gateway_url=self._gateway_url,
            guild_ready_timeout=self._guild_ready_timeout,
            on_message=on_message,
            on_down=self._disconnected,
            on_up=self._reconnected,
        )
        return self.client

    async def close(self) -> None:
        """Disconnect and end the client; safe to call twice."""
        self.closing = True
        self._reconnected()  # no outage to time any more
        client, self.client = self.client, None
        if client is None:
            return
        await client.close()
        connection, self._connection = self._connection, None
        if connection is not None:
            done, _ = await asyncio.wait({connection}, timeout=5.0)
            if not done:
                connection.cancel()
                await asyncio.wait({connection})
            if not connection.cancelled():
                connection.exception()  # it ended as it ended; retrieving it keeps asyncio quiet

    async def log_in(self) -> None:
        """Log in (and ask the gateway's address of another REST base). Raises DiscordStartError."""
        client = self._opened()
        where = self._api_base or Route.BASE
        try:
            await client.login(self._token)
        except discord.LoginFailure as exc:
            raise DiscordStartError(
                "COMPANION_DISCORD_TOKEN was rejected by Discord (401 Unauthorized); "
                "copy the bot token again from the Developer Portal (Bot > Reset Token)"
            ) from exc
        except discord.HTTPException as exc:
            hint = " (it includes the version, like https://discord.com/api/v10)" if exc.status == 404 else ""
            raise DiscordStartError(
                f"the Discord API at {where} answered {exc.status} at login; "
                f"{self._check('COMPANION_DISCORD_API_BASE')}{hint}"
            ) from exc
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise DiscordStartError(
                f"cannot reach the Discord API at {where} ({type(exc).__name__}); "
                f"{self._check('COMPANION_DISCORD_API_BASE')}"
            ) from exc
        if self._gateway_url is None and self._api_base is not None:
            # Another REST base (a Discord-compatible server) names its own gateway.
            try:
                _, url, _ = await client.http.get_bot_gateway()
            except (TimeoutError, discord.GatewayNotFound, aiohttp.ClientError, OSError) as exc:
                raise DiscordStartError(
                    f"the Discord API at {where} named no gateway (GET /gateway/bot failed); "
                    "set COMPANION_DISCORD_GATEWAY_URL"
                ) from exc
            client.http.gateway_url = yarl.URL(url)

    async def connect(self) -> None:
        """Connect to the gateway; return once it is READY. Raises DiscordStartError."""
        client = self._opened()
        gateway = str(client.http.gateway_url or DiscordWebSocket.DEFAULT_GATEWAY)
        self._connection = asyncio.create_task(client.connect(reconnect=True), name="discord-gateway")
        ready = asyncio.create_task(client.wait_until_ready(), name="discord-ready")
        try:
            done, _ = await asyncio.wait(
                {self._connection, ready}, timeout=self._ready_timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            ready.cancel()
            await asyncio.gather(ready, return_exceptions=True)
        if ready in done and not ready.cancelled():
            self._connection.add_done_callback(self._connection_ended)
            return
        if self._connection not in done:
            raise DiscordStartError(
                f"the Discord gateway at {gateway} sent no READY within {self._ready_timeout:g} s; "
                f"{self._check('COMPANION_DISCORD_GATEWAY_URL')}"
            )
        exc = self._connection.exception()
        if isinstance(exc, discord.PrivilegedIntentsRequired):
            raise DiscordStartError(
                "Discord refused the Message Content intent for this bot (close code 4014); enable "
                "Bot > Privileged Gateway Intents > Message Content Intent in the Developer Portal"
            ) from exc
        if isinstance(exc, discord.ConnectionClosed) and exc.code == 4004:
            raise DiscordStartError(
                "COMPANION_DISCORD_TOKEN was rejected by the Discord gateway (close code 4004)"
            ) from exc
        check = self._check("COMPANION_DISCORD_GATEWAY_URL")
        unreachable = _network_cause(exc)
        if unreachable is not None:
            # discord.py does not retry a first connection that fails (it raises AttributeError
            # with the network error as its context), so this is where an unreachable gateway lands.
            raise DiscordStartError(
                f"cannot reach the Discord gateway at {gateway} ({type(unreachable).__name__}); {check}"
            ) from exc
        reason = f"close code {exc.code}" if isinstance(exc, discord.ConnectionClosed) else type(exc).__name__
        raise DiscordStartError(
            f"the Discord gateway at {gateway} ended the connection during start-up ({reason}); {check}"
        ) from exc

    def _check(self, variable: str) -> str:
        configured = self._api_base if variable.endswith("API_BASE") else self._gateway_url
        return f"check {variable}" if configured else "check the network connection"

    async def wait_lost(self) -> str:
        """Wait until the gateway connection is lost for good: discord.py's connection loop ended
        (a close code it does not reconnect after, or an error), or the gateway stayed down past
        `outage_limit` while it reconnected. Returns one line naming the platform and why.

        Raises:
            RuntimeError: the connection was never opened.
        """
        if self._lost is None:
            raise RuntimeError("discord: wait_lost() before start()")
        return await asyncio.shield(self._lost)

    def _connection_ended(self, task: asyncio.Task) -> None:
        self._reconnected()
        if self.closing or task.cancelled():
            return
        exc = task.exception()
        if isinstance(exc, discord.PrivilegedIntentsRequired):
            self._fatal(
                "Discord refused the Message Content intent while running (close code 4014); enable Bot > "
                "Privileged Gateway Intents > Message Content Intent in the Developer Portal and start again"
            )
        elif isinstance(exc, discord.ConnectionClosed) and exc.code == 4004:
            self._fatal(
                "COMPANION_DISCORD_TOKEN: the Discord gateway rejected the token while running "
                "(close code 4004; reset or revoked?); set a valid token and start again"
            )
        if isinstance(exc, discord.ConnectionClosed):
            reason = f" (close code {exc.code})"
        else:
            reason = f" ({type(exc).__name__})" if exc is not None else ""
        self._mark_lost(f"discord: the gateway connection ended{reason}")

    # Both lines are the caller's to report (the gateway prints one and exits): logged at INFO only.
    def _fatal(self, line: str) -> None:
        log.info("discord: %s", line)
        if self._on_fatal is not None:
            self._on_fatal(line)

    def _mark_lost(self, line: str) -> None:
        log.info("%s", line)
        if self._lost is not None and not self._lost.done():
            self._lost.set_result(line)

    def ready(self) -> str | None:
        """Ready while the gateway session is up (READY or RESUMED came after the last disconnect)
        and the intake takes messages."""
        if self.client is None or self.closing:
            return "not connected"
        if self._lost is not None and self._lost.done():
            return "gateway connection lost"
        if self._down:
            return "gateway disconnected; reconnecting"
        return None

    def _disconnected(self) -> None:
        """discord.py lost the gateway and is reconnecting: start timing the outage."""
        self._down = True
        if self.closing or not self._outage_limit or self._outage is not None:
            return
        self._outage = asyncio.get_running_loop().call_later(self._outage_limit, self._outage_passed)

    def _reconnected(self) -> None:
        """READY or RESUMED arrived (or the connection is closing): the outage, if any, is over."""
        self._down = False
        outage, self._outage = self._outage, None
        if outage is not None:
            outage.cancel()

    def _outage_passed(self) -> None:
        self._outage = None
        if not self.closing:
            self._mark_lost(
                f"discord: the gateway stayed disconnected for {self._outage_limit:g} s while discord.py "
                "reconnected (COMPANION_DISCORD_OUTAGE_SECONDS)"
            )

    def _opened(self) -> CompanionClient:
        if self.client is None:
            raise RuntimeError("discord: the connection is not open")
        return self.client


def _network_cause(exc: BaseException | None) -> BaseException | None:
    """The connection failure behind `exc`, if one is in its chain."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, (aiohttp.ClientError, OSError, asyncio.TimeoutError)):
            return exc
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None
