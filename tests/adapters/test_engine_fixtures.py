"""The fixtures that run a test on both engines: a PostgreSQL case starts from what a fresh copy of the migrated
template holds, and a test kept on SQLite in a module marked `engines` runs there alone."""

from __future__ import annotations

import pytest

from adapters.storage.postgres.engine import PostgresDatabase
from adapters.storage.stores import Stores
from tests.helpers import engines
from tests.helpers.engine_fixtures import WorkerDatabase

pytestmark = pytest.mark.engines


async def test_the_workers_database_is_emptied_to_what_a_fresh_copy_holds(worker_database: WorkerDatabase) -> None:
    """Every row of the test before is gone, ids count from 1 again, and the schema (triggers too) is untouched."""
    stores = Stores.over(PostgresDatabase(worker_database.emptied()))
    await stores.database.start()
    try:
        await engines.plant(stores, "INSERT INTO people (display_name, created_at) VALUES ('left over', 1)")
        await engines.plant(
            stores,
            "INSERT INTO conversations (person_id, platform, chat_id, kind, created_at)"
            " VALUES (1, 'telegram', '1', 'direct', 1)",
        )
        await engines.plant(
            stores,
            "INSERT INTO messages (conversation_id, mode, role, kind, text, capture, created_at)"
            " VALUES (1, 'normal', 'user', 'chat', 'left over', 'pending', 1)",
        )
        assert await engines.recall_hits(stores, "left over") == 1
    finally:
        await stores.database.aclose()

    stores = Stores.over(PostgresDatabase(worker_database.emptied()))
    await stores.database.start()
    try:
        for table in await engines.tables(stores):
            if table != "schema_migrations":
                assert await engines.rows(stores, f"SELECT 1 FROM {table}") == [], table
        made = await engines.first(
            stores, "INSERT INTO people (display_name, created_at) VALUES ('new', 2) RETURNING id"
        )
        assert made["id"] == 1
        await engines.plant(
            stores,
            "INSERT INTO conversations (person_id, platform, chat_id, kind, created_at)"
            " VALUES (1, 'telegram', '1', 'direct', 2)",
        )
        await engines.plant(
            stores,
            "INSERT INTO messages (conversation_id, mode, role, kind, text, capture, created_at)"
            " VALUES (1, 'normal', 'user', 'chat', 'indexed again', 'pending', 2)",
        )
        assert await engines.recall_hits(stores, "indexed again") == 1  # the recall triggers still fire
    finally:
        await stores.database.aclose()


@pytest.mark.sqlite_only("what this test is about")
def test_a_sqlite_only_test_of_a_module_marked_engines_runs_on_sqlite_alone(
    store_backend: str, request: pytest.FixtureRequest
) -> None:
    assert store_backend == "sqlite" and not hasattr(request.node, "callspec")


async def test_a_test_of_a_module_marked_engines_gets_stores_over_its_engine(
    stores: Stores, store_backend: str
) -> None:
    assert engines.on_sqlite(stores) == (store_backend == "sqlite")
    assert (stores.checkpoints is None) == (store_backend == "postgres")


async def test_a_schema_a_test_changed_is_copied_afresh_for_the_next(worker_database: WorkerDatabase) -> None:
    stores = Stores.over(PostgresDatabase(worker_database.emptied()))
    await stores.database.start()
    try:
        async with engines.failing_inserts(stores, "people", "new.display_name = 'x'"):
            pass  # created and dropped: nothing is left
        await engines.plant(stores, "ALTER TABLE people DISABLE TRIGGER ALL")  # left behind
    finally:
        await stores.database.aclose()

    stores = Stores.over(PostgresDatabase(worker_database.emptied()))
    await stores.database.start()
    try:
        disabled = "SELECT count(*) FROM pg_trigger WHERE tgrelid = CAST('people' AS regclass) AND tgenabled = 'D'"
        assert (await engines.first(stores, disabled))[0] == 0
    finally:
        await stores.database.aclose()
