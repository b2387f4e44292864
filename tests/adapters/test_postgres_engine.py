"""The PostgreSQL engine against a real server: one trip a write, Refs, whole rollbacks, one snapshot a read."""

from __future__ import annotations

import asyncio
import gc
import os
import weakref
from collections.abc import AsyncIterator, Generator
from pathlib import Path

import pytest

from adapters.storage.engine import Fetch, Ref, Statement
from adapters.storage.postgres.engine import PostgresDatabase, render
from core.values.errors import StoreError
from tests.helpers.postgres import PostgresCluster

NOW = 1_800_000_000.0
PERSON = Statement("INSERT INTO people (created_at) VALUES (:now) RETURNING id", {"now": NOW}, Fetch.ONE, "people")
COUNT_PEOPLE = Statement("SELECT count(*) AS n FROM people", fetch=Fetch.ONE)


def conversation(person: object, chat: str = "1") -> Statement:
    return Statement(
        "INSERT INTO conversations (platform, chat_id, kind, person_id, created_at)"
        " VALUES ('telegram', :chat, 'direct', :person, :now) RETURNING id, person_id",
        {"chat": chat, "person": person, "now": NOW},
        Fetch.ONE,
        "conversations",
    )


@pytest.fixture
async def db(postgres_url: str) -> AsyncIterator[PostgresDatabase]:
    # One connection: every write of a test meets what the ones before it left in the session.
    database = PostgresDatabase(postgres_url, pool_size=1)
    await database.start()
    yield database
    await database.aclose()


async def people(db: PostgresDatabase) -> int:
    (result,) = await db.read(COUNT_PEOPLE)
    return int(result.scalar)


async def test_a_write_of_several_statements_is_one_round_trip(db: PostgresDatabase, tmp_path: Path) -> None:
    from psycopg.pq import Trace

    trace = tmp_path / "libpq.trace"
    before = (db.counters.trips, db.counters.commits)
    async with db._connections().connection() as conn:
        fd = os.open(trace, os.O_WRONLY | os.O_CREAT, 0o600)
        conn.pgconn.trace(fd)
        conn.pgconn.set_trace_flags(Trace.SUPPRESS_TIMESTAMPS)
    try:
        await db.write(PERSON, conversation(Ref(0)), PERSON, Statement("UPDATE people SET display_name = 'x'"))
    finally:
        async with db._connections().connection() as conn:
            conn.pgconn.untrace()
        os.close(fd)
    messages = [line.split("\t") for line in trace.read_text().splitlines() if line.strip()]
    sent = [m[2].split(" ")[0] for m in messages if m[0] == "F"]
    received = [m[2].split(" ")[0] for m in messages if m[0] == "B"]
    # BEGIN, DISCARD SEQUENCES (for the Ref), four statements and COMMIT went out before the client waited
    # once: one Sync, one ReadyForQuery.
    assert sent.count("Execute") == 7 and sent.count("Sync") == 1, sent
    assert received.count("ReadyForQuery") == 1, received
    last_sent = max(i for i, m in enumerate(messages) if m[0] == "F")
    first_ready = next(i for i, m in enumerate(messages) if m[0] == "B" and m[2].startswith("ReadyForQuery"))
    assert last_sent < first_ready
    assert (db.counters.trips, db.counters.commits) == (before[0] + 1, before[1] + 1)


async def test_a_ref_names_the_id_an_earlier_statement_of_the_write_inserted(db: PostgresDatabase) -> None:
    await db.write(PERSON, PERSON)  # the sequence moves on: a Ref must name this write's id, not the latest
    person, conv = await db.write(PERSON, conversation(Ref(0)))
    assert person.one is not None and conv.one is not None
    assert conv.one["person_id"] == person.one["id"]


async def test_a_ref_to_an_insert_that_inserted_nothing_fails_the_write_instead_of_naming_another_id(
    db: PostgresDatabase,
) -> None:
    await db.write(PERSON)  # this session's currval of people is now set
    nothing = Statement("INSERT INTO people (created_at) SELECT :now WHERE false", {"now": NOW}, inserts="people")
    with pytest.raises(StoreError):
        await db.write(nothing, conversation(Ref(0)))
    (result,) = await db.read(Statement("SELECT count(*) AS n FROM conversations", fetch=Fetch.ONE))
    assert result.scalar == 0


def test_a_ref_must_name_the_only_earlier_insert_of_its_table() -> None:
    statements = [PERSON, PERSON, conversation(Ref(0))]
    with pytest.raises(ValueError, match="both insert into people"):
        render(statements[2], 2, statements)
    with pytest.raises(ValueError, match="does not come before it"):
        render(conversation(Ref(1)), 1, [PERSON, conversation(Ref(1))])


def test_named_parameters_become_positional_placeholders_outside_literals() -> None:
    statement = Statement(
        "SELECT :a AS a, ':b' AS literal, 'it''s :c' AS quoted, x::text, 5 % 2 -- :d\nFROM t WHERE y = :a",
        {"a": 1},
    )
    sql, params = render(statement, 0, [statement])
    assert sql == b"SELECT $1 AS a, ':b' AS literal, 'it''s :c' AS quoted, x::text, 5 % 2 -- :d\nFROM t WHERE y = $1"
    assert params == [1]
    with_ref = Statement("SELECT :b AS b, :r AS r, :a AS a, :b AS again", {"a": 1, "b": 2, "r": Ref(0)})
    sql, params = render(with_ref, 1, [PERSON, with_ref])
    assert sql == b"SELECT $1 AS b, currval(pg_get_serial_sequence('people', 'id')) AS r, $2 AS a, $1 AS again"
    assert params == [2, 1]


async def test_a_trip_larger_than_the_sockets_buffers_is_sent_and_read_whole(db: PostgresDatabase) -> None:
    # 8 MB each way: the Sync's flush leaves most of the query unsent, and the answer comes in many reads.
    big = "x" * (8 << 20)
    async with asyncio.timeout(30):  # a guard against a hang, not a measure
        (result,) = await db.write(Statement("SELECT length(:big) AS n, :big AS back", {"big": big}, Fetch.ONE))
    assert result.one is not None and result.one["n"] == len(big) and result.one["back"] == big


async def test_answers_arriving_in_the_round_their_trip_is_cancelled_in_are_left_unread() -> None:
    # The loop calls a trip's reader after a task earlier in the same round cancelled the trip: the reader reads
    # nothing (the cancelled trip closes its connection), and raises nothing into the loop.
    import socket

    from adapters.storage.postgres.engine import _Answers

    given: list[object] = []

    def exchange() -> Generator[int, object, list[object]]:
        given.append((yield 1))
        return []

    trip = exchange()
    next(trip)
    ours, server = socket.socketpair()
    try:
        answers = _Answers(trip, asyncio.get_running_loop(), ours.fileno())
        server.send(b"answers")
        answers.future.cancel()
        answers._readable()
        answers.stop()
    finally:
        ours.close()
        server.close()
    assert given == []


async def test_a_failure_mid_write_rolls_the_whole_write_back(db: PostgresDatabase) -> None:
    refused = Statement("INSERT INTO conversations (platform, chat_id, kind, created_at) VALUES ('x', '1', 'club', 0)")
    before = await people(db)
    with pytest.raises(StoreError):
        await db.write(PERSON, refused, PERSON)
    assert await people(db) == before
    # The one connection is usable again: the failed transaction was rolled back, not left aborted.
    await db.write(PERSON)
    assert await people(db) == before + 1


async def test_a_failure_in_a_transaction_over_several_trips_rolls_it_back_whole(db: PostgresDatabase) -> None:
    before = await people(db)

    async def person_then_failure() -> None:
        async with db.tx() as tx:
            await tx.run(PERSON)
            await tx.run(Statement("SELECT 1 / 0"))

    with pytest.raises(StoreError):
        await person_then_failure()
    assert await people(db) == before
    async with db.tx() as tx:
        (person,) = await tx.run(PERSON)
        (conv,) = await tx.run(conversation(person.scalar))
    assert conv.one is not None and conv.one["person_id"] == person.scalar


async def test_a_read_of_several_statements_sees_one_snapshot(postgres_url: str) -> None:
    import psycopg

    database = PostgresDatabase(postgres_url, pool_size=2)
    await database.start()
    blocker = await psycopg.AsyncConnection.connect(postgres_url, autocommit=True)
    try:
        await blocker.execute("SELECT pg_advisory_lock(31)")
        # The read counts, then waits for the lock the test holds, then counts again.
        wait = Statement("SELECT pg_advisory_xact_lock_shared(31)")
        read = asyncio.create_task(database.read(COUNT_PEOPLE, wait, COUNT_PEOPLE))
        await _until_someone_waits_for_a_lock(blocker)
        await database.write(PERSON)  # committed while the read is between its two counts
        await blocker.execute("SELECT pg_advisory_unlock(31)")
        first, _, second = await read
        assert first.scalar == second.scalar == 0
        assert await people(database) == 1
    finally:
        await blocker.close()
        await database.aclose()


async def test_a_read_never_waits_for_a_connection_behind_the_writes(postgres_url: str) -> None:
    import psycopg

    database = PostgresDatabase(postgres_url, pool_size=2)
    await database.start()
    blocker = await psycopg.AsyncConnection.connect(postgres_url, autocommit=True)
    writes: list[asyncio.Task[object]] = []
    try:
        await blocker.execute("SELECT pg_advisory_lock(32)")
        # Every connection the writes have is taken by a write waiting for the lock the test holds.
        held = Statement("SELECT pg_advisory_xact_lock(32)")
        writes = [asyncio.create_task(database.write(held, PERSON)) for _ in range(2)]
        await _until_someone_waits_for_a_lock(blocker, waiting=2)
        async with asyncio.timeout(30):  # a guard against a hang, not a measure: the read answers at once
            assert await people(database) == 0
        await blocker.execute("SELECT pg_advisory_unlock(32)")
        await asyncio.gather(*writes)
        assert await people(database) == 2
    finally:
        await blocker.close()  # lets a held write go on, should the read have failed
        await asyncio.gather(*writes, return_exceptions=True)
        await database.aclose()


async def test_a_lost_server_fails_one_operation_not_one_for_each_pooled_connection(postgres_url: str) -> None:
    import psycopg

    database = PostgresDatabase(postgres_url)
    await database.start()
    killer = await psycopg.AsyncConnection.connect(postgres_url, autocommit=True)
    try:
        await database.write(PERSON)
        assert await people(database) == 1  # a connection in each pool, idle now
        # Every connection of the engine ends, as in a server restart.
        others = "FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        await killer.execute(f"SELECT pg_terminate_backend(pid) {others}")
        async with asyncio.timeout(30):
            while True:
                cursor = await killer.execute(f"SELECT count(*) {others}")
                row = await cursor.fetchone()
                if row is not None and row[0] == 0:
                    break
                await asyncio.sleep(0.01)
        with pytest.raises(StoreError):
            await database.write(PERSON)
        # The read's own connection was lost as well; it was replaced when the write found its own lost.
        assert await people(database) == 1
        await database.write(PERSON)
        assert await people(database) == 2
    finally:
        await killer.close()
        await database.aclose()


async def test_a_trip_cancelled_while_it_waits_closes_its_connection_at_once(db: PostgresDatabase) -> None:
    # The connection's pipeline still holds the cancelled trip's answers (the server is busy with its statement):
    # it is closed at once, its transaction never committed, and no later trip reads those answers as its own.
    async def slow_transaction() -> None:
        async with db.tx() as tx:
            await tx.run(PERSON)
            await tx.run(Statement("SELECT pg_sleep(30)"))

    sleeping = Statement(
        "SELECT count(*) AS n FROM pg_stat_activity WHERE state = 'active' AND query = 'SELECT pg_sleep(30)'",
        fetch=Fetch.ONE,
    )
    slow = asyncio.create_task(slow_transaction())
    async with asyncio.timeout(10):  # a guard against a hang, not a measure
        while True:
            (found,) = await db.read(sleeping)
            if found.scalar:
                break
            await asyncio.sleep(0.01)
    slow.cancel()
    done, _ = await asyncio.wait({slow}, timeout=10)  # not waiting for the server's 30 s
    assert slow in done and slow.cancelled()
    assert await people(db) == 0
    (answer,) = await db.write(Statement("SELECT 7 AS n", fetch=Fetch.ONE))
    assert answer.scalar == 7
    await db.write(PERSON)
    assert await people(db) == 1


async def test_a_statement_counts_as_prepared_only_once_the_server_answered_its_parse(postgres_url: str) -> None:
    # Prepared from its first use: in a trip that fails before it, its Parse is skipped with the rest, and the
    # next trip prepares it again; in one that fails after it, the statement stays prepared (a prepared
    # statement outlives its transaction) and the next trip uses it by its name.
    database = PostgresDatabase(postgres_url, pool_size=1, prepare_threshold=0)
    await database.start()
    failing = Statement("SELECT 1 / 0")
    skipped = Statement("INSERT INTO people (created_at) VALUES (:now) RETURNING id", {"now": NOW}, Fetch.ONE)
    parsed = Statement("INSERT INTO people (created_at) VALUES (:now) RETURNING id, 2 AS two", {"now": NOW}, Fetch.ONE)
    try:
        with pytest.raises(StoreError):
            await database.write(failing, skipped)
        with pytest.raises(StoreError):
            await database.write(parsed, failing)
        assert await people(database) == 0
        sent = parsed.sql.replace(":now", "$1")
        prepared = Statement("SELECT count(*) AS n FROM pg_prepared_statements WHERE statement = :sql", {"sql": sent})
        (count,) = await database.write(Statement(prepared.sql, prepared.params, Fetch.ONE))  # the write connection's
        assert count.scalar == 1
        (first,) = await database.write(skipped)
        (second,) = await database.write(parsed)
        assert first.one is not None and second.one is not None
        assert await people(database) == 2
    finally:
        await database.aclose()


async def test_a_connection_the_engine_let_go_is_freed_with_what_the_engine_kept_of_it(postgres_url: str) -> None:
    # The engine's state of a connection (its prepared statements, its Transformer) lives on the connection: a
    # connection the pool drops (closed, lost, past its lifetime) is freed, not kept alive by the engine.
    database = PostgresDatabase(postgres_url, pool_size=1, read_pool_size=1)
    await database.start()
    try:
        await database.write(PERSON)
        assert await people(database) == 1
        kept = []
        for reads in (False, True):
            async with database._connections(reads=reads).connection() as conn:
                assert getattr(conn, "companion_session", None) is not None
                kept.append(weakref.ref(conn))
            del conn
    finally:
        await database.aclose()
    gc.collect()
    assert [ref() for ref in kept] == [None, None]


async def _until_someone_waits_for_a_lock(conn: object, *, waiting: int = 1) -> None:
    async with asyncio.timeout(30):
        while True:
            cursor = await conn.execute(  # type: ignore[attr-defined]
                "SELECT count(*) FROM pg_locks WHERE NOT granted"
                " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            )
            if (await cursor.fetchone())[0] >= waiting:
                return
            await asyncio.sleep(0.01)


async def test_no_connection_to_be_had_is_one_store_error_line(
    db: PostgresDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The pool's one write connection held by an open transaction: a write waits for it, then gives up as a
    # StoreError (the server down fails the same way), never psycopg_pool's own error after its 30 s.
    monkeypatch.setattr("adapters.storage.postgres.engine.POOL_WAIT_SECONDS", 0.2)
    async with db.tx() as tx:
        await tx.run(PERSON)
        with pytest.raises(StoreError, match=r"^PostgreSQL"):
            await db.write(PERSON)
    assert await people(db) == 1


async def test_a_mark_commits_without_waiting_for_the_disk_and_every_other_write_waits(
    postgres_cluster: PostgresCluster, postgres_url: str
) -> None:
    # The test cluster runs with synchronous_commit off for speed; this database is set back to the default.
    database_name = postgres_url.split("/")[3].split("?")[0]
    postgres_cluster.execute(f"ALTER DATABASE {database_name} SET synchronous_commit = on")
    database = PostgresDatabase(postgres_url, pool_size=1)
    await database.start()
    try:
        setting = Statement("SELECT current_setting('synchronous_commit') AS s", fetch=Fetch.ONE)
        (durable,) = await database.write(setting)
        (mark,) = await database.write(setting, durable=False)
        (after,) = await database.write(setting)
        assert (durable.scalar, mark.scalar, after.scalar) == ("on", "off", "on")
        assert (database.counters.commits, database.counters.fsynced_commits) == (3, 2)
    finally:
        await database.aclose()


@pytest.mark.engines
def test_a_test_marked_engines_runs_on_each_engine(store_backend: str, request: pytest.FixtureRequest) -> None:
    assert request.node.callspec.params["store_backend"] == store_backend in ("sqlite", "postgres")
    if store_backend == "postgres":  # its cluster is started before the test (or the case skipped)
        assert request.getfixturevalue("postgres_cluster").running


def test_an_unmarked_test_runs_on_sqlite_alone(store_backend: str) -> None:
    assert store_backend == "sqlite"
