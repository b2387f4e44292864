"""Fixtures of the store engines: `store_backend` over SQLite and PostgreSQL, and a PostgreSQL cluster per worker."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import pytest

from adapters.storage.engine import Database
from adapters.storage.sealing import Sealer
from tests.helpers.postgres import HOW_TO_GET_IT, REQUIRE_ENV, PostgresCluster, PostgresUnavailable, required

if TYPE_CHECKING:
    from tests.helpers.two_processes import TwoProcesses

ENGINES = ("sqlite", "postgres")
# A privacy test's third case: its companion one of two processes on one PostgreSQL database (tests/conftest.py
# `stores`, tests/helpers/two_processes.py).
SHARED = "postgres-shared"
TEMPLATE = "companion_tmpl"
# Set (to anything), the `engine` fixture's SQLite seals with IntervalKeys too, as PostgreSQL always does: the
# contract suites then check that every query class seals and opens alike on SQLite (needs `cryptography`).
SEALED_SQLITE_ENV = "COMPANION_TEST_SEALED_SQLITE"
EVERY_TABLE = "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'schema_migrations'"
EVERY_SEQUENCE = "SELECT sequencename FROM pg_sequences WHERE schemaname = 'public'"
# What a test may change in the schema and leave behind: relations, columns, constraints, triggers (and whether
# they are enabled), functions.
SCHEMA_FINGERPRINT = """SELECT md5(string_agg(part, ',' ORDER BY part)) FROM (
    SELECT 'r:' || relname || relkind::text FROM pg_class WHERE relnamespace = 'public'::regnamespace
    UNION ALL SELECT 'a:' || attrelid::regclass::text || '.' || attname || attnotnull::text || atttypid::text
        FROM pg_attribute WHERE attnum > 0 AND NOT attisdropped
        AND attrelid IN (SELECT oid FROM pg_class WHERE relnamespace = 'public'::regnamespace)
    UNION ALL SELECT 'k:' || conname || convalidated::text FROM pg_constraint WHERE connamespace = 'public'::regnamespace
    UNION ALL SELECT 't:' || tgname || tgenabled::text FROM pg_trigger
    UNION ALL SELECT 'f:' || proname FROM pg_proc WHERE pronamespace = 'public'::regnamespace
) AS schema (part)"""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """`store_backend` is every engine for a test marked `engines` (but not `sqlite_only`), SQLite alone
    elsewhere, unparametrized: the fast slice does not double and its test ids stay as they were. A test
    parametrizing `store_backend` itself is left as it is."""
    if "store_backend" not in metafunc.fixturenames or any(
        "store_backend" in str(mark.args[0]) for mark in metafunc.definition.iter_markers("parametrize")
    ):
        return
    if metafunc.definition.get_closest_marker("engines") and not metafunc.definition.get_closest_marker("sqlite_only"):
        # A privacy test also runs with two processes on one PostgreSQL database (tests/helpers/two_processes.py).
        shared = (SHARED,) if metafunc.definition.get_closest_marker("privacy") else ()
        metafunc.parametrize("store_backend", (*ENGINES, *shared), indirect=True)


# The two-process case's processes (tests/helpers/two_processes.py), for the test's model to call on.
TWO_PROCESSES: pytest.StashKey[TwoProcesses] = pytest.StashKey()
# Set on a test whose body failed: the two-process case's check after it is not run (it would only repeat it).
BODY_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    report: pytest.TestReport = yield
    if report.when == "call" and not report.passed:
        item.stash[BODY_FAILED] = True
    return report


@pytest.fixture
def store_backend(request: pytest.FixtureRequest) -> str:
    """The engine of the case; for PostgreSQL the worker's cluster is started first (or the case skips)."""
    backend = str(getattr(request, "param", ENGINES[0]))
    if backend in ("postgres", SHARED):
        request.getfixturevalue("postgres_cluster")
    return backend


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[PostgresCluster]:
    """One cluster per xdist worker, started at the first test that needs it, with a template database every
    test's database is copied from. When it cannot start, every PostgreSQL case skips saying how to get it
    (or fails, with COMPANION_TEST_REQUIRE_POSTGRES=1)."""
    cluster = PostgresCluster()
    try:
        need_psycopg()
        cluster.start()
        cluster.create_database(name=TEMPLATE)
        prepare_template(cluster)
    except PostgresUnavailable as exc:
        cluster.stop()
        did_not_start(exc)
    try:
        yield cluster
    finally:
        cluster.stop()


def did_not_start(exc: PostgresUnavailable) -> NoReturn:
    """The case skips, saying why PostgreSQL did not start and how to get it (or fails, with
    COMPANION_TEST_REQUIRE_POSTGRES=1)."""
    why = f"PostgreSQL did not start ({exc}); {HOW_TO_GET_IT}"
    if required():
        pytest.fail(f"{why}; {REQUIRE_ENV} is set", pytrace=False)
    pytest.skip(why)


@pytest.fixture
async def engine(store_backend: str, request: pytest.FixtureRequest, tmp_path) -> AsyncIterator[Database]:
    """adapters/storage/engine.py's Database of the case's engine, started (migrated) on a database of the test's
    own: SQLite's engine over a copy of the migrated SQLite template in `tmp_path`, or PostgreSQL's over the
    worker's database emptied (WorkerDatabase). A query
    class ported to the engine interface is built over it, so one test runs on both (mark it `engines`).
    PostgreSQL's seals every private word under a key in `tmp_path`/keys, as it ships."""
    assert store_backend != SHARED, "the two-process case is the `stores` fixture's (tests/helpers/two_processes.py)"
    if store_backend == "postgres":
        from adapters.storage.postgres.engine import PostgresDatabase

        database = PostgresDatabase(request.getfixturevalue("emptied_postgres_url"), key_dir=tmp_path / "keys")
        await database.start()
        try:
            yield database
        finally:
            await database.aclose()
        return
    from adapters.storage.database import Database as SqliteDatabase

    shutil.copyfile(request.getfixturevalue("sqlite_template"), tmp_path / "engine.db")  # tests/conftest.py
    sqlite = SqliteDatabase(
        tmp_path / "engine.db", sealer=interval_keys(tmp_path) if os.environ.get(SEALED_SQLITE_ENV) else None
    )
    await sqlite.start()
    try:
        yield sqlite.engine
    finally:
        await sqlite.aclose()


def interval_keys(tmp_path: Path) -> Sealer:
    """The sealer PostgreSQL ships with, over a key folder of the test's own (for SQLite too)."""
    from adapters.storage.keys import KeyDir
    from adapters.storage.sealing import IntervalKeys

    keys = KeyDir(tmp_path / "keys")
    keys.ensure()
    return IntervalKeys(keys)


@pytest.fixture
def postgres_url(postgres_cluster: PostgresCluster) -> Iterator[str]:
    """A database of its own for this test, copied from the migrated template, dropped after it."""
    with postgres_cluster.database(TEMPLATE) as url:
        yield url


class WorkerDatabase:
    """One database per worker, copied from the template, emptied before each test that takes it: every row
    deleted and every id sequence back at 1 is what a fresh copy of the migrated template holds, in a few
    milliseconds instead of a CREATE DATABASE and its DROP (~0.15 s together on an idle machine, ~0.6 s on a busy
    one: CREATE DATABASE checkpoints). A test that changed the schema (a trigger injecting a failure) gets the
    database copied afresh for the next one: the schema's fingerprint is compared each time. A test of
    connections, of migrating or of the server takes `postgres_url` or `empty_postgres_url` instead."""

    NAME = "companion_stores"

    def __init__(self, cluster: PostgresCluster) -> None:
        self._cluster = cluster
        cluster.create_database(TEMPLATE, name=self.NAME)
        self.url = cluster.url(self.NAME)
        tables = [r[0] for r in cluster.execute(EVERY_TABLE, self.NAME)]
        sequences = [r[0] for r in cluster.execute(EVERY_SEQUENCE, self.NAME)]
        held = cluster.execute("SELECT " + " + ".join(f"(SELECT count(*) FROM {table})" for table in tables), self.NAME)
        assert held == [(0,)], "a migration seeds rows: emptying would delete them; keep them out of the reset"
        emptying = "".join(f"DELETE FROM {table}; " for table in tables)
        restarting = ", ".join(f"setval('{sequence}', 1, false)" for sequence in sequences)
        # Triggers and foreign keys off while emptying (the replica role): every table goes, in any order.
        self._reset = (
            f"SET session_replication_role = replica; {emptying}"
            f"SET session_replication_role = DEFAULT; SELECT {restarting}"
        ).encode()  # bytes: psycopg's LiteralString check is for typed callers
        self._schema = cluster.execute(SCHEMA_FINGERPRINT, self.NAME)

    def emptied(self) -> str:
        """The database's URL, after emptying it (or copying it afresh, when a test changed its schema)."""
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            same = conn.execute(SCHEMA_FINGERPRINT.encode()).fetchall() == self._schema
            if same:
                conn.execute(self._reset)
        if not same:
            self._cluster.drop_database(self.NAME)
            self._cluster.create_database(TEMPLATE, name=self.NAME)
        return self.url


@pytest.fixture(scope="session")
def worker_database(postgres_cluster: PostgresCluster) -> WorkerDatabase:
    return WorkerDatabase(postgres_cluster)


@pytest.fixture
def emptied_postgres_url(worker_database: WorkerDatabase) -> str:
    """The worker's database, emptied for this test (WorkerDatabase)."""
    return worker_database.emptied()


@pytest.fixture
def empty_postgres_url(postgres_cluster: PostgresCluster) -> Iterator[str]:
    """A database of its own for this test with nothing in it (for the migrator's tests)."""
    with postgres_cluster.database() as url:
        yield url


def prepare_template(cluster: PostgresCluster) -> None:
    """The PostgreSQL migrations applied to the template once, by the engine's own start (in a thread of its
    own: a session fixture may be set up while a test's event loop runs)."""
    from adapters.storage.postgres.engine import PostgresDatabase

    async def migrate() -> None:
        database = PostgresDatabase(cluster.url(TEMPLATE))
        await database.start()
        await database.aclose()

    with concurrent.futures.ThreadPoolExecutor(1) as thread:
        thread.submit(asyncio.run, migrate()).result()


@pytest.fixture(scope="session")
def psycopg_driver() -> None:
    """For a PostgreSQL test that needs the driver but not the worker's cluster: skips without it (or fails,
    with COMPANION_TEST_REQUIRE_POSTGRES=1)."""
    try:
        need_psycopg()
    except PostgresUnavailable as exc:
        if required():
            pytest.fail(f"{exc}; {REQUIRE_ENV} is set", pytrace=False)
        pytest.skip(str(exc))


def need_psycopg() -> None:
    try:
        import psycopg  # noqa: F401
    except ImportError as exc:
        raise PostgresUnavailable("psycopg is not installed: pip install -e '.[postgres]'") from exc
