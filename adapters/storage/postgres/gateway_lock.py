"""The Discord gateway of a shared database (issue 33): one connection per bot, so one `companion run` holds it.

The holder holds the advisory key (hashtext('companion'), 3) on a connection of its own; the others wait for it,
trying every RETRY_SECONDS. The key frees when the holder's connection ends (its process stopped, died, or the
connection dropped), so a waiting process takes the gateway within RETRY_SECONDS of that (docs/operations.md).
A holder whose connection drops loses the key: `lost` completes and its process stops (exit 1), so that two
gateway connections never run.
"""

from __future__ import annotations

import asyncio
import logging
import os

from adapters.storage.postgres.errors import PostgresUrl, parse_url
from adapters.storage.postgres.instance import (
    HOLDER,
    KEYS,
    Holding,
    closed_on_failure,
    holder_pid,
    lock_connection,
    watch_connection,
)
from adapters.storage.postgres.processes import DEAD_AFTER_SECONDS

log = logging.getLogger(__name__)

RETRY_SECONDS = 1.0
TRY = b"SELECT pg_try_advisory_lock(hashtext('companion'), %s)"


class GatewayLock:
    """`acquire` waits until this process holds the Discord gateway's key; `held` says whether it does now;
    `taken` counts the times it took it (for /metrics). `settle`: how long a new holder waits at most for the
    process whose gateway it took to stop holding Discord conversations (by then that process counts dead)."""

    settle = DEAD_AFTER_SECONDS

    def __init__(self, url: str, *, retry: float = RETRY_SECONDS) -> None:
        self.target: PostgresUrl = parse_url(url)
        self._retry = retry
        self._held: Holding | None = None
        self._lost = asyncio.Event()
        self.taken = 0

    @property
    def held(self) -> bool:
        return self._held is not None and not self._lost.is_set()

    async def acquire(self) -> None:
        """Wait until the key is this process's (safe to call twice).

        Raises:
            StoreError: PostgreSQL cannot be used, or the waiting connection dropped (one line).
        """
        if self._held is not None:
            return
        conn = await lock_connection(self.target, f"companion discord gateway pid {os.getpid()}")
        async with closed_on_failure(conn, self.target):
            waited = False
            while not (row := await (await conn.execute(TRY, (KEYS["discord"],))).fetchone()) or not row[0]:
                if not waited:
                    holder = await (await conn.execute(HOLDER.encode(), {"key": KEYS["discord"]})).fetchone()
                    log.info("the Discord gateway is held by another process%s: waiting for it", holder_pid(holder))
                    waited = True
                await asyncio.sleep(self._retry)
        self.taken += 1
        self._held = Holding(conn, watch_connection(conn), self._lost, "the Discord gateway's lock")
        log.info("holding the Discord gateway")

    async def lost(self) -> None:
        """Completes when the key's connection dropped while held: the process must stop (never after `aclose`)."""
        await self._lost.wait()

    async def aclose(self) -> None:
        """Release the key (closing its connection): a waiting process takes the gateway; safe to call twice."""
        held, self._held = self._held, None
        if held is not None:
            await held.release(b"SELECT pg_advisory_unlock(hashtext('companion'), %s)", (KEYS["discord"],))
