"""One companion per PostgreSQL database: a session advisory lock held on a connection of its own."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
from typing import TYPE_CHECKING, Any, Literal

from adapters.storage.postgres.errors import PostgresUrl, extra_missing, parse_url, translate
from core.values.errors import StoreError

if TYPE_CHECKING:
    from psycopg import AsyncConnection

log = logging.getLogger(__name__)

# (hashtext('companion'), key): `run` and `chat` side by side, as the two lock files allow on SQLite; the
# migrations take 0 for the length of their transaction.
KEYS = {"run": 1, "chat": 2}
# Who holds the lock of a key (read by `companion doctor` too, which takes none).
HOLDER = """
SELECT a.application_name, a.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.classid = CAST(hashtext('companion') AS oid) AND l.objid = CAST(%(key)s AS oid) AND l.objsubid = 2
LIMIT 1
"""


class AdvisoryInstanceLock:
    """`pg_try_advisory_lock(hashtext('companion'), 1)` for `companion run` (2 for `chat`) on a connection outside
    the pool, held until `aclose`. If that connection drops (PostgreSQL restarted, the backend terminated), the
    lock is gone with it and `lost` completes: the process must stop.

    `purpose` names the command taking the lock when it is not the role's own (`restore` takes both roles'
    locks, so that nothing serves from the database meanwhile), for the refusal's words."""

    def __init__(self, url: str, role: Literal["run", "chat"] = "run", *, purpose: str | None = None) -> None:
        self.target: PostgresUrl = parse_url(url)
        self.role = role
        self.purpose = purpose
        self._conn: AsyncConnection[Any] | None = None
        self._watch: asyncio.Task[None] | None = None
        self._lost = asyncio.Event()
        self._closing = False

    async def acquire(self) -> None:
        """Take the lock; safe to call twice.

        Raises:
            StoreError: another companion of this role holds it ("another companion run holds host/db (pid N)"),
                or PostgreSQL cannot be used (one line).
        """
        if self._conn is not None:
            return
        try:
            import psycopg
        except ImportError as exc:
            raise extra_missing() from exc
        name = f"companion {self.role} pid {os.getpid()}"
        try:
            conn = await psycopg.AsyncConnection.connect(self.target.url, autocommit=True, application_name=name)
        except psycopg.Error as exc:
            raise translate(exc, self.target) from exc
        try:
            key = KEYS[self.role]
            cursor = await conn.execute(b"SELECT pg_try_advisory_lock(hashtext('companion'), %s)", (key,))
            row = await cursor.fetchone()
            if not row or not row[0]:
                holder = await (await conn.execute(HOLDER.encode(), {"key": key})).fetchone()
                held = f"{self.target.where}/{self.target.database}{holder_pid(holder)}"
                if self.purpose is None:
                    raise StoreError(f"another companion {self.role} holds {held}")
                raise StoreError(f"companion {self.role} holds {held}; stop it before companion {self.purpose}")
        except psycopg.Error as exc:
            await conn.close()
            raise translate(exc, self.target) from exc
        except BaseException:
            await conn.close()
            raise
        self._conn = conn
        self._watch = asyncio.create_task(self._watch_connection(conn), name="advisory-lock-watch")

    async def _watch_connection(self, conn: AsyncConnection[Any]) -> None:
        """Wait on the lock's socket without polling: the notification stream ends when the connection does."""
        import psycopg

        try:
            async for _ in conn.notifies():
                pass
        except psycopg.Error:
            pass
        if not self._closing:
            log.error("the connection holding the instance lock of %s dropped", self.target.where)
        self._lost.set()

    async def lost(self) -> None:
        """Completes when the lock's connection dropped (never after `aclose`)."""
        await self._lost.wait()

    async def aclose(self) -> None:
        """Release the lock (closing its connection); safe to call twice."""
        self._closing = True
        watch, self._watch = self._watch, None
        conn, self._conn = self._conn, None
        if watch is not None:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
        if conn is not None:
            # Unlocked before the close: a closed connection's backend exits a moment later, and a start
            # meanwhile (a restart, `companion restore` after a stop) would find the lock still held.
            with contextlib.suppress(Exception):  # a dropped connection holds no lock any more
                await conn.execute(b"SELECT pg_advisory_unlock(hashtext('companion'), %s)", (KEYS[self.role],))
            await conn.close()


def holder_pid(holder: Any) -> str:
    """The words " (pid N)" for the holder in a row of HOLDER (its application name, else its backend)."""
    if holder is None:
        return ""
    found = re.search(r"pid (\d+)$", str(holder[0] or ""))
    return f" (pid {found.group(1)})" if found else f" (server process {holder[1]})"
