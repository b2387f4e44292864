"""Raw SQL and raw bytes of a test's database, past every query class: the one place tests reach
the engine itself (reading what the queries wrote, planting rows they refuse, searching the files
for a canary), so that a test runs on SQLite and on PostgreSQL alike.

Tests write SQLite's SQL with `?` parameters; on PostgreSQL the `?`s become the engine's `:name`
parameters and each row reads like sqlite3.Row (by index, by name, as a tuple)."""

from __future__ import annotations

import contextlib
import re
import sqlite3
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

from adapters.storage.database import Database as SqliteDatabase
from adapters.storage.database import Params
from adapters.storage.engine import Fetch, Statement
from adapters.storage.sqlite_engine import SqliteEngine
from adapters.storage.stores import Stores
from adapters.storage.timeline import TimelineQueries
from core.turn.companion import Companion
from core.values.errors import StoreError

# A `?` outside string literals, quoted names and comments.
_TOKENS = re.compile(r"""'(?:[^']|'')*'|"(?:[^"]|"")*"|--[^\n]*|(\?)""")
_GIVES_ROWS = re.compile(r"^\s*(SELECT|WITH|VALUES)\b|\bRETURNING\b", re.IGNORECASE)
# SQLite's words for a foreign key's ON DELETE, by pg_constraint.confdeltype.
ON_DELETE = {"a": "NO ACTION", "r": "RESTRICT", "c": "CASCADE", "n": "SET NULL", "d": "SET DEFAULT"}


def on_sqlite(stores: Stores) -> bool:
    return isinstance(stores.database, SqliteDatabase)


class PgRow(tuple):
    """A PostgreSQL row read like sqlite3.Row: `row[0]`, `row["name"]`, `tuple(row)`, `row.keys()`."""

    _names: tuple[str, ...]

    def __new__(cls, mapping: Mapping[str, Any]) -> PgRow:
        row = super().__new__(cls, tuple(mapping.values()))
        row._names = tuple(mapping)
        return row

    def __getitem__(self, key: Any) -> Any:  # type: ignore[override]
        if isinstance(key, str):
            return super().__getitem__(self._names.index(key))
        return super().__getitem__(key)

    def keys(self) -> list[str]:
        return list(self._names)


def statement(sql: str, params: Params = ()) -> Statement:
    """SQLite's `?` SQL as an engine Statement (`:p0`, `:p1`, ...), fetching rows when it gives any; SQL with
    `:name` parameters and a mapping of them is the engine's own already."""
    fetch = Fetch.ALL if _GIVES_ROWS.search(sql) else Fetch.NONE
    if isinstance(params, Mapping):
        return Statement(sql, dict(params), fetch)
    values = list(params)
    named: dict[str, object] = {}

    def name(match: re.Match[str]) -> str:
        if match.group(1) is None:
            return match.group(0)
        key = f"p{len(named)}"
        named[key] = values[len(named)]
        return f":{key}"

    rendered = _TOKENS.sub(name, sql)
    assert len(named) == len(values), f"{len(values)} values for {len(named)} parameters: {sql}"
    return Statement(rendered, named, fetch)


async def rows(stores: Stores, sql: str, params: Params = ()) -> list[Any]:
    """Every row `sql` reads (on the writer: it sees every commit at once; a write commits)."""
    if on_sqlite(stores):
        return await stores.database.all(sql, params)  # type: ignore[attr-defined]
    (result,) = await stores.database.engine.write(statement(sql, params))
    return [PgRow(row) for row in result.rows]


async def first(stores: Stores, sql: str, params: Params = ()) -> Any:
    """The first row `sql` reads, or None."""
    found = await rows(stores, sql, params)
    return found[0] if found else None


async def plant(stores: Stores, sql: str, params: Params = ()) -> None:
    """A write straight into the database, past every mutator and guard: tests plant rows with it
    to show what the queries themselves refuse."""
    if on_sqlite(stores):
        async with stores.database.tx() as db:  # type: ignore[attr-defined]
            await db.execute(sql, params)
        return
    await stores.database.engine.write(statement(sql, params))


@contextlib.contextmanager
def refused_by_the_database(stores: Stores) -> Iterator[list[str]]:
    """Expects the block's raw write to be refused by a CHECK, trigger or foreign key of the schema (SQLite's
    IntegrityError; PostgreSQL's, which the engine raises as a StoreError); yields [the refusal's message]."""
    said: list[str] = []
    caught: BaseException | None = None
    try:
        yield said
    except (sqlite3.IntegrityError, StoreError) as exc:
        caught = exc
    if caught is None:
        raise AssertionError("the schema let the write through")
    if on_sqlite(stores):
        assert isinstance(caught, sqlite3.IntegrityError), caught
    else:
        import psycopg

        assert isinstance(caught.__cause__, psycopg.errors.IntegrityError), caught
    said.append(str(caught))


@contextlib.asynccontextmanager
async def failing_inserts(stores: Stores, table: str, when: str) -> AsyncIterator[None]:
    """Inside the block every INSERT into `table` whose new row meets `when` (SQL over `new`) fails inside its
    transaction, as a fault between two statements of one write would; the trigger is gone after the block."""
    if on_sqlite(stores):
        # TEMP: on the writer connection only, never in the file.
        await rows(
            stores,
            f"CREATE TEMP TRIGGER failing_{table} BEFORE INSERT ON {table} WHEN {when} BEGIN SELECT RAISE(ABORT, 'injected'); END",
        )
        try:
            yield
        finally:
            await rows(stores, f"DROP TRIGGER failing_{table}")
        return
    # PostgreSQL has no temporary trigger: one on the table, dropped after the block (the worker's database is
    # emptied of rows between tests, not of triggers).
    await plant(
        stores,
        f"CREATE FUNCTION failing_{table}() RETURNS trigger LANGUAGE plpgsql AS $$"
        " BEGIN RAISE EXCEPTION 'injected' USING ERRCODE = 'check_violation'; END $$",
    )
    await plant(
        stores,
        f"CREATE TRIGGER failing_{table} BEFORE INSERT ON {table} FOR EACH ROW WHEN ({when.replace('new.', 'NEW.')})"
        f" EXECUTE FUNCTION failing_{table}()",
    )
    try:
        yield
    finally:
        await plant(stores, f"DROP FUNCTION failing_{table}() CASCADE")


async def tables(stores: Stores) -> list[str]:
    """The database's tables, its recall index among them (`recall_table`), not SQLite's internal ones nor FTS5's
    shadow tables."""
    if on_sqlite(stores):
        sql = (
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            " AND name NOT LIKE 'recall_fts_%'"
        )
    else:
        sql = "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
    return sorted(r[0] for r in await rows(stores, sql))


def recall_table(stores: Stores) -> str:
    """Recall's index: FTS5's virtual table on SQLite, a tsvector table on PostgreSQL (the same triggers fill both)."""
    return "recall_fts" if on_sqlite(stores) else "recall_index"


async def columns(stores: Stores, table: str) -> list[str]:
    """The columns of `table`, in order."""
    if on_sqlite(stores):
        return [r[0] for r in await rows(stores, "SELECT name FROM pragma_table_info(?)", (table,))]
    sql = (
        "SELECT column_name FROM information_schema.columns WHERE table_schema = 'public' AND table_name = ?"
        " ORDER BY ordinal_position"
    )
    return [r[0] for r in await rows(stores, sql, (table,))]


async def foreign_keys(stores: Stores, table: str) -> list[tuple[str, str, str]]:
    """(column, parent table, ON DELETE in SQLite's words) of every foreign key of `table`."""
    if on_sqlite(stores):
        sql = 'SELECT "from", "table", on_delete FROM pragma_foreign_key_list(?)'
        return [(r[0], r[1], r[2]) for r in await rows(stores, sql, (table,))]
    sql = (
        "SELECT a.attname, CAST(CAST(c.confrelid AS regclass) AS text), CAST(c.confdeltype AS text)"
        " FROM pg_constraint c JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey)"
        " WHERE c.contype = 'f' AND c.conrelid = CAST(CAST(? AS text) AS regclass)"
    )
    return [(r[0], r[1], ON_DELETE[r[2]]) for r in await rows(stores, sql, (table,))]


async def recall_hits(stores: Stores, words: str) -> int:
    """How many rows of the recall index (SQLite's FTS5 table, PostgreSQL's tsvector table) hold `words`."""
    if on_sqlite(stores):
        return (await first(stores, "SELECT count(*) FROM recall_fts WHERE recall_fts MATCH ?", (f'"{words}"',)))[0]
    sql = "SELECT count(*) FROM recall_index WHERE tsv @@ phraseto_tsquery('simple', ?)"
    return (await first(stores, sql, (words,)))[0]


async def recall_entries(stores: Stores, like: str) -> list[tuple[str, int]]:
    """(source, its row's id) of every entry of recall's index whose text is LIKE `like`."""
    if on_sqlite(stores):
        sql = "SELECT source, rowid / 4 FROM recall_fts WHERE text LIKE ?"  # rowid = id * 4 + the source's code
    else:
        sql = "SELECT source, ref FROM recall_index WHERE text LIKE ?"
    return [(r[0], r[1]) for r in await rows(stores, sql, (like,))]


async def plant_past_foreign_keys(stores: Stores, sql: str, params: Params = ()) -> None:
    """`plant` with foreign keys not enforced, as a copy restored without them or a bug would write: no cascade
    runs and no reference is checked (on PostgreSQL the replica role, which also holds back every trigger)."""
    if on_sqlite(stores):
        await rows(stores, "PRAGMA foreign_keys = OFF")
        try:
            await plant(stores, sql, params)
        finally:
            await rows(stores, "PRAGMA foreign_keys = ON")
        return
    await stores.database.engine.write(
        Statement("SET LOCAL session_replication_role = replica"), statement(sql, params)
    )


async def plant_in_recall(stores: Stores, source: str, ref: int, person_id: int, text: str) -> None:
    """A row written straight into recall's index, as a broken trigger would: for tests that the recall statement
    itself refuses a private row the index wrongly holds."""
    if on_sqlite(stores):
        code = {"message": 1, "note": 2, "pad": 3}[source]  # rowid = id * 4 + code (migrations/0003_memory.sql)
        sql = "INSERT INTO recall_fts (rowid, text, source, person_id) VALUES (?, ?, ?, ?)"
        await plant(stores, sql, (ref * 4 + code, text, source, person_id))
        return
    sql = "INSERT INTO recall_index (source, ref, person_id, text) VALUES (?, ?, ?, ?)"
    await plant(stores, sql, (source, ref, person_id, text))


def opened(stores: Stores, segment_id: int | None, field: str, stored: str | None) -> str | None:
    """The words a row holds as they were written: a private row's words are sealed under its interval's key on
    PostgreSQL once sealing is wired (adapters/storage/sealing.py, the engine's `sealer`); SQLite and a normal
    row keep them plain. For tests that look for a private row by its words."""
    sealer = getattr(stores.database.engine, "sealer", None)
    if sealer is None or segment_id is None or stored is None:
        return stored
    words: str | None = sealer.open(segment_id, field, stored)
    return words


def sealed(stores: Stores, segment_id: int | None, field: str, text: str | None) -> str | None:
    """`text` as a private row of interval `segment_id` stores it in column `field`: for a test planting such a row
    past the query classes (the counterpart of `opened`)."""
    sealer = getattr(stores.database.engine, "sealer", None)
    if sealer is None or segment_id is None or text is None:
        return text
    stored: str = sealer.seal(segment_id, field, text)
    return stored


async def ids_saying(stores: Stores, table: str, words: str, *, like: bool = False) -> list[int]:
    """The ids of the rows of `table` whose text is `words` (or, `like`, matches it as SQL's LIKE does on the
    engine: `%`, `_`, and SQLite's ASCII case-insensitivity), opened in Python: a sealed text is no SQL match."""
    if like:
        pattern = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in words)
        matches = re.compile(pattern, re.DOTALL | (re.IGNORECASE if on_sqlite(stores) else 0)).fullmatch
    found = await rows(stores, f"SELECT id, segment_id, text FROM {table} ORDER BY id")
    ids = []
    for row_id, segment_id, stored in found:
        text = opened(stores, segment_id, f"{table}.text", stored)
        if text is not None and (matches(text) if like else text == words):
            ids.append(row_id)
    return ids


async def rows_saying(
    stores: Stores, sql: str, words: str, *, like: bool = False, table: str = "messages", params: Params = ()
) -> list[tuple[Any, ...]]:
    """`sql`'s rows (as tuples), its `{saying}` standing for "the row's text is `words`" (ids_saying)."""
    ids = await ids_saying(stores, table, words, like=like)
    saying = f"id IN ({', '.join(str(i) for i in ids)})" if ids else "1 = 0"
    return [tuple(r) for r in await rows(stores, sql.format(saying=saying), params)]


def sqlite_file(stores: Stores) -> Path:
    """The SQLite database's main file (its -wal and -shm beside it), for tests of the file itself."""
    assert on_sqlite(stores), "a test of SQLite's file runs on SQLite only"
    return stores.database.path  # type: ignore[attr-defined]


def stored_bytes(stores: Stores) -> bytes:
    """Every byte the engine keeps of the database now: SQLite's file, its WAL and shared memory."""
    path = sqlite_file(stores)
    files = [path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")]
    return b"".join(f.read_bytes() for f in files if f.exists())


def stores_of(companion: Companion) -> Stores:
    """The stores a companion was built on, for a test that holds only the companion (the core keeps
    no whole store: its inbox slice is the timeline's query class, on the companion's database)."""
    timeline = companion.parts.inbox
    assert isinstance(timeline, TimelineQueries), type(timeline)
    engine = timeline._engine
    if isinstance(engine, SqliteEngine):
        return Stores.over(engine._db)
    from adapters.storage.postgres.engine import PostgresDatabase

    assert isinstance(engine, PostgresDatabase), type(engine)
    return Stores.over(engine)
