"""Starting on PostgreSQL: the migrator, one line for each way it fails (never the password), one instance a database."""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters.storage.postgres.engine import PostgresDatabase
from adapters.storage.postgres.errors import mask, parse_url, translate
from adapters.storage.postgres.instance import AdvisoryInstanceLock
from adapters.storage.postgres.migrate import Migration, known_migrations, migrate
from core.values.errors import MigrationError, StoreError
from tests.helpers.postgres import PostgresCluster, PostgresUnavailable, required

PASSWORD = "correct horse battery staple"
# Every migration an empty database gets: the baseline, then each twin of a later SQLite one.
ALL = [
    "0014_baseline.sql",
    "0015_interval_keys.sql",
    "0016_served_tool_events.sql",
    "0017_webhook_inbox.sql",
    "0018_shared_database.sql",
]


# --- the migrator -----------------------------------------------------------------------------


async def test_the_baseline_is_applied_once_and_recorded(empty_postgres_url: str) -> None:
    first = PostgresDatabase(empty_postgres_url)
    assert await first.start() == [m.name for m in known_migrations()] == ALL
    await first.aclose()
    again = PostgresDatabase(empty_postgres_url)
    assert await again.start() == []
    await again.aclose()


async def test_a_database_with_a_newer_migration_is_refused_in_one_line(
    postgres_cluster: PostgresCluster, postgres_url: str
) -> None:
    name = postgres_url.split("/")[3].split("?")[0]
    postgres_cluster.execute("INSERT INTO schema_migrations VALUES ('0099_from_the_future.sql', 0)", name)
    with pytest.raises(MigrationError) as info:
        await PostgresDatabase(postgres_url).start()
    assert str(info.value) == (
        "the database has migration 0099_from_the_future.sql which this version of companion does not know; "
        "it was written by a newer version: upgrade companion, or restore a backup made by this version"
    )


async def test_a_failing_migration_is_rolled_back_whole(empty_postgres_url: str) -> None:
    import psycopg

    target = parse_url(empty_postgres_url)
    broken = [Migration("0014_a.sql", "CREATE TABLE a (x integer);\nCREATE TABLE a (y integer);\n")]
    async with await psycopg.AsyncConnection.connect(empty_postgres_url, autocommit=True) as conn:
        with pytest.raises(
            MigrationError, match=r"^migration 0014_a\.sql failed and was rolled back: .*already exists"
        ):
            await migrate(conn, target, broken)
        cursor = await conn.execute("SELECT to_regclass('a'), to_regclass('schema_migrations')")
        assert await cursor.fetchone() == (None, None)


async def test_two_companions_starting_at_once_migrate_one_after_the_other(empty_postgres_url: str) -> None:
    import psycopg

    holder = await psycopg.AsyncConnection.connect(empty_postgres_url)
    try:
        # The test holds the migrations' lock in an open transaction, as another companion migrating would.
        await holder.execute("SELECT pg_advisory_xact_lock(hashtext('companion'), 0)")
        starting = asyncio.create_task(PostgresDatabase(empty_postgres_url).start())
        async with asyncio.timeout(30):
            while True:
                cursor = await holder.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                )
                if (await cursor.fetchone())[0]:
                    break
                assert not starting.done(), "the migrator ran without waiting for the lock"
                await asyncio.sleep(0.01)
        await holder.rollback()
        assert await starting == ALL
    finally:
        await holder.close()


# --- one line for each failure, never the password ------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "mysql://companion:hunter2@db.example.com/companion",
        "http://companion:hunter2@db.example.com/companion",
        "companion:hunter2@db.example.com",
        "postgresql://companion:hunter2@db.example.com:99999/companion",
    ],
)
def test_not_a_postgresql_url_is_one_line_naming_the_setting_without_the_password(url: str) -> None:
    with pytest.raises(StoreError) as info:
        parse_url(url)
    line = str(info.value)
    assert line.startswith("COMPANION_DATABASE_URL: ") and "not a PostgreSQL URL" in line
    assert "hunter2" not in line and "\n" not in line


def test_the_password_of_a_url_is_masked() -> None:
    assert mask("postgresql://me:s3cr%40t@db:5432/c") == "postgresql://me:***@db:5432/c"
    assert (
        mask("postgres://me@db/c?password=s3cret&sslmode=require") == "postgres://me@db/c?password=***&sslmode=require"
    )
    assert mask("postgresql://db/c") == "postgresql://db/c"


def test_a_driver_message_holding_the_url_or_its_password_loses_the_password() -> None:
    target = parse_url("postgresql://me:s3cret@db.example.com/c")
    said = RuntimeError("the URL postgresql://me:s3cret@db.example.com/c failed,  and s3cret again\nmore")
    line = str(translate(said, target))
    assert line == "PostgreSQL failed: the URL postgresql://me:***@db.example.com/c failed, and *** again"


async def test_an_unreachable_server_is_one_line(tmp_path: Path, psycopg_driver: None) -> None:
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(StoreError) as info:
        await PostgresDatabase(f"postgresql://companion:hunter2@127.0.0.1:{port}/companion").start()
    assert str(info.value) == (
        f"cannot reach PostgreSQL at 127.0.0.1:{port} (COMPANION_DATABASE_URL): connection refused"
    )
    with pytest.raises(StoreError, match=r"^cannot reach PostgreSQL at .* \(socket\) .*: no server on that socket$"):
        await PostgresDatabase(f"postgresql://companion@/companion?host={tmp_path}").start()


async def test_a_missing_database_is_one_line(postgres_cluster: PostgresCluster) -> None:
    with pytest.raises(StoreError) as info:
        await PostgresDatabase(postgres_cluster.url("nowhere")).start()
    assert str(info.value) == (
        f"database nowhere does not exist on {postgres_cluster.socket_dir} (socket) "
        "(createdb nowhere, or name another in COMPANION_DATABASE_URL)"
    )


async def test_a_user_who_may_not_create_tables_is_told_what_to_grant(
    postgres_cluster: PostgresCluster, empty_postgres_url: str
) -> None:
    postgres_cluster.execute("DO $$ BEGIN CREATE ROLE visitor LOGIN; EXCEPTION WHEN duplicate_object THEN END $$")
    database = empty_postgres_url.split("/")[3].split("?")[0]
    with pytest.raises(MigrationError) as info:
        await PostgresDatabase(postgres_cluster.url(database, user="visitor")).start()
    assert str(info.value) == (
        f"user visitor may not create tables in schema public of {database}: GRANT CREATE ON SCHEMA public TO visitor"
    )


async def test_a_server_too_old_is_one_line(monkeypatch: pytest.MonkeyPatch, postgres_url: str) -> None:
    import adapters.storage.postgres.engine as engine

    monkeypatch.setattr(engine, "OLDEST_SERVER", 990000)  # this machine's server is older than version 99
    with pytest.raises(StoreError, match=r"^PostgreSQL at .* is version 1\d; companion needs 99 or newer$"):
        await PostgresDatabase(postgres_url).start()


def test_the_driver_missing_is_one_line_saying_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(StoreError) as info:
        asyncio.run(PostgresDatabase("postgresql://companion:hunter2@db.example.com/companion").start())
    assert str(info.value).startswith("COMPANION_DATABASE_URL is set, but the PostgreSQL driver is not installed")
    assert "companion[postgres]" in str(info.value)


@pytest.fixture(scope="module")
def password_cluster(psycopg_driver: None) -> Iterator[PostgresCluster]:
    """A second cluster whose superuser logs in with a password (scram-sha-256), not by trust."""
    cluster = PostgresCluster(password=PASSWORD)
    try:
        cluster.start()
    except PostgresUnavailable as exc:
        if required():
            pytest.fail(f"PostgreSQL did not start ({exc})", pytrace=False)
        pytest.skip(f"PostgreSQL did not start ({exc})")
    yield cluster
    cluster.stop()


async def test_a_refused_password_is_one_line_without_it(password_cluster: PostgresCluster) -> None:
    url = password_cluster.url("postgres", password="hunter2")
    with pytest.raises(StoreError) as info:
        await PostgresDatabase(url).start()
    assert str(info.value) == (
        f"PostgreSQL at {password_cluster.socket_dir} (socket) refused the password for user companion "
        "(COMPANION_DATABASE_URL)"
    )
    right = PostgresDatabase(password_cluster.url("postgres", password=PASSWORD))
    assert await right.start() == ALL
    await right.aclose()


# --- one companion a database ----------------------------------------------------------------


async def test_a_second_companion_run_on_one_database_is_refused(postgres_url: str) -> None:
    first = AdvisoryInstanceLock(postgres_url, "run")
    await first.acquire()
    try:
        with pytest.raises(StoreError, match=r"^another companion run holds .*/t_\d+ \(pid \d+\)$"):
            await AdvisoryInstanceLock(postgres_url, "run").acquire()
        chat = AdvisoryInstanceLock(postgres_url, "chat")  # `companion chat` beside `run`, as on SQLite
        await chat.acquire()
        await chat.aclose()
    finally:
        await first.aclose()
    after = AdvisoryInstanceLock(postgres_url, "run")
    await after.acquire()
    await after.aclose()


async def test_losing_the_instance_lock_is_noticed(postgres_cluster: PostgresCluster, postgres_url: str) -> None:
    lock = AdvisoryInstanceLock(postgres_url, "run")
    await lock.acquire()
    try:
        postgres_cluster.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE 'companion run pid %'"
        )
        async with asyncio.timeout(30):
            await lock.lost()
    finally:
        await lock.aclose()
