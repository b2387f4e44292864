"""The fixtures that run a test on both engines: a PostgreSQL case starts from what a fresh copy of the migrated
template holds, a test kept on SQLite in a module marked `engines` runs there alone, and a privacy test's third
case is one of two live processes on one PostgreSQL database, whose check fails when a guarantee does."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.storage.postgres.engine import PostgresDatabase
from adapters.storage.postgres.processes import ALIVE
from adapters.storage.stores import Stores
from bot.bootstrap import build_companion
from core.turn.config import CompanionConfig
from core.turn.recovery import Recovery
from tests.conftest import PASSPHRASE
from tests.helpers import engines
from tests.helpers.chat import say
from tests.helpers.engine_fixtures import SHARED, WorkerDatabase
from tests.helpers.fakes import FakeClock, FakeProvider
from tests.helpers.two_processes import Variant, two_processes

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


@pytest.mark.privacy
async def test_a_privacy_tests_third_case_is_one_of_two_live_processes_on_one_postgres_database(
    stores: Stores, store_backend: str, request: pytest.FixtureRequest
) -> None:
    assert request.node.callspec.params["store_backend"] == store_backend in ("sqlite", "postgres", SHARED)
    if store_backend != SHARED:
        assert stores.claims is None
        return
    assert stores.claims is not None
    # Its pools name it (the schema's fence fires on its writes), and another process is registered and alive.
    (named,) = await engines.rows(stores, "SELECT current_setting('companion.process', true)")
    assert named[0] == str(stores.claims.process_id)
    live = [row[0] for row in await engines.rows(stores, f"SELECT p.id FROM gateway_processes p WHERE {ALIVE}")]
    assert len(live) == 2 and stores.claims.process_id in live
    assert await stores.claims.others_alive() == [i for i in live if i != stores.claims.process_id]


# The ways a take-over that recovers nothing shows (B with its own keys and a message first closes the interval all
# the same: keyless to it, the valve closes it, fail closed).
RESUMING = [
    Variant(shared_keys=True, message_first=True),  # B's turn goes on in the interval, as private
    Variant(shared_keys=True, message_first=False),  # the job leaves the interval open
    Variant(shared_keys=False, message_first=False),
]


@pytest.mark.parametrize(
    "variant", RESUMING, ids=["shared-keys-message-first", "shared-keys-job-first", "own-keys-job-first"]
)
async def test_the_two_process_check_fails_when_the_second_process_resumes_a_dead_ones_interval(
    variant: Variant, emptied_postgres_url: str, tmp_path: Path, passphrase_hash: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    async with two_processes(emptied_postgres_url, tmp_path / "keys", clock, passphrase_hash, variant) as processes:
        companion = build_companion(
            processes.a, FakeProvider(), CompanionConfig(passphrase_hash=passphrase_hash), clock=clock
        )
        await companion.start()
        await say(companion, f"/private {PASSPHRASE} 1h")
        await say(companion, "TWO-PROCESS-CANARY said while the first process served")

        async def recovers_nothing(self: Recovery, conversation_ids: list[int]) -> list[int]:
            return []  # a take-over, by a turn's claim or by the job, leaves the dead process's interval as it was

        monkeypatch.setattr(Recovery, "taken_over", recovers_nothing)
        with pytest.raises(AssertionError, match="resumed"):
            await processes.check()
