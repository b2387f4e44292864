"""Several `companion run` processes on one PostgreSQL database (COMPANION_SHARED_DATABASE): each holds the
instance lock shared and registers in `gateway_processes`; a process is alive while it holds its own advisory
key on its own connection AND its heartbeat is fresh.

The times (docs/operations.md): a process beats every BEAT_SECONDS and is dead DEAD_AFTER_SECONDS after its
last beat, or at once when its connection (and so its key) is gone. A process that cannot beat for
GIVE_UP_SECONDS stops (`lost`), before the others may count it dead: it never serves beside its own
successor.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from adapters.storage.postgres.errors import PostgresUrl, parse_url
from adapters.storage.postgres.instance import KEYS, Holding, closed_on_failure, lock_connection, taken_or_holder
from adapters.storage.postgres.migrate import migrate
from core.values.errors import StoreError

if TYPE_CHECKING:
    from psycopg import AsyncConnection

log = logging.getLogger(__name__)

BEAT_SECONDS = 2.0
DEAD_AFTER_SECONDS = 10.0
GIVE_UP_SECONDS = DEAD_AFTER_SECONDS / 2  # a beat this late: stop, well before the others count us dead
# The first half of each process's advisory key; the second is its id in gateway_processes.
PROCESS_CLASS = "companion process"
# The server's clock, so that hosts whose clocks differ agree on who is alive.
NOW = "extract(epoch FROM clock_timestamp())"

# The live processes `p`: the key held (by the connection of the process that registered) and the beat fresh, by
# the server's clock. A predicate the claims' SQL shares (adapters/storage/claims.py).
ALIVE = f"""p.heartbeat_at > {NOW} - {DEAD_AFTER_SECONDS} AND EXISTS (
  SELECT 1 FROM pg_locks l
  WHERE l.locktype = 'advisory' AND l.granted
    AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
    AND l.classid = CAST(hashtext('{PROCESS_CLASS}') AS oid) AND l.objid = CAST(p.id AS oid) AND l.objsubid = 2)"""
LIVE = f"SELECT p.id, p.host, p.pid, p.started_at, p.heartbeat_at FROM gateway_processes p WHERE {ALIVE} ORDER BY p.id"

SHARED_BESIDE_ALONE = (
    "a companion run without COMPANION_SHARED_DATABASE holds {held}; stop it, or set "
    "COMPANION_SHARED_DATABASE=true for every companion run of this database"
)


@dataclass(frozen=True, slots=True)
class LiveProcess:
    """A row of gateway_processes whose process is alive (times: the server's epoch seconds)."""

    id: int
    host: str
    pid: int
    started_at: float
    heartbeat_at: float


class SharedInstanceLock:
    """`companion run` beside others of its kind (bot/instance.py `DatabaseInstanceLock`'s shape).

    `acquire`, on a connection of its own outside the pools: the run key (hashtext('companion'), 1) taken
    shared, so that a `companion run` without COMPANION_SHARED_DATABASE (which takes it exclusive) and this
    exclude each other; the migrations applied; a row in gateway_processes (`process_id`) and its key
    (hashtext('companion process'), id) taken; then a beat every BEAT_SECONDS. `lost` completes when the
    connection dropped or a beat failed or came GIVE_UP_SECONDS late: the process must stop."""

    def __init__(self, url: str, *, beat: float = BEAT_SECONDS, give_up: float = GIVE_UP_SECONDS) -> None:
        self.target: PostgresUrl = parse_url(url)
        self.process_id: int | None = None
        self._beat = beat
        self._give_up = give_up
        self._held: Holding | None = None
        self._lost = asyncio.Event()

    async def acquire(self) -> None:
        """Take the shared run key, migrate, register; safe to call twice.

        Raises:
            StoreError: a `companion run` not in shared mode holds the database, or PostgreSQL cannot be used
                (one line).
            MigrationError: as the store's start would.
        """
        if self._held is not None:
            return
        conn = await lock_connection(self.target, f"companion run pid {os.getpid()}")
        async with closed_on_failure(conn, self.target):
            shared = b"SELECT pg_try_advisory_lock_shared(hashtext('companion'), %s)"
            if (held := await taken_or_holder(conn, self.target, shared, KEYS["run"])) is not None:
                raise StoreError(SHARED_BESIDE_ALONE.format(held=held))
            await migrate(conn, self.target)
            cursor = await conn.execute(
                f"INSERT INTO gateway_processes (host, pid, started_at, heartbeat_at) VALUES (%s, %s, {NOW}, {NOW})"
                " RETURNING id".encode(),
                (socket.gethostname(), os.getpid()),
            )
            row = await cursor.fetchone()
            if row is None:
                raise StoreError("PostgreSQL did not register this process in gateway_processes")
            process_id = int(row[0])
            await conn.execute(
                f"SELECT pg_advisory_lock(hashtext('{PROCESS_CLASS}'), CAST(%s AS integer))".encode(), (process_id,)
            )
        self.process_id = process_id
        what = f"process {process_id} of {self.target.where}"
        self._held = Holding(conn, self._beat_loop(conn, process_id), self._lost, what)
        log.info("registered as process %d of a shared database", process_id)

    async def _beat_loop(self, conn: AsyncConnection[Any], process_id: int) -> str:
        """Beat until the connection fails, a beat is late, or the row is gone (deleted as dead by hand);
        returns why it stopped."""
        try:
            while True:
                await asyncio.sleep(self._beat)
                async with asyncio.timeout(self._give_up):
                    cursor = await conn.execute(
                        f"UPDATE gateway_processes SET heartbeat_at = {NOW} WHERE id = %s".encode(), (process_id,)
                    )
                if cursor.rowcount != 1:
                    return "its row in gateway_processes is gone"
        except TimeoutError:
            return f"a heartbeat took over {self._give_up:g} s"
        except Exception as exc:  # noqa: BLE001 - any failure of the beat ends the registration
            return f"its connection dropped ({type(exc).__name__})"

    async def lost(self) -> None:
        """Completes when this process can no longer count as alive (never after `aclose`)."""
        await self._lost.wait()

    async def aclose(self) -> None:
        """Deregister and release both keys (closing the connection); safe to call twice."""
        held, self._held = self._held, None
        if held is not None:
            # Deleted before the close: its claims are free at once (their holder becomes NULL), and the keys
            # unlocked, not left to the backend's exit a moment later.
            await held.release(
                b"WITH gone AS (DELETE FROM gateway_processes WHERE id = %s) SELECT pg_advisory_unlock_all()",
                (self.process_id,),
            )


async def live_processes(conn: AsyncConnection[Any]) -> list[LiveProcess]:
    """The processes alive now (for `companion doctor`, and the tests)."""
    cursor = await conn.execute(LIVE.encode())
    return [LiveProcess(int(r[0]), str(r[1]), int(r[2]), float(r[3]), float(r[4])) for r in await cursor.fetchall()]
