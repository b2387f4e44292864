"""The SQLite store: PRAGMAs, migrations, cascades."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from types import SimpleNamespace

import aiosqlite
import pytest

from adapters.storage import migrate as migrate_module
from adapters.storage.migrate import Migration, known_migrations, migrate
from adapters.storage.stores import Stores, open_stores, sqlite_stores
from core.values.errors import MigrationError
from core.values.model import ConversationKey
from tests.helpers import engines


async def pragma(stores: Stores, name: str):
    return (await engines.first(stores, f"PRAGMA {name}"))[0]


async def test_every_connection_enforces_foreign_keys_wal_secure_delete_and_full_sync(stores):
    assert await pragma(stores, "foreign_keys") == 1
    assert await pragma(stores, "journal_mode") == "wal"
    assert await pragma(stores, "secure_delete") == 1
    assert await pragma(stores, "synchronous") == 2  # FULL
    assert await pragma(stores, "busy_timeout") > 0  # a read waits a moment; a write waits in _tx


async def test_the_store_asks_for_secure_delete_itself_whatever_the_sqlite_builds_default(tmp_path, monkeypatch):
    # Debian's SQLite overwrites deleted content by default, python.org's and others' do not: reading the
    # PRAGMA back cannot tell whether the store asked, so every statement of the writer is traced.
    statements: list[str] = []
    connect = aiosqlite.connect

    async def traced(*args, **kwargs):
        db = await connect(*args, **kwargs)
        await db.set_trace_callback(statements.append)
        return db

    monkeypatch.setattr(aiosqlite, "connect", traced)
    async with open_stores(tmp_path / "companion.db"):
        pass
    asked = {" ".join(s.split()).upper() for s in statements if s.upper().startswith("PRAGMA")}
    assert {"PRAGMA FOREIGN_KEYS = ON", "PRAGMA SECURE_DELETE = ON"} <= asked


async def test_database_folder_is_created(tmp_path):
    async with open_stores(tmp_path / "a" / "b" / "c.db") as stores:
        assert engines.sqlite_file(stores).exists()


async def test_fresh_database_gets_every_migration_recorded_with_time(tmp_path):
    async with open_stores(tmp_path / "companion.db") as stores:  # not the fixture's: a copy of a migrated one
        rows = await engines.rows(stores, "SELECT name, applied_at FROM schema_migrations ORDER BY name")
    assert [r[0] for r in rows] == [m.name for m in known_migrations()]
    assert all(r[1] > 0 for r in rows)


async def test_migrations_rerun_apply_nothing(tmp_path):
    path = tmp_path / "db"
    async with open_stores(path):
        pass
    async with aiosqlite.connect(path, isolation_level=None) as db:
        assert await migrate(db) == []


async def test_database_with_an_unknown_newer_migration_refuses_to_start(tmp_path):
    path = tmp_path / "db"
    async with open_stores(path):
        pass
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO schema_migrations VALUES ('9999_from_the_future', 0)")
    with pytest.raises(MigrationError, match=r"9999_from_the_future.*does not know"):
        await sqlite_stores(path).database.start()


async def test_a_failing_migration_is_rolled_back_whole(tmp_path):
    broken = Migration("0500_broken.sql", "CREATE TABLE half (x);\nINSERT INTO nowhere VALUES (1);\n")
    async with aiosqlite.connect(tmp_path / "db", isolation_level=None) as db:
        with pytest.raises(MigrationError, match="0500_broken"):
            await migrate(db, [broken])
        async with db.execute("SELECT count(*) FROM sqlite_master WHERE name = 'half'") as cur:
            assert (await cur.fetchone())[0] == 0
        async with db.execute("SELECT count(*) FROM schema_migrations") as cur:
            assert (await cur.fetchone())[0] == 0


class ListedInOrder:
    """A migrations folder whose listing comes in the order given, as a file system may list it."""

    def __init__(self, folder: Path, order: list[str]) -> None:
        self.folder, self.order = folder, order

    def iterdir(self) -> Iterator[Path]:
        return (self.folder / name for name in self.order)

    def __truediv__(self, name: str) -> Path:
        return self.folder / name


async def test_migrations_apply_in_numeric_order_however_the_folder_lists_them(tmp_path, monkeypatch):
    files = {
        "0010_fill.sql": "INSERT INTO a (x, b) VALUES (1, 'late');\n",
        "0002_add_b.sql": "ALTER TABLE a ADD COLUMN b TEXT;\n",
        "README.md": "not a migration\n",
        "0001_a.sql": "CREATE TABLE a (x INTEGER);\n",
        "3_unnumbered.sql": "DROP TABLE a;\n",  # not zero-padded: not a migration
    }
    folder = tmp_path / "migrations"
    folder.mkdir()
    for name, sql in files.items():
        (folder / name).write_text(sql)
    listing = ListedInOrder(folder, list(files))  # later numbers listed first
    monkeypatch.setattr(migrate_module, "resources", SimpleNamespace(files=lambda package: listing))

    async with aiosqlite.connect(tmp_path / "db", isolation_level=None) as db:
        # Each file needs the one before it: applied in listing order, the first would fail.
        assert await migrate(db) == ["0001_a.sql", "0002_add_b.sql", "0010_fill.sql"]
        async with db.execute("SELECT x, b FROM a") as cur:
            assert [tuple(r) for r in await cur.fetchall()] == [(1, "late")]


def test_every_shipped_sql_file_is_a_migration_with_a_number_of_its_own():
    shipped = sorted(p.name for p in resources.files("migrations").iterdir() if p.name.endswith(".sql"))
    # A file the name pattern misses would be skipped silently; two with one number have no order.
    assert [m.name for m in known_migrations()] == shipped
    numbers = [int(name[:4]) for name in shipped]
    assert numbers == list(range(1, len(shipped) + 1))


@pytest.mark.engines
async def test_every_child_table_cascades_from_its_owner(stores):
    for table in await engines.tables(stores):
        for column, _, on_delete in await engines.foreign_keys(stores, table):
            # account_id on messages only attributes authorship; it is SET NULL so that
            # an account's removal never silently deletes a shared group timeline.
            # proactive_people only points at where nudges go: a person's manners outlive one
            # conversation, and the target falls back to where they write next.
            # pad_entries.conversation_id only attributes a normal memory to where it was said.
            # chat_claims.holder names the process answering a conversation: the claim (and its fence) outlives
            # the process's row, so a take-over raises the fence instead of starting it again.
            if (table, column) in {
                ("chat_claims", "holder"),
                ("messages", "account_id"),
                ("pad_entries", "conversation_id"),
                ("proactive_people", "conversation_id"),
                ("proactive_people", "pinned_conversation_id"),
            }:
                assert on_delete == "SET NULL"
            else:
                assert on_delete == "CASCADE", f"{table}.{column} does not cascade"


@pytest.mark.engines
async def test_a_private_message_cannot_be_stored_as_pending_for_capture(stores):
    await stores.timeline.ensure_conversation(
        __import__("core.values.model").values.model.ConversationKey("terminal", "t"), "direct", None, 1.0
    )
    segment = await stores.modes.open_segment(1, 1.0, None)
    with engines.refused_by_the_database(stores):
        await engines.plant(
            stores,
            "INSERT INTO messages (conversation_id, segment_id, mode, role, text, capture, created_at)"
            " VALUES (1, ?, 'private', 'user', 'x', 'pending', 1.0)",
            (segment.id,),
        )


async def test_a_delivery_mark_skips_the_fsync_once_and_every_later_commit_is_full_again(stores):
    from core.values.model import DeliveryTarget

    conversation = await stores.timeline.ensure_conversation(ConversationKey("telegram", "1"), "group", None, 0.0)
    delivery_id = (
        await stores.timeline.record_reply(conversation.id, "hi", 0.0, target=DeliveryTarget("telegram", "1"))
    ).delivery_id
    await stores.outbox.mark_sent(delivery_id, 1, 1.0)
    assert await pragma(stores, "synchronous") == 2  # FULL
    assert [tuple(r) for r in await engines.rows(stores, "SELECT status FROM deliveries")] == [("sent",)]
