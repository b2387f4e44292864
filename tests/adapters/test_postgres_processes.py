"""Several gateways on one PostgreSQL database (COMPANION_SHARED_DATABASE): each registers, is alive while its key
is held AND its heartbeat is fresh, and stops when it can no longer count as alive."""

from __future__ import annotations

import asyncio

import pytest

from adapters.storage.postgres.instance import AdvisoryInstanceLock
from adapters.storage.postgres.processes import DEAD_AFTER_SECONDS, SharedInstanceLock, live_processes
from core.values.errors import StoreError
from tests.helpers.postgres import PostgresCluster


async def alive(url: str) -> list[int]:
    import psycopg

    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        return [process.id for process in await live_processes(conn)]


async def test_shared_processes_register_side_by_side_and_deregister_at_a_clean_stop(postgres_url: str) -> None:
    first, second = SharedInstanceLock(postgres_url), SharedInstanceLock(postgres_url)
    await first.acquire()
    await second.acquire()
    try:
        assert first.process_id is not None and second.process_id is not None
        assert await alive(postgres_url) == sorted([first.process_id, second.process_id])
    finally:
        await first.aclose()
    assert await alive(postgres_url) == [second.process_id]
    await second.aclose()
    await second.aclose()  # safe twice
    assert await alive(postgres_url) == []


async def test_a_shared_process_and_one_alone_exclude_each_other(postgres_url: str) -> None:
    alone = AdvisoryInstanceLock(postgres_url, "run")
    await alone.acquire()
    try:
        with pytest.raises(StoreError, match=r"^a companion run without COMPANION_SHARED_DATABASE holds .*\(pid \d+\)"):
            await SharedInstanceLock(postgres_url).acquire()
    finally:
        await alone.aclose()
    shared = SharedInstanceLock(postgres_url)
    await shared.acquire()
    try:
        with pytest.raises(StoreError, match=r"^another companion run holds "):
            await AdvisoryInstanceLock(postgres_url, "run").acquire()
        chat = AdvisoryInstanceLock(postgres_url, "chat")  # `companion chat` keeps its own key, beside them
        await chat.acquire()
        await chat.aclose()
    finally:
        await shared.aclose()


async def test_a_process_whose_heartbeat_is_stale_is_not_alive_though_it_holds_its_key(
    postgres_cluster: PostgresCluster, postgres_url: str
) -> None:
    process = SharedInstanceLock(postgres_url, beat=3600)  # no beat during the test
    await process.acquire()
    try:
        assert await alive(postgres_url) == [process.process_id]
        name = postgres_url.split("/")[3].split("?")[0]
        postgres_cluster.execute(
            f"UPDATE gateway_processes SET heartbeat_at = heartbeat_at - {DEAD_AFTER_SECONDS + 1}", name
        )
        assert await alive(postgres_url) == []
    finally:
        await process.aclose()


async def test_a_registered_row_without_its_key_held_is_not_alive(
    postgres_cluster: PostgresCluster, postgres_url: str
) -> None:
    name = postgres_url.split("/")[3].split("?")[0]
    # What a killed process leaves: its row, beating a moment ago, and no connection holding its key.
    postgres_cluster.execute(
        "INSERT INTO gateway_processes (host, pid, started_at, heartbeat_at)"
        " VALUES ('h', 1, extract(epoch FROM clock_timestamp()), extract(epoch FROM clock_timestamp()))",
        name,
    )
    assert await alive(postgres_url) == []


async def test_a_process_whose_connection_drops_is_lost_and_no_longer_alive(
    postgres_cluster: PostgresCluster, postgres_url: str
) -> None:
    process = SharedInstanceLock(postgres_url, beat=0.05)
    await process.acquire()
    try:
        postgres_cluster.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE 'companion run pid %'"
        )
        async with asyncio.timeout(30):
            await process.lost()
        assert await alive(postgres_url) == []
    finally:
        await process.aclose()


async def test_a_process_whose_row_was_deleted_stops(postgres_cluster: PostgresCluster, postgres_url: str) -> None:
    process = SharedInstanceLock(postgres_url, beat=0.05)
    await process.acquire()
    try:
        name = postgres_url.split("/")[3].split("?")[0]
        postgres_cluster.execute("DELETE FROM gateway_processes", name)
        async with asyncio.timeout(30):
            await process.lost()
    finally:
        await process.aclose()
