"""The Discord platform: an intake, a sender and a streamer on one discord.py client; discord.py is
imported only here, and only when Discord is configured."""

from __future__ import annotations

from collections.abc import Callable

from adapters.discord.catchup import CATCH_UP_LIMIT
from adapters.discord.client import MESSAGE_LIMIT, PLATFORM
from adapters.discord.connection import DiscordConnection, DiscordStartError
from adapters.discord.intake import DiscordIntake
from adapters.discord.routes import InteractionRoutes
from adapters.discord.sender import TYPING_EVERY, DiscordSender
from adapters.discord.streaming import STREAM_REQUEST_SECONDS, DiscordStreamer
from core.ports.chat import ChatCore, Platform
from core.values.edge import EdgeSettings

__all__ = ["MESSAGE_LIMIT", "DiscordStartError", "discord_platform"]


def discord_platform(
    core: ChatCore,
    edge: EdgeSettings,
    *,
    token: str,
    api_base: str | None = None,
    gateway_url: str | None = None,
    on_fatal: Callable[[str], None] | None = None,
    outage_limit: float | None = None,
    ready_timeout: float = 60.0,
    guild_ready_timeout: float = 2.0,
    typing_every: float = TYPING_EVERY,
    catch_up_limit: int = CATCH_UP_LIMIT,
    stream_timeout: float = STREAM_REQUEST_SECONDS,
) -> Platform:
    """Discord as a platform of three parts sharing one connection (not started).

    Args:
        core: where the intake hands DMs, mentions, slash commands and presses.
        edge: what every platform shares: the sender's retries, the intake's stop grace.
        token: the bot token (COMPANION_DISCORD_TOKEN).
        api_base, gateway_url: another REST base and gateway (COMPANION_DISCORD_API_BASE,
            COMPANION_DISCORD_GATEWAY_URL); unset: Discord's (the gateway asked from the REST base
            when only it is set).
        on_fatal: told one line when Discord refuses the token or the intents while running.
        outage_limit: seconds the gateway may stay down while discord.py reconnects before the
            connection counts as lost (COMPANION_DISCORD_OUTAGE_SECONDS); None: no limit.
        ready_timeout, guild_ready_timeout: how long READY, and the guilds after it, may take.
        typing_every: seconds between two typing requests.
        catch_up_limit: at most this many DMs per channel are caught up at a start.
        stream_timeout: seconds one post or edit of a reply shown while written may take.
    """
    connection = DiscordConnection(
        token,
        api_base=api_base,
        gateway_url=gateway_url,
        on_fatal=on_fatal,
        outage_limit=outage_limit,
        ready_timeout=ready_timeout,
        guild_ready_timeout=guild_ready_timeout,
    )
    routes = InteractionRoutes(connection.api_base)
    return Platform(
        PLATFORM,
        DiscordIntake(core, connection, routes, edge, catch_up_limit=catch_up_limit),
        DiscordSender(connection, routes, edge, typing_every=typing_every),
        streamer=DiscordStreamer(lambda: connection.client, timeout=stream_timeout),
    )
