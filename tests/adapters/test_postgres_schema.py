"""The PostgreSQL schema is SQLite's: the same tables and columns, every foreign key deleting alike, every CHECK and
trigger refusing alike, and no private row ever entering recall or moving where nudges go."""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiosqlite
import pytest

from adapters.storage.engine import Fetch, Statement
from adapters.storage.migrate import migrate as migrate_sqlite
from adapters.storage.postgres.engine import PostgresDatabase
from core.values.errors import StoreError

# Recall is FTS5 on SQLite (a virtual table and its shadow tables) and a tsvector table on PostgreSQL.
SQLITE_ONLY = "recall_fts"
POSTGRES_ONLY = {"recall_index"}
ON_DELETE = {"a": "NO ACTION", "r": "RESTRICT", "c": "CASCADE", "n": "SET NULL", "d": "SET DEFAULT"}


def sealed_shape(words: str) -> str:
    """A private row's text as PostgreSQL's CHECKs accept it (adapters/storage/sealing.py SEALED_PATTERN), the
    words still readable to the recall index's parser (hyphens split them), so a private row that reached the
    index would still be found by them."""
    return "s1." + words.replace(" ", "-").replace(",", "") + "-" + "A" * 38


# Two people's worth of rows every case starts from: conversation 1 with an ended interval (segment 1) holding
# private message 2, conversation 2 with an open interval (segment 2), a binding on each.
GROUND = [
    "INSERT INTO people (id, created_at) VALUES (1, 0)",
    "INSERT INTO conversations (id, platform, chat_id, kind, person_id, created_at)"
    " VALUES (1, 'telegram', '1', 'direct', 1, 0), (2, 'telegram', '2', 'direct', 1, 0)",
    "INSERT INTO segments (id, conversation_id, anchor_message_id, started_at, last_activity_at, ended_at)"
    " VALUES (1, 1, 0, 0, 0, 5)",
    "INSERT INTO segments (id, conversation_id, anchor_message_id, started_at, last_activity_at) VALUES (2, 2, 0, 0, 0)",
    "INSERT INTO messages (id, conversation_id, segment_id, mode, role, text, capture, created_at)"
    " VALUES (1, 1, NULL, 'normal', 'user', 'hello apple', 'pending', 1), (2, 1, 1, 'private', 'user',"
    f" '{sealed_shape('secret plum')}', 'skipped', 2)",
    "INSERT INTO bindings (id, conversation_id, platform, chat_id, created_at)"
    " VALUES (1, 1, 'discord', '9', 0), (2, 2, 'discord', '9', 0)",
]
DELIVERY = "INSERT INTO deliveries (id, conversation_id, message_id, segment_id, kind, platform, chat_id, nonce, text, next_attempt_at, created_at, binding_id, retracts, streamed_ids, status) VALUES "
FOLLOW = "a delivery must name the segment of the message it carries"
MIRROR = "a mirror is never written for a private conversation or message"
OPEN = "a delivery written while an interval is open must name that interval"

# (what is refused, the statements, the words of the refusal or None for a CHECK or a foreign key)
REFUSED = [
    (
        "a private message without its segment",
        [
            "INSERT INTO messages (id, conversation_id, segment_id, mode, role, text, capture, created_at) VALUES (100, 1, NULL, 'private', 'user', 'x', 'skipped', 0)"
        ],
        None,
    ),
    (
        "a private message pending capture",
        [
            "INSERT INTO messages (id, conversation_id, segment_id, mode, role, text, capture, created_at) VALUES (100, 1, 1, 'private', 'user', 'x', 'pending', 0)"
        ],
        None,
    ),
    (
        "a message of a segment that does not exist",
        [
            "INSERT INTO messages (id, conversation_id, segment_id, mode, role, text, capture, created_at) VALUES (100, 1, 99, 'private', 'user', 'x', 'skipped', 0)"
        ],
        None,
    ),
    (
        "a conversation of a third kind",
        ["INSERT INTO conversations (id, platform, chat_id, kind, created_at) VALUES (100, 'x', 'y', 'club', 0)"],
        None,
    ),
    (
        "a private summary without its segment",
        [
            "INSERT INTO summaries (id, conversation_id, segment_id, mode, text, watermark, updated_at) VALUES (100, 1, NULL, 'private', 'x', 0, 0)"
        ],
        None,
    ),
    (
        "a delivery of a private message outside its segment",
        [DELIVERY + "(100, 1, 2, NULL, 'reply', 'telegram', '1', 'n', 'x', 0, 0, NULL, 0, NULL, 'pending')"],
        FOLLOW,
    ),
    (
        "a streamed reply given a private message without its segment",
        [
            DELIVERY + "(100, 1, NULL, NULL, 'reply', 'telegram', '1', 'n', NULL, 0, 0, NULL, 0, NULL, 'streaming')",
            "UPDATE deliveries SET message_id = 2, status = 'pending', text = 'x' WHERE id = 100",
        ],
        FOLLOW,
    ),
    (
        "a mirror naming another conversation's binding",
        [DELIVERY + "(100, 1, 1, NULL, 'mirror', 'discord', '9', 'n', 'x', 0, 0, 2, 0, NULL, 'pending')"],
        MIRROR,
    ),
    (
        "a mirror without a binding",
        [DELIVERY + "(100, 1, 1, NULL, 'mirror', 'discord', '9', 'n', 'x', 0, 0, NULL, 0, NULL, 'pending')"],
        MIRROR,
    ),
    (
        "a reply written while an interval is open that does not name it",
        [DELIVERY + "(100, 2, NULL, NULL, 'reply', 'telegram', '2', 'n', 'x', 0, 0, NULL, 0, NULL, 'pending')"],
        OPEN,
    ),
    (
        "a reminder naming an interval",
        [DELIVERY + "(100, 1, NULL, 1, 'reminder', 'telegram', '1', 'n', 'x', 0, 0, NULL, 0, NULL, 'pending')"],
        None,
    ),
    (
        "a retraction naming its interval",
        [DELIVERY + "(100, 1, NULL, 1, 'reply', 'telegram', '1', 'n', 'x', 0, 0, NULL, 1, '5', 'pending')"],
        None,
    ),
    (
        "a streaming row carrying a message",
        [DELIVERY + "(100, 1, 1, NULL, 'reply', 'telegram', '1', 'n', NULL, 0, 0, NULL, 0, NULL, 'streaming')"],
        None,
    ),
    (
        "a decision to wait for private mode without its interval",
        [
            "INSERT INTO proactive_decisions (id, person_id, segment_id, kind, subject, outcome, reason, local_day, decided_at) VALUES (100, 1, NULL, 'checkin', 'checkin:1', 'skipped', 'private', '2026-12-02', 0)"
        ],
        None,
    ),
    (
        "a served tool's call inside an interval",
        [
            "INSERT INTO tool_operations (id, conversation_id, segment_id, tool, status, args_bytes, result_bytes, created_at, server) VALUES (100, 1, 1, 'read_note', 'ok', 1, 1, 0, 'notes')"
        ],
        None,
    ),
]


@pytest.fixture
async def sqlite_db(tmp_path: Path, sqlite_template: Path) -> AsyncIterator[aiosqlite.Connection]:
    shutil.copyfile(sqlite_template, tmp_path / "companion.db")  # migrated once per worker (tests/conftest.py)
    async with aiosqlite.connect(tmp_path / "companion.db", isolation_level=None) as db:
        await db.execute("PRAGMA foreign_keys = ON")
        await migrate_sqlite(db)
        yield db


@pytest.fixture
async def pg(emptied_postgres_url: str) -> AsyncIterator[PostgresDatabase]:
    database = PostgresDatabase(emptied_postgres_url, pool_size=1)
    await database.start()
    yield database
    await database.aclose()


async def sqlite_rows(db: aiosqlite.Connection, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    async with db.execute(sql, params) as cursor:
        return [tuple(row) for row in await cursor.fetchall()]


async def pg_rows(pg: PostgresDatabase, sql: str) -> list[tuple[Any, ...]]:
    (result,) = await pg.read(Statement(sql, fetch=Fetch.ALL))
    return [tuple(row.values()) for row in result.rows]


async def sqlite_columns(db: aiosqlite.Connection) -> dict[str, dict[str, bool]]:
    """table -> column -> NOT NULL (a primary key counts as NOT NULL, which SQLite's rowid alias does not say)."""
    tables = await sqlite_rows(db, "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
    found: dict[str, dict[str, bool]] = {}
    for (table,) in tables:
        if table.startswith(SQLITE_ONLY):
            continue
        info = await sqlite_rows(db, 'SELECT name, "notnull", pk FROM pragma_table_info(?)', (table,))
        found[table] = {name: bool(notnull or pk) for name, notnull, pk in info}
    return found


async def pg_columns(pg: PostgresDatabase) -> dict[str, dict[str, bool]]:
    rows = await pg_rows(
        pg,
        "SELECT table_name, column_name, is_nullable = 'NO' FROM information_schema.columns"
        " WHERE table_schema = 'public' AND table_name IN"
        " (SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE')",
    )
    found: dict[str, dict[str, bool]] = {}
    for table, column, notnull in rows:
        if table not in POSTGRES_ONLY:
            found.setdefault(table, {})[column] = notnull
    return found


async def test_postgres_has_the_same_tables_and_columns_as_sqlite(
    sqlite_db: aiosqlite.Connection, pg: PostgresDatabase
) -> None:
    sqlite, postgres = await sqlite_columns(sqlite_db), await pg_columns(pg)
    assert sorted(postgres) == sorted(sqlite)
    for table in sqlite:
        assert postgres[table] == sqlite[table], table


async def test_every_foreign_key_deletes_alike_on_both_engines(
    sqlite_db: aiosqlite.Connection, pg: PostgresDatabase
) -> None:
    sqlite = set()
    for table in await sqlite_columns(sqlite_db):
        for column, parent, on_delete in await sqlite_rows(
            sqlite_db, 'SELECT "from", "table", on_delete FROM pragma_foreign_key_list(?)', (table,)
        ):
            sqlite.add((table, column, parent, on_delete))
    rows = await pg_rows(
        pg,
        "SELECT CAST(CAST(c.conrelid AS regclass) AS text), a.attname, CAST(CAST(c.confrelid AS regclass) AS text),"
        " CAST(c.confdeltype AS text) FROM pg_constraint c"
        " JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey)"
        " WHERE c.contype = 'f' AND c.connamespace = CAST('public' AS regnamespace)",
    )
    postgres = {(table, column, parent, ON_DELETE[kind]) for table, column, parent, kind in rows}
    assert postgres == sqlite
    # Every interval's row goes with it on PostgreSQL too.
    assert {t for t, c, p, d in postgres if p == "segments"} == {
        t for t, c, p, d in postgres if p == "segments" and d == "CASCADE"
    }


@pytest.mark.parametrize(("what", "statements", "words"), REFUSED, ids=[case[0] for case in REFUSED])
async def test_each_check_and_trigger_refuses_alike_on_both_engines(
    sqlite_db: aiosqlite.Connection, pg: PostgresDatabase, what: str, statements: list[str], words: str | None
) -> None:
    for sql in GROUND:
        await sqlite_db.execute(sql)
    await pg.write(*(Statement(sql) for sql in GROUND))
    *before, last = statements
    for sql in before:
        await sqlite_db.execute(sql)
    await pg.write(*(Statement(sql) for sql in before))

    with pytest.raises(sqlite3.IntegrityError) as on_sqlite:
        await sqlite_db.execute(last)
    with pytest.raises(StoreError) as on_postgres:
        await pg.write(Statement(last))
    import psycopg

    assert isinstance(on_postgres.value.__cause__, psycopg.errors.IntegrityError), what
    if words is not None:
        assert str(on_sqlite.value) == words
        assert words in str(on_postgres.value)


async def test_no_private_message_or_pad_entry_ever_enters_the_postgres_recall_index(pg: PostgresDatabase) -> None:
    await pg.write(*(Statement(sql) for sql in GROUND))
    await pg.write(
        Statement(
            "INSERT INTO pad_entries (id, person_id, segment_id, mode, text, created_at)"
            f" VALUES (1, 1, NULL, 'normal', 'pad pear', 0), (2, 1, 1, 'private', '{sealed_shape('pad plum')}', 0)"
        ),
        Statement(
            "INSERT INTO messages (id, conversation_id, segment_id, mode, role, text, capture, created_at)"
            f" VALUES (3, 2, 2, 'private', 'user', '{sealed_shape('open plum')}', 'skipped', 3)"
        ),
        Statement(
            "INSERT INTO notes (id, person_id, day, text, created_at) VALUES (1, 1, '2026-12-02', 'note fig', 0)"
        ),
        # An edit keeps its mode: a private row's new text stays out too.
        Statement(f"UPDATE messages SET text = '{sealed_shape('secret plum, edited')}' WHERE id = 2"),
    )
    index = "SELECT source, ref, text FROM recall_index ORDER BY source, ref"
    assert await pg_rows(pg, index) == [
        ("message", 1, "hello apple"),
        ("note", 1, "note fig"),
        ("pad", 1, "pad pear"),
    ]
    found = "SELECT ref FROM recall_index WHERE tsv @@ to_tsquery('simple', 'plum')"
    assert await pg_rows(pg, found) == []

    await pg.write(Statement("UPDATE messages SET text = 'hello banana' WHERE id = 1"))
    assert await pg_rows(pg, "SELECT text FROM recall_index WHERE source = 'message'") == [("hello banana",)]
    await pg.write(Statement("DELETE FROM messages WHERE id = 1"), Statement("DELETE FROM pad_entries WHERE id = 1"))
    assert await pg_rows(pg, index) == [("note", 1, "note fig")]


async def test_a_private_message_never_moves_where_nudges_go_on_postgres(pg: PostgresDatabase) -> None:
    await pg.write(*(Statement(sql) for sql in GROUND))
    where = "SELECT person_id, conversation_id, last_wrote_at FROM proactive_people"
    assert await pg_rows(pg, where) == [(1, 1, 1.0)]  # the normal message of conversation 1
    await pg.write(
        Statement(
            "INSERT INTO messages (id, conversation_id, segment_id, mode, role, text, capture, created_at)"
            f" VALUES (3, 2, 2, 'private', 'user', '{sealed_shape('open plum')}', 'skipped', 9)"
        )
    )
    assert await pg_rows(pg, where) == [(1, 1, 1.0)]
    await pg.write(
        Statement(
            "INSERT INTO messages (id, conversation_id, segment_id, mode, role, text, capture, created_at)"
            " VALUES (4, 1, NULL, 'normal', 'user', 'back', 'pending', 10)"
        )
    )
    assert await pg_rows(pg, where) == [(1, 1, 10.0)]


def test_every_sqlite_migration_after_the_baseline_has_its_postgres_twin() -> None:
    from importlib import resources

    sqlite = {p.name for p in resources.files("migrations").iterdir() if p.name.endswith(".sql")}
    postgres = {p.name for p in resources.files("migrations.postgres").iterdir() if p.name.endswith(".sql")}
    # PostgreSQL starts where SQLite stood at 0014, in one file; from there each change is written twice.
    assert {name for name in sqlite if int(name[:4]) > 14} == postgres - {"0014_baseline.sql"}
    assert "0014_baseline.sql" in postgres and max(int(name[:4]) for name in sqlite) >= 14


# A row in every table that hangs off segment 1 (besides its private message 2 of GROUND); its words in the shape
# of sealed text (adapters/storage/sealing.py SEALED_PATTERN), which PostgreSQL's CHECKs ask of a private row.
WORDS = "s1." + "A" * 40
OF_SEGMENT_1 = [
    "INSERT INTO summaries (id, conversation_id, segment_id, mode, text, watermark, updated_at)"
    f" VALUES (1, 1, 1, 'private', '{WORDS}', 2, 3)",
    f"INSERT INTO pad_entries (id, person_id, segment_id, mode, text, created_at) VALUES (1, 1, 1, 'private', '{WORDS}', 3)",
    "INSERT INTO tool_operations (id, conversation_id, segment_id, tool, status, args_bytes, result_bytes, created_at)"
    " VALUES (1, 1, 1, 'search', 'ok', 1, 1, 3)",
    f"INSERT INTO crossings (id, segment_id, destination, requested_at, confirm_by) VALUES (1, 1, '{WORDS}', 3, 9)",
    DELIVERY + f"(1, 1, 2, 1, 'reply', 'telegram', '1', 'n', '{WORDS}', 0, 3, NULL, 0, NULL, 'pending')",
    "INSERT INTO proactive_decisions (id, person_id, segment_id, kind, subject, outcome, reason, local_day, decided_at)"
    " VALUES (1, 1, 1, 'checkin', 'checkin:1', 'skipped', 'private', '2026-12-02', 3)",
]


async def test_deleting_a_segment_removes_every_row_of_it_alike_on_both_engines(
    sqlite_db: aiosqlite.Connection, pg: PostgresDatabase
) -> None:
    for sql in GROUND + OF_SEGMENT_1:
        await sqlite_db.execute(sql)
    await pg.write(*(Statement(sql) for sql in GROUND + OF_SEGMENT_1))
    columns = await sqlite_columns(sqlite_db)
    of_segments = sorted(table for table, names in columns.items() if "segment_id" in names)
    for table in of_segments:  # every table naming a segment has a row of segment 1 to lose
        held = f"SELECT count(*) FROM {table} WHERE segment_id = 1"
        assert await sqlite_rows(sqlite_db, held) == await pg_rows(pg, held) == [(1,)], table

    await sqlite_db.execute("DELETE FROM segments WHERE id = 1")
    await pg.write(Statement("DELETE FROM segments WHERE id = 1"))

    for table in of_segments:
        left = f"SELECT count(*) FROM {table} WHERE segment_id = 1"
        assert await sqlite_rows(sqlite_db, left) == [(0,)], table
        assert await pg_rows(pg, left) == [(0,)], table
    for table in columns:  # and nothing else went: the same rows are left on both
        every = f"SELECT count(*) FROM {table}"
        if table != "schema_migrations":
            assert await sqlite_rows(sqlite_db, every) == await pg_rows(pg, every), table
    assert await pg_rows(pg, "SELECT id FROM messages") == [(1,)]  # the normal message stays
