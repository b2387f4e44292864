"""The SQLite engine of adapters/storage/engine.py: a write is one call onto aiosqlite's thread, a read one on the loop's."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Protocol, TypeVar

import aiosqlite

from adapters.storage.engine import SQLITE, Counters, Fetch, Ref, Result, Statement
from adapters.storage.sealing import Plaintext, Sealer
from core.values.errors import IntervalEnded, PrivateWriteRefused, StoreError


class Connections(Protocol):
    """What the engine uses of adapters/storage/database.py's `Database` (which holds the engine)."""

    lock: asyncio.Lock
    busy_seconds: float
    busy_step: float

    @property
    def connection(self) -> aiosqlite.Connection: ...

    @property
    def reader(self) -> aiosqlite.Connection | None: ...

    @property
    def read_lock(self) -> asyncio.Lock: ...

    def tx(self, *, durable: bool = True) -> AbstractAsyncContextManager[aiosqlite.Connection]: ...

    async def aclose(self) -> None: ...


T = TypeVar("T")

# The kinds `companion_raise(kind, what)` knows, and what each becomes once the write is rolled back.
RAISES: dict[str, Callable[[str], Exception]] = {
    "private_write": PrivateWriteRefused,
    "interval_ended": IntervalEnded,
}


async def on_thread(conn: aiosqlite.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    """Run `fn(the sqlite3 connection)` on `conn`'s worker thread, queued after its other calls: one trip.

    aiosqlite has no public way to run a function on its thread; `Connection._execute` is the one
    it uses itself for every call. This module is the only one that touches it (here and in
    `count_trips`); tests/adapters/test_sqlite_engine.py fails if a release drops or changes it.
    """
    raw: sqlite3.Connection = conn._conn
    result: T = await conn._execute(fn, raw)
    return result


def count_trips(conn: aiosqlite.Connection, counters: Counters) -> None:
    """Count every call `conn` makes onto its thread (engine and one-statement helpers alike)."""
    execute = conn._execute

    async def counted(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        counters.trips += 1
        if getattr(fn, "__name__", "") in ("execute", "executemany", "execute_fetchall", "executescript"):
            counters.statements += 1
        return await execute(fn, *args, **kwargs)

    conn._execute = counted  # type: ignore[method-assign]


class Raised:
    """What `companion_raise` was asked to raise by the write running on the writer's thread (writes
    take turns behind the store's lock, so one holder serves them all)."""

    kind: str | None = None
    what: str = ""


def install_raise(raw: sqlite3.Connection, raised: Raised) -> None:
    """The SQL function `companion_raise(kind, what)`: aborts the statement; the engine turns it into
    the error `kind` names (RAISES), the same as PostgreSQL's function of that name."""

    def companion_raise(kind: str, what: str) -> None:
        raised.kind, raised.what = kind, what
        raise ValueError(kind)  # sqlite3 reports "user-defined function raised exception"

    raw.create_function("companion_raise", 2, companion_raise)


class SqliteEngine:
    """adapters.storage.engine.Database over the store's SQLite connections: the writer (behind its
    lock) and the read-only reader. `write` is BEGIN IMMEDIATE, the statements, COMMIT in one call on
    the writer's thread; `read` is every statement in one deferred transaction (one snapshot) in one
    call on the reader's."""

    dialect = SQLITE

    def __init__(self, database: Connections, sealer: Sealer | None = None) -> None:
        self._db = database
        # Plain text by default: SQLite keeps its own promise (secure_delete, the owed checkpoint, PRIVACY.md).
        self.sealer: Sealer = Plaintext() if sealer is None else sealer
        self.counters = Counters()
        self._raised = Raised()

    def attach(self, writer: aiosqlite.Connection, reader: aiosqlite.Connection | None) -> None:
        """Called by `Database.start` once both connections are open."""
        count_trips(writer, self.counters)
        if reader is not None:
            count_trips(reader, self.counters)

    def register(self, raw: sqlite3.Connection) -> None:
        install_raise(raw, self._raised)

    # --- Database -----------------------------------------------------------------------

    async def read(self, *statements: Statement) -> list[Result]:
        self.counters.statements += len(statements)
        reader = self._db.reader
        if reader is None:  # an in-memory database has only the writer
            async with self._db.lock:
                return await on_thread(self._db.connection, lambda raw: _read(raw, statements))
        # On the event loop's own thread: a read is a snapshot that never waits for the writer (WAL)
        # and takes a turn's reads a few hundred microseconds, about what a call onto the reader's
        # thread and back costs in wake-ups and GIL hand-overs alone (bench/roundtrip.py). The reader
        # is opened with check_same_thread off for this; only this engine uses it, always from here.
        self.counters.trips += 1
        raw: sqlite3.Connection = reader._conn
        return _read(raw, statements)

    async def write(self, *statements: Statement, durable: bool = True) -> list[Result]:
        self.counters.statements += len(statements)
        deadline = asyncio.get_running_loop().time() + self._db.busy_seconds
        while True:
            async with self._db.lock:
                self._raised.kind = None
                outcome = await on_thread(self._db.connection, lambda raw: _write(raw, statements, durable))
            if isinstance(outcome, list):
                self.counters.commits += 1
                self.counters.fsynced_commits += durable
                return outcome
            if isinstance(outcome, _Busy):
                if asyncio.get_running_loop().time() >= deadline:
                    raise StoreError("the database stayed locked by another process") from outcome.error
                await asyncio.sleep(self._db.busy_step)
                continue
            raise self._translated(outcome)

    @asynccontextmanager
    async def tx(self, *, durable: bool = True) -> AsyncIterator[_Tx]:
        async with self._db.tx(durable=durable) as conn:
            yield _Tx(self, conn)

    async def aclose(self) -> None:
        await self._db.aclose()

    def _translated(self, error: BaseException) -> BaseException:
        """A failed statement as the caller sees it: `companion_raise`'s kind as its error, the rest as it is."""
        kind, self._raised.kind = self._raised.kind, None
        if kind is not None and isinstance(error, sqlite3.OperationalError):
            return RAISES[kind](self._raised.what)
        return error


class _Tx:
    """adapters.storage.engine.Tx on the writer, inside `Database.tx`."""

    def __init__(self, engine: SqliteEngine, conn: aiosqlite.Connection) -> None:
        self._engine = engine
        self._conn = conn

    async def run(self, *statements: Statement) -> list[Result]:
        self._engine._raised.kind = None
        self._engine.counters.statements += len(statements)
        try:
            return await on_thread(self._conn, lambda raw: _run(raw, statements))
        except sqlite3.Error as exc:
            raise self._engine._translated(exc) from exc


class _Busy:
    """BEGIN IMMEDIATE met another process's write lock: the write is tried again after a pause."""

    def __init__(self, error: sqlite3.OperationalError) -> None:
        self.error = error


# --- on the connection's thread ---------------------------------------------------------------


def _write(raw: sqlite3.Connection, statements: Sequence[Statement], durable: bool) -> list[Result] | _Busy | Exception:
    """BEGIN IMMEDIATE, the statements, COMMIT (ROLLBACK on any failure); with `durable=False`, the
    commit is not fsynced (synchronous=NORMAL, set outside the transaction as SQLite requires, and
    FULL again after). Returns the error instead of raising it, so the caller translates it once."""
    if not durable:
        raw.execute("PRAGMA synchronous = NORMAL")
    try:
        try:
            raw.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                return _Busy(exc)
            return exc
        try:
            results = _run(raw, statements)
            raw.execute("COMMIT")
        except Exception as exc:  # noqa: BLE001 - handed back to the event loop's side whole
            raw.execute("ROLLBACK")
            return exc
        return results
    finally:
        if not durable:
            raw.execute("PRAGMA synchronous = FULL")


def _read(raw: sqlite3.Connection, statements: Sequence[Statement]) -> list[Result]:
    if len(statements) == 1:  # one statement is one snapshot already
        return _run(raw, statements)
    raw.execute("BEGIN")
    try:
        return _run(raw, statements)
    finally:
        raw.execute("COMMIT")


def _run(raw: sqlite3.Connection, statements: Sequence[Statement]) -> list[Result]:
    """The statements in order; a `Ref(i)` parameter is bound to the id statement i inserted (None when
    it inserted nothing)."""
    ids: list[int | None] = []
    results: list[Result] = []
    for statement in statements:
        params = {k: (ids[v.statement] if isinstance(v, Ref) else v) for k, v in statement.params.items()}
        cursor = raw.execute(statement.sql, params)
        fetched = cursor.fetchall() if statement.fetch in (Fetch.ONE, Fetch.ALL) or "RETURNING" in statement.sql else []
        names = [column[0] for column in cursor.description or ()]
        rows = [dict(zip(names, row, strict=True)) for row in fetched]  # a Mapping on every engine
        inserted = None
        if statement.inserts is not None and cursor.rowcount > 0:
            inserted = cursor.lastrowid
        ids.append(inserted)
        if statement.fetch is Fetch.ONE:
            rows = rows[:1]
        elif statement.fetch is not Fetch.ALL:
            rows = []
        results.append(Result(rows, cursor.rowcount))
        cursor.close()
    return results
