"""Fixtures of the store engines: `store_backend` over SQLite and PostgreSQL, and a PostgreSQL cluster per worker."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from adapters.storage.engine import Database
from adapters.storage.sealing import Sealer
from tests.helpers.postgres import HOW_TO_GET_IT, REQUIRE_ENV, PostgresCluster, PostgresUnavailable, required

ENGINES = ("sqlite", "postgres")
TEMPLATE = "companion_tmpl"
# Set (to anything), the `engine` fixture's SQLite seals with IntervalKeys too, as PostgreSQL always does: the
# contract suites then check that every query class seals and opens alike on SQLite (needs `cryptography`).
SEALED_SQLITE_ENV = "COMPANION_TEST_SEALED_SQLITE"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """`store_backend` is every engine for a test marked `engines`, SQLite alone elsewhere: the fast slice does
    not double. A test parametrizing `store_backend` itself is left as it is."""
    if "store_backend" not in metafunc.fixturenames or any(
        "store_backend" in str(mark.args[0]) for mark in metafunc.definition.iter_markers("parametrize")
    ):
        return
    engines = ENGINES if metafunc.definition.get_closest_marker("engines") else ENGINES[:1]
    metafunc.parametrize("store_backend", engines, indirect=True)


@pytest.fixture
def store_backend(request: pytest.FixtureRequest) -> str:
    """The engine of the case; for PostgreSQL the worker's cluster is started first (or the case skips)."""
    backend = str(getattr(request, "param", ENGINES[0]))
    if backend == "postgres":
        request.getfixturevalue("postgres_cluster")
    return backend


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[PostgresCluster]:
    """One cluster per xdist worker, started at the first test that needs it, with a template database every
    test's database is copied from. When it cannot start, every PostgreSQL case skips saying how to get it
    (or fails, with COMPANION_TEST_REQUIRE_POSTGRES=1)."""
    cluster = PostgresCluster()
    try:
        _need_psycopg()
        cluster.start()
        cluster.create_database(name=TEMPLATE)
        prepare_template(cluster)
    except PostgresUnavailable as exc:
        cluster.stop()
        why = f"PostgreSQL did not start ({exc}); {HOW_TO_GET_IT}"
        if required():
            pytest.fail(f"{why}; {REQUIRE_ENV} is set", pytrace=False)
        pytest.skip(why)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
async def engine(store_backend: str, request: pytest.FixtureRequest, tmp_path) -> AsyncIterator[Database]:
    """adapters/storage/engine.py's Database of the case's engine, started (migrated) on a database of the test's
    own: SQLite's engine over a file in `tmp_path`, or PostgreSQL's over a copy of the migrated template. A query
    class ported to the engine interface is built over it, so one test runs on both (mark it `engines`).
    PostgreSQL's seals every private word under a key in `tmp_path`/keys, as it ships."""
    if store_backend == "postgres":
        from adapters.storage.postgres.engine import PostgresDatabase

        database = PostgresDatabase(request.getfixturevalue("postgres_url"), key_dir=tmp_path / "keys")
        await database.start()
        try:
            yield database
        finally:
            await database.aclose()
        return
    from adapters.storage.database import Database as SqliteDatabase

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
        _need_psycopg()
    except PostgresUnavailable as exc:
        if required():
            pytest.fail(f"{exc}; {REQUIRE_ENV} is set", pytrace=False)
        pytest.skip(str(exc))


def _need_psycopg() -> None:
    try:
        import psycopg  # noqa: F401
    except ImportError as exc:
        raise PostgresUnavailable("psycopg is not installed: pip install -e '.[postgres]'") from exc
