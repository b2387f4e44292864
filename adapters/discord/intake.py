"""The intake of the Discord platform (core.ports.BaseIntake): DMs and mentions from the gateway, slash
commands and button presses, and the DMs sent while it was down, handed to the core in their order.

Each event goes to `ChatCore.receive` from discord.py's callback, with no suspending await before it,
so the order of a channel's events is the order of its lane in the core; the intake keeps no queue
or lock of its own. A DM's outcome moves the channel's catch-up cursor (adapters/discord/catchup.py)
unless the stop cut its turn off (`acknowledged`): the next start then reads it again. While the DMs
sent during an outage are being read at start, live DMs wait, and are handed in after them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable
from typing import Any

import discord

from adapters.discord.catchup import CATCH_UP_LIMIT, DmCursors, catch_up
from adapters.discord.client import PLATFORM
from adapters.discord.connection import DiscordConnection
from adapters.discord.context import to_inbound
from adapters.discord.interactions import DiscordInteractions
from adapters.discord.routes import InteractionRoutes
from core.ports.chat import ChatCore
from core.values.edge import EdgeSettings, Outcome, acknowledged
from core.values.model import InboundMessage

log = logging.getLogger(__name__)


class DiscordIntake:
    """The companion on Discord: DMs, and mentions or replies in guild channels, slash commands and
    confirmation buttons.

    `start()` logs in, syncs the slash commands, connects to the gateway and returns once READY
    arrived (or raises adapters.discord.connection.DiscordStartError); the gateway connection then runs
    in a background task with discord.py's own reconnect loop. `aclose()` waits for its own work
    (the acknowledgements still coming) at most the stop grace, then disconnects.

    Args:
        core: where the events go (its `state` keeps the DM cursors).
        connection: the client and its gateway session, which the sender and streamer send on.
        routes: the interactions answers go to.
        edge: `stop_grace` bounds what `aclose` waits for.
        catch_up_limit: at most this many DMs per channel are caught up at a start.
    """

    name = PLATFORM

    def __init__(
        self,
        core: ChatCore,
        connection: DiscordConnection,
        routes: InteractionRoutes,
        edge: EdgeSettings,
        *,
        catch_up_limit: int = CATCH_UP_LIMIT,
    ) -> None:
        self.connection = connection
        self._core = core
        self._edge = edge
        self._catch_up_limit = catch_up_limit
        self._taking = False
        # The intake's own work: acknowledgements awaiting their outcomes, the catch-up, interactions.
        self._work: set[asyncio.Task[Any]] = set()
        self._cursors = DmCursors(core.state)
        # Live DMs that came while the DMs sent during the outage were read (None: none are read now).
        self._held: list[InboundMessage] | None = None
        # The newest DM handed to the core per channel this run: one delivered twice (a resume, the
        # catch-up and the gateway both) is handed in once, even before its outcome moved the cursor.
        self._handed: dict[int, int] = {}
        self._interactions = DiscordInteractions(core, routes, taking=lambda: self._taking, work=self._work)

    @property
    def bot_user_id(self) -> int | None:
        return self.connection.bot_user_id

    # --- lifecycle --------------------------------------------------------

    async def start(self) -> None:
        """Log in and connect; return once the gateway is READY. Raises DiscordStartError."""
        if self.connection.client is not None:
            return
        self._taking = True
        self._held = []  # until the DMs sent while down were handed in
        client = self.connection.open(self._on_message)
        self._interactions.install(client)
        try:
            await self.connection.log_in()
            await self._interactions.sync()
            await self.connection.connect()
        except BaseException:
            await self.aclose()
            raise
        log.info("discord: connected as bot %s", self.bot_user_id)
        self._own(asyncio.create_task(self._catch_up(), name="discord-dm-catch-up"))

    async def stop_intake(self) -> None:
        """The first step of a stop: no message or interaction is taken any more; the connection
        stays open for what the last turns send."""
        self._taking = False
        self.connection.closing = True

    async def aclose(self) -> None:
        """Stop taking events, wait for the intake's own work (at most the stop grace: by now the
        core's stop finished or cut off every turn), then disconnect; safe to call twice."""
        self._taking = False
        self.connection.closing = True
        if self._work:
            _, pending = await asyncio.wait(set(self._work), timeout=self._edge.stop_grace)
            for task in pending:
                task.cancel()
            if pending:
                log.warning("discord: %d acknowledgements still waiting at shutdown were cancelled", len(pending))
                await asyncio.gather(*pending, return_exceptions=True)
        await self.connection.close()

    async def wait_lost(self) -> str:
        """core.ports.BaseIntake: the gateway connection lost for good (adapters/discord/connection.py)."""
        return await self.connection.wait_lost()

    def ready(self) -> str | None:
        """core.ports.BaseIntake: ready while the gateway session is up and events are taken."""
        return self.connection.ready()

    # --- inbound ------------------------------------------------------------

    def _on_message(self, message: discord.Message, edited: bool) -> None:
        client = self.connection.client
        if not self._taking or client is None:
            return
        inbound = to_inbound(message, client)
        if inbound is None:
            return
        inbound = dataclasses.replace(inbound, edited=edited)
        if edited and message.edited_at is not None:  # an edit's mode is that of the moment it was made
            inbound = dataclasses.replace(inbound, sent_at=message.edited_at.timestamp())
        if inbound.is_direct:
            self.connection.dm_channels.add(message.channel.id)
            if self._held is not None:  # after the DMs sent while down
                self._held.append(inbound)
                return
        self._take(inbound)

    def _take(self, inbound: InboundMessage) -> None:
        """Hand one event to the core now; a DM's outcome moves its channel's cursor."""
        if not inbound.is_direct or inbound.edited:
            # An edit names a message handled already: the cursor says nothing about it.
            self._core.receive(inbound)
            return
        channel, message = int(inbound.chat_id), int(inbound.message_id or 0)
        if self._cursors.handled(channel, message) or message <= self._handed.get(channel, 0):
            return
        self._handed[channel] = message
        self._own(asyncio.create_task(self._acknowledge(channel, [(message, self._core.receive(inbound))])))

    async def _acknowledge(self, channel: int, outcomes: list[tuple[int, Awaitable[Outcome]]], upto: int = 0) -> None:
        """Move `channel`'s cursor over each DM as its outcome comes, in order (then to `upto`, what
        was read with them); not over one the stop cut off, nor past it."""
        for message, outcome in outcomes:
            if not acknowledged(await outcome):
                return
            await self._cursors.advance(channel, message)
        if upto:
            await self._cursors.advance(channel, upto)

    async def _catch_up(self) -> None:
        """DMs sent to the bot while the gateway was down, from each known DM channel's history;
        then the live DMs that came meanwhile."""
        try:
            client = self.connection.client
            if client is not None and client.user is not None:
                await self._cursors.load(client.user.id)
                await catch_up(
                    client,
                    self._cursors,
                    to_inbound=lambda message: to_inbound(message, client),
                    take=self._take_caught_up,
                    limit=self._catch_up_limit,
                )
        except Exception as exc:  # noqa: BLE001 - live messages go on without the catch-up
            log.warning("discord: catching up DMs sent while down failed (%s)", type(exc).__name__)
        finally:
            held, self._held = self._held or [], None
            if self._taking:
                for inbound in held:
                    self._take(inbound)

    def _take_caught_up(self, channel: int, kept: list[InboundMessage], newest: int) -> None:
        self.connection.dm_channels.add(channel)
        handed = []
        for inbound in kept:
            message = int(inbound.message_id or 0)
            if message > self._handed.get(channel, 0):
                self._handed[channel] = message
                handed.append((message, self._core.receive(inbound)))
        self._own(asyncio.create_task(self._acknowledge(channel, handed, upto=newest)))

    def _own(self, task: asyncio.Task[Any]) -> None:
        self._work.add(task)
        task.add_done_callback(self._work.discard)
