"""One companion per PostgreSQL database: a session advisory lock held on a connection of its own."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
from collections.abc import AsyncIterator, Coroutine
from typing import TYPE_CHECKING, Any, Literal

from adapters.storage.postgres.errors import PostgresUrl, extra_missing, parse_url, translate
from core.values.errors import StoreError

if TYPE_CHECKING:
    from psycopg import AsyncConnection

log = logging.getLogger(__name__)

# (hashtext('companion'), key): `run` and `chat` side by side, as the two lock files allow on SQLite; the
# migrations take 0 for the length of their transaction.
KEYS = {"run": 1, "chat": 2, "discord": 3}  # 3: the Discord gateway of a shared database (gateway_lock.py)
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
        self._held: Holding | None = None
        self._lost = asyncio.Event()

    async def acquire(self) -> None:
        """Take the lock; safe to call twice.

        Raises:
            StoreError: another companion of this role holds it ("another companion run holds host/db (pid N)"),
                or PostgreSQL cannot be used (one line).
        """
        if self._held is not None:
            return
        conn = await lock_connection(self.target, f"companion {self.role} pid {os.getpid()}")
        async with closed_on_failure(conn, self.target):
            sql = b"SELECT pg_try_advisory_lock(hashtext('companion'), %s)"
            if (held := await taken_or_holder(conn, self.target, sql, KEYS[self.role])) is not None:
                if self.purpose is None:
                    raise StoreError(f"another companion {self.role} holds {held}")
                raise StoreError(f"companion {self.role} holds {held}; stop it before companion {self.purpose}")
        self._held = Holding(conn, watch_connection(conn), self._lost, f"the instance lock of {self.target.where}")

    async def lost(self) -> None:
        """Completes when the lock's connection dropped (never after `aclose`)."""
        await self._lost.wait()

    async def aclose(self) -> None:
        """Release the lock (closing its connection); safe to call twice."""
        held, self._held = self._held, None
        if held is not None:
            # Unlocked before the close: a closed connection's backend exits a moment later, and a start
            # meanwhile (a restart, `companion restore` after a stop) would find the lock still held.
            await held.release(b"SELECT pg_advisory_unlock(hashtext('companion'), %s)", (KEYS[self.role],))


class Holding:
    """A connection of its own holding advisory keys, watched by a task (`watch`, which returns why it ended):
    `lost` is set when the watch ends while held; `release` stops the watch, runs the unlock statement (a dropped
    connection holds nothing any more) and closes the connection."""

    def __init__(
        self, conn: AsyncConnection[Any], watch: Coroutine[Any, Any, str], lost: asyncio.Event, what: str
    ) -> None:
        self.conn = conn
        self._lost = lost
        self._what = what
        self._closing = False
        self._watch = watch
        self._task = asyncio.create_task(self._watched(watch), name="advisory-lock-watch")

    async def _watched(self, watch: Coroutine[Any, Any, str]) -> None:
        why = await watch
        if not self._closing:
            log.error("%s is lost: %s", self._what, why)
        self._lost.set()

    async def release(self, unlock: bytes, params: tuple[object, ...] = ()) -> None:
        self._closing = True
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._watch.close()  # cancelled before it began: never awaited, and closed so it says nothing
        with contextlib.suppress(Exception):  # a dropped connection holds nothing any more
            await self.conn.execute(unlock, params or None)
        await self.conn.close()


@contextlib.asynccontextmanager
async def closed_on_failure(conn: AsyncConnection[Any], target: PostgresUrl) -> AsyncIterator[None]:
    """A lock's connection closed when the block fails: a psycopg error becomes a StoreError of one line."""
    import psycopg  # importable: the connection was made with it

    try:
        yield
    except psycopg.Error as exc:
        await conn.close()
        raise translate(exc, target) from exc
    except BaseException:
        await conn.close()
        raise


async def watch_connection(conn: AsyncConnection[Any]) -> str:
    """Wait on a lock's socket without polling: the notification stream ends when the connection does."""
    import psycopg

    try:
        async for _ in conn.notifies():
            pass
    except psycopg.Error:
        pass
    return "its connection dropped"


def holder_pid(holder: Any) -> str:
    """The words " (pid N)" for the holder in a row of HOLDER (its application name, else its backend)."""
    if holder is None:
        return ""
    found = re.search(r"pid (\d+)$", str(holder[0] or ""))
    return f" (pid {found.group(1)})" if found else f" (server process {holder[1]})"


async def lock_connection(target: PostgresUrl, name: str) -> AsyncConnection[Any]:
    """A connection of its own (autocommit, named `name` for pg_stat_activity) to hold advisory keys on.

    Raises:
        StoreError: the driver is missing, or PostgreSQL cannot be used (one line, the password masked).
    """
    try:
        import psycopg
    except ImportError as exc:
        raise extra_missing() from exc
    try:
        return await psycopg.AsyncConnection.connect(target.url, autocommit=True, application_name=name)
    except psycopg.Error as exc:
        raise translate(exc, target) from exc


async def taken_or_holder(conn: AsyncConnection[Any], target: PostgresUrl, try_lock: bytes, key: int) -> str | None:
    """Run `try_lock` (a pg_try_advisory_lock* of (hashtext('companion'), `key`)): None when it took the key, else
    how a refusal names who holds it ("host/database (pid N)")."""
    row = await (await conn.execute(try_lock, (key,))).fetchone()
    if row and row[0]:
        return None
    holder = await (await conn.execute(HOLDER.encode(), {"key": key})).fetchone()
    return f"{target.where}/{target.database}{holder_pid(holder)}"


async def listen(target: PostgresUrl, channel: str, name: str) -> AsyncIterator[None]:
    """One item per notification on `channel` (LISTEN on a connection of its own, named `name`), until the
    connection fails (raises) or the consumer stops; the connection is closed either way."""
    conn = await lock_connection(target, name)
    try:
        await conn.execute(f"LISTEN {channel}".encode())
        async for _ in conn.notifies():
            yield None
    finally:
        await conn.close()
