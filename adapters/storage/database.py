"""The companion's SQLite database: its connections, write transactions and one-statement reads.

The query classes (timeline, modes, memory, privacy, outbox) each receive this object and
reach SQLite only through it, so none depends on another's private methods.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiosqlite

from adapters.storage.inbox import TransitKeys
from adapters.storage.intervals import bind_segments
from adapters.storage.migrate import migrate
from adapters.storage.sealing import Sealer
from adapters.storage.sqlite_engine import SqliteEngine, on_thread
from core.values.errors import StoreError

log = logging.getLogger(__name__)

Params = tuple[Any, ...] | dict[str, Any]

# How long a write waits for another process's write lock in all, and SQLite's own wait per try.
BUSY_SECONDS = 5.0
BUSY_STEP = 0.05


class Database:
    """One aiosqlite writer connection, serialised by a lock so transactions never interleave,
    and a read-only connection for the reads of a turn.

    PRAGMAs, set on every connection:
    - foreign_keys=ON, read back and checked (SQLite ignores it silently inside a
      transaction, and every cascade of the privacy design depends on it);
    - journal_mode=WAL, so readers do not block the writer;
    - synchronous=FULL: each commit is fsynced, so a stored user message survives
      power loss as well as a crash; a chat turn commits a handful of times, and a
      few milliseconds of fsync are nothing beside a model call;
    - secure_delete=ON, so deleted private text is overwritten, not left in free pages;
    - a short busy_timeout: a write that meets another process's write lock (a backup,
      `companion chat`) waits for it in `tx`, with the lock released between tries, so
      reads (the valve's mode read above all) never queue behind that wait.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, busy_seconds: float = BUSY_SECONDS, sealer: Sealer | None = None
    ) -> None:
        self.path = Path(path)
        self.busy_seconds = busy_seconds
        self.lock = asyncio.Lock()
        self._writer: aiosqlite.Connection | None = None
        # In WAL mode the reader sees every committed write and never waits behind the writer's commits.
        self._reader: aiosqlite.Connection | None = None
        self._read_lock = asyncio.Lock()
        self.busy_step = BUSY_STEP
        # The engine of adapters/storage/engine.py over these connections: one trip a read or a write.
        # `sealer`: Plaintext unless given (the contract suites also run IntervalKeys over SQLite).
        self.engine = SqliteEngine(self, sealer)
        # No transit keys: the webhook inbox keeps bodies as they came here (adapters/storage/inbox.py).
        self.transit: TransitKeys | None = None

    @property
    def in_memory(self) -> bool:
        return str(self.path) == ":memory:"

    # --- lifecycle ----------------------------------------------------------

    async def start(self) -> None:
        """Open, configure and migrate; safe to call twice.

        Raises:
            StoreError: the database cannot be opened or used, in one line naming the setting.
            MigrationError: the schema cannot be brought to this code's version.
        """
        if self._writer is not None:
            return
        where = f"the database at {self.path} (COMPANION_DB_PATH)"
        try:
            if not self.in_memory:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            db = await aiosqlite.connect(self.path, isolation_level=None)
        except Exception as exc:  # sqlite3.Error or OSError, with the path in words
            raise StoreError(f"cannot open {where}: {_one_line(exc)}") from exc
        try:
            await _configure(db)
            await migrate(db)
            await on_thread(db, self.engine.register)
            if not self.in_memory:
                self._reader = await self._open_reader()
        except StoreError:
            await db.close()
            raise
        except (sqlite3.Error, OSError) as exc:  # not SQLite, read-only, a folder it cannot write in
            await db.close()
            raise StoreError(f"cannot use {where}: {_one_line(exc)}") from exc
        except BaseException:
            await db.close()
            raise
        self._writer = db
        self.engine.attach(db, self._reader)
        await bind_segments(self.engine)  # no-op on Plaintext

    async def _open_reader(self) -> aiosqlite.Connection:
        # Opened (and closed) on its aiosqlite thread, read from the event loop's (SqliteEngine.read).
        reader = await aiosqlite.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            reader.row_factory = aiosqlite.Row
            await reader.execute("PRAGMA query_only = ON")
            await reader.execute(f"PRAGMA busy_timeout = {int(BUSY_STEP * 1000)}")
            await reader.execute("PRAGMA cache_size = -512")  # KiB: the hot pages of a turn
        except BaseException:
            await reader.close()
            raise
        return reader

    async def aclose(self) -> None:
        """Close both connections; safe to call twice."""
        writer, self._writer = self._writer, None
        reader, self._reader = self._reader, None
        if reader is not None:
            await reader.close()
        if writer is not None:
            await writer.close()

    @property
    def reader(self) -> aiosqlite.Connection | None:
        """The read-only connection (None for an in-memory database: its reads go to the writer)."""
        return self._reader

    @property
    def read_lock(self) -> asyncio.Lock:
        return self._read_lock

    @property
    def connection(self) -> aiosqlite.Connection:
        """The writer connection (for transactions and tools that measure it, like bench/)."""
        if self._writer is None:
            raise StoreError("the store is not started")
        return self._writer

    # --- writes -------------------------------------------------------------

    @asynccontextmanager
    async def tx(self, *, durable: bool = True) -> AsyncIterator[aiosqlite.Connection]:
        """One write transaction. While another process holds the database's write lock, the
        lock is released between tries (up to `busy_seconds`), so reads go on.

        `durable=False` commits without an fsync (synchronous=NORMAL for this one commit): it
        survives a crash of the process, and a power loss only until the next durable commit
        or checkpoint. Only for marks whose loss repeats an action (a delivery marked sent).

        Raises:
            StoreError: another process kept the write lock for `busy_seconds`.
        """
        deadline = asyncio.get_running_loop().time() + self.busy_seconds
        while True:
            await self.lock.acquire()
            try:
                if not durable:  # the PRAGMA is not allowed inside a transaction; both in one trip to the thread
                    await self.connection.executescript("PRAGMA synchronous = NORMAL; BEGIN IMMEDIATE")
                else:
                    await self.connection.execute("BEGIN IMMEDIATE")
                break
            except BaseException as exc:
                await self._release(durable)
                busy = isinstance(exc, sqlite3.OperationalError) and ("locked" in str(exc) or "busy" in str(exc))
                if not busy:
                    raise
                if asyncio.get_running_loop().time() >= deadline:
                    raise StoreError("the database stayed locked by another process") from exc
                await asyncio.sleep(BUSY_STEP)
        try:
            db = self.connection
            try:
                yield db
            except BaseException:
                await db.execute("ROLLBACK")
                raise
            else:
                await db.execute("COMMIT")
                self.engine.counters.commits += 1
                self.engine.counters.fsynced_commits += durable
        finally:
            await self._release(durable)

    async def _release(self, durable: bool) -> None:
        """Give the lock back, with every commit after this one fsynced again."""
        try:
            if not durable:
                await self.connection.execute("PRAGMA synchronous = FULL")
        finally:
            self.lock.release()

    # --- one-statement reads ------------------------------------------------

    async def all(self, sql: str, params: Params = ()) -> list[aiosqlite.Row]:
        """One statement on the writer connection (it sees the writer's own commits at once)."""
        async with self.lock:  # one round trip to the connection's thread
            return list(await self.connection.execute_fetchall(sql, params))

    async def one(self, sql: str, params: Params = ()) -> aiosqlite.Row | None:
        rows = await self.all(sql, params)
        return rows[0] if rows else None

    async def read(self, sql: str, params: Params = ()) -> list[aiosqlite.Row]:
        """A read on the read-only connection: committed data, never queued behind a write."""
        if self._reader is None:
            return await self.all(sql, params)
        async with self._read_lock:
            return list(await self._reader.execute_fetchall(sql, params))

    async def read_one(self, sql: str, params: Params = ()) -> aiosqlite.Row | None:
        rows = await self.read(sql, params)
        return rows[0] if rows else None


async def _configure(db: aiosqlite.Connection) -> None:
    db.row_factory = aiosqlite.Row
    await db.execute("PRAGMA foreign_keys = ON")
    await db.execute("PRAGMA journal_mode = WAL")
    await db.execute("PRAGMA synchronous = FULL")
    await db.execute("PRAGMA secure_delete = ON")
    await db.execute(f"PRAGMA busy_timeout = {int(BUSY_STEP * 1000)}")
    async with db.execute("PRAGMA foreign_keys") as cur:
        row = await cur.fetchone()
    if not row or row[0] != 1:
        raise StoreError("SQLite refused PRAGMA foreign_keys=ON; the privacy cascades cannot work without it")


def _one_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]


def inserted_id(cur: aiosqlite.Cursor) -> int:
    """The id of the row an INSERT just wrote (SQLite sets it for every successful INSERT)."""
    if cur.lastrowid is None:
        raise StoreError("an INSERT reported no row id")
    return cur.lastrowid


def present(row: aiosqlite.Row | None) -> aiosqlite.Row:
    """The row of a query that always returns one (an aggregate, or a row this transaction
    has just written)."""
    if row is None:
        raise StoreError("a query that always returns a row returned none")
    return row
