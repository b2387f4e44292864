"""Discord DMs sent while the gateway was down: a cursor per DM channel, and the catch-up at start.

Discord does not replay to a new gateway session what was sent before it, so DMs sent to the
bot while the gateway was down are read from each known DM channel's history at start
(`GET /channels/{id}/messages?after=<cursor>`, paging), oldest first, and handed to the core like
any message, before the live DMs that came meanwhile. The cursor of a DM channel is the id of the
newest message handled there; it is kept in the adapter state (ids only), only moves forward, and
moves only once the core acknowledged a message (core.values.edge.acknowledged: not a turn the stop
cut off, which the next start reads again), so a message is handled once even when the gateway
delivers it too (and the inbox key makes a second handling a no-op anyway).

A DM channel is known once a DM was handled in it after this feature existed; there is no other
safe starting point: the inbox cannot be one, since a private interval that expired took its
messages (and their ids) with it, and reading from before them would read them again in normal
mode.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections import deque
from collections.abc import Callable

import discord

from core.ports.chat import AdapterStateStore
from core.values.model import InboundMessage

log = logging.getLogger(__name__)

# At most this many DMs per channel are caught up at a start: the newest ones; older ones are skipped.
CATCH_UP_LIMIT = 100


class DmCursors:
    """The newest handled message id per DM channel, persisted as one adapter-state row."""

    def __init__(self, state: AdapterStateStore | None) -> None:
        self._state = state
        self._key = ""
        self._cursors: dict[int, int] = {}
        self._lock = asyncio.Lock()

    async def load(self, bot_id: int) -> None:
        # Keyed by bot: message ids of another bot's DMs say nothing about this one's.
        self._key = f"discord:dm-cursors:{bot_id}"
        if self._state is None:
            return
        raw = await self._state.get_adapter_state(self._key)
        try:
            loaded = json.loads(raw) if raw else {}
            self._cursors = {int(channel): int(message) for channel, message in loaded.items()}
        except (ValueError, TypeError, AttributeError):
            log.warning("discord: the stored DM cursors are unreadable; no DM is caught up this start")
            self._cursors = {}

    def channels(self) -> dict[int, int]:
        return dict(self._cursors)

    def handled(self, channel_id: int, message_id: int) -> bool:
        return message_id <= self._cursors.get(channel_id, 0)

    async def advance(self, channel_id: int, message_id: int) -> None:
        """Message `message_id` of DM channel `channel_id` was handled (or is never to be)."""
        if self.handled(channel_id, message_id):
            return
        async with self._lock:
            self._cursors[channel_id] = max(message_id, self._cursors.get(channel_id, 0))
            if self._state is None or not self._key:
                return
            try:
                await self._state.set_adapter_state(self._key, json.dumps(self._cursors), time.time())
            except Exception as exc:  # noqa: BLE001 - the inbox still keeps a message from being stored twice
                log.warning("discord: storing the DM cursors failed (%s)", type(exc).__name__)


# What the intake does with one channel's caught-up DMs: (channel id, the DMs oldest first, the newest
# message id read there); it hands them to the core and moves the cursor as their outcomes come.
Take = Callable[[int, list[InboundMessage], int], None]


async def catch_up(
    client: discord.Client,
    cursors: DmCursors,
    *,
    to_inbound: Callable[[discord.Message], InboundMessage | None],
    take: Take,
    limit: int = CATCH_UP_LIMIT,
) -> int:
    """Read the DMs each known DM channel received after its cursor and give them to `take`, oldest
    first, marked `caught_up` (the core answers no stranger late): never the bot's own, at most
    `limit` per channel (the newest; the older ones are skipped, and counted in the log). Returns
    how many were given."""
    taken = 0
    for channel_id, after in sorted(cursors.channels().items()):
        try:
            taken += await _catch_up_channel(client, channel_id, after, to_inbound, take, limit)
        except (discord.HTTPException, OSError, TimeoutError) as exc:
            log.warning("discord: catching up DM channel %s failed (%s)", channel_id, type(exc).__name__)
    return taken


async def _catch_up_channel(
    client: discord.Client,
    channel_id: int,
    after: int,
    to_inbound: Callable[[discord.Message], InboundMessage | None],
    take: Take,
    limit: int,
) -> int:
    channel = await client.fetch_channel(channel_id)
    if not isinstance(channel, discord.DMChannel):
        return 0
    kept: deque[InboundMessage] = deque(maxlen=limit)
    seen = answerable = newest = 0
    async for message in channel.history(limit=None, after=discord.Object(after), oldest_first=True):
        seen += 1
        newest = max(newest, message.id)
        inbound = to_inbound(message)  # None for the bot's own messages and system messages
        if inbound is None or not inbound.is_direct:
            continue
        answerable += 1
        kept.append(dataclasses.replace(inbound, caught_up=True))
    if newest:
        take(channel_id, list(kept), newest)  # what was skipped is never to be handled
    if seen:
        log.info(
            "discord: DM channel %s: %d messages since the last handled one, %d to answer, %d answered now,"
            " %d older ones skipped (at most %d per channel)",
            channel_id,
            seen,
            answerable,
            len(kept),
            answerable - len(kept),
            limit,
        )
    return len(kept)
