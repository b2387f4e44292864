"""Raw SQL and raw bytes of a test's database, past every query class: the one place tests reach
the engine itself (reading what the queries wrote, planting rows they refuse, searching the files
for a canary), so that running them on another engine changes this module only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from adapters.storage.database import Params
from adapters.storage.sqlite_engine import SqliteEngine
from adapters.storage.stores import Stores
from adapters.storage.timeline import TimelineQueries
from core.turn.companion import Companion


async def rows(stores: Stores, sql: str, params: Params = ()) -> list[Any]:
    """Every row `sql` reads (on the writer: it sees every commit at once)."""
    return await stores.database.all(sql, params)


async def first(stores: Stores, sql: str, params: Params = ()) -> Any:
    """The first row `sql` reads, or None."""
    return await stores.database.one(sql, params)


async def plant(stores: Stores, sql: str, params: Params = ()) -> None:
    """A write straight into the database, past every mutator and guard: tests plant rows with it
    to show what the queries themselves refuse."""
    async with stores.database.tx() as db:
        await db.execute(sql, params)


def sqlite_file(stores: Stores) -> Path:
    """The SQLite database's main file (its -wal and -shm beside it), for tests of the file itself."""
    return stores.database.path


def stored_bytes(stores: Stores) -> bytes:
    """Every byte the engine keeps of the database now: SQLite's file, its WAL and shared memory."""
    path = stores.database.path
    files = [path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")]
    return b"".join(f.read_bytes() for f in files if f.exists())


def stores_of(companion: Companion) -> Stores:
    """The stores a companion was built on, for a test that holds only the companion (the core keeps
    no whole store: its inbox slice is the timeline's query class, on the companion's database)."""
    timeline = companion.parts.inbox
    assert isinstance(timeline, TimelineQueries), type(timeline)
    engine = timeline._engine
    assert isinstance(engine, SqliteEngine), type(engine)
    return Stores.over(engine._db)
