"""InboxQueries' contract (adapters/storage/inbox.py) on SQLite and PostgreSQL: an update is stored once (a redelivery
is a no-op, also after it was handled), taken in update-id order, its body deleted once handled; on PostgreSQL its
body is sealed under a transit key that is shredded once no row needs it, and a row whose key is gone is dropped."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from adapters.storage.engine import Database, Fetch, Statement
from adapters.storage.inbox import TRANSIT_LIFE_SECONDS, TRANSIT_SEAL_SECONDS, InboxQueries, TransitKeys
from adapters.storage.keys import KeyDir, key_ids
from tests.adapters.store.seed import count

pytestmark = pytest.mark.engines

BODY = '{"update_id": %d, "message": {"text": "okapi-inbox-canary"}}'


class Wall:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def inbox_of(engine: Database, tmp_path: Path, wall: Wall) -> InboxQueries:
    """The inbox as the engine's store builds it: transit keys on PostgreSQL, bodies as they came on SQLite."""
    transit = None
    if engine.dialect.name == "postgres":
        keys = KeyDir(tmp_path / "transit")
        keys.ensure()
        transit = TransitKeys(keys)
    return InboxQueries(engine, transit, wall=wall)


async def test_an_update_is_stored_once_and_a_redelivery_is_a_no_op_also_once_it_was_handled(
    engine: Database, tmp_path: Path
) -> None:
    inbox = inbox_of(engine, tmp_path, Wall())
    assert await inbox.put("telegram", 7, BODY % 7) is True
    assert await inbox.put("telegram", 7, BODY % 7) is False
    assert [(row.update_id, row.body) for row in await inbox.take("telegram", 10)] == [(7, BODY % 7)]
    await inbox.done("telegram", 7)
    assert await inbox.put("telegram", 7, BODY % 7) is False  # the tombstone
    assert await inbox.take("telegram", 10) == []
    assert await inbox.depth("telegram") == 0
    assert await count(engine, "SELECT count(*) FROM webhook_inbox WHERE body IS NOT NULL") == 0


async def test_updates_are_taken_in_update_id_order_without_those_in_hand(engine: Database, tmp_path: Path) -> None:
    inbox = inbox_of(engine, tmp_path, Wall())
    for update_id in (12, 10, 11, 13):
        await inbox.put("telegram", update_id, BODY % update_id)
    assert [row.update_id for row in await inbox.take("telegram", 2)] == [10, 11]
    assert [row.update_id for row in await inbox.take("telegram", 2, skip={10, 11})] == [12, 13]
    assert await inbox.depth("telegram") == 4


async def test_handled_rows_are_deleted_after_a_day(engine: Database, tmp_path: Path) -> None:
    wall = Wall()
    inbox = inbox_of(engine, tmp_path, wall)
    await inbox.put("telegram", 1, BODY % 1)
    await inbox.done("telegram", 1)
    wall.now += 86400 + 1
    await inbox.tidy()
    assert await count(engine, "SELECT count(*) FROM webhook_inbox") == 0


async def test_a_body_is_sealed_on_postgresql_and_its_transit_key_shredded_once_no_row_needs_it(
    engine: Database, tmp_path: Path
) -> None:
    if engine.dialect.name != "postgres":
        return  # SQLite keeps the body as it came, deleted with secure_delete (PRIVACY.md)
    wall = Wall()
    inbox = inbox_of(engine, tmp_path, wall)
    await inbox.put("telegram", 1, BODY % 1)
    (stored,) = await engine.read(Statement("SELECT body, key_id FROM webhook_inbox", {}, Fetch.ONE))
    row = stored.one
    assert row is not None and row["body"].startswith("s1.") and "okapi" not in row["body"]
    assert key_ids(tmp_path / "transit") == {row["key_id"]}
    await inbox.tidy()
    assert key_ids(tmp_path / "transit") == {row["key_id"]}  # a row needs it
    await inbox.done("telegram", 1)
    wall.now += TRANSIT_SEAL_SECONDS + 61  # no process seals with it any more
    await inbox.tidy()
    assert key_ids(tmp_path / "transit") == set()


async def test_a_row_whose_transit_key_expired_is_dropped_fail_closed_with_its_ids_alone(
    engine: Database, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    if engine.dialect.name != "postgres":
        return  # no transit keys on SQLite
    wall = Wall()
    inbox = inbox_of(engine, tmp_path, wall)
    await inbox.put("telegram", 5, BODY % 5)
    wall.now += TRANSIT_LIFE_SECONDS + 1
    caplog.set_level(logging.INFO)
    await inbox.tidy()
    assert await inbox.take("telegram", 10) == []
    assert await count(engine, "SELECT count(*) FROM webhook_inbox WHERE body IS NOT NULL") == 0
    assert "telegram update 5 dropped: its transit key is gone" in caplog.text
    assert "okapi" not in caplog.text
    assert await inbox.put("telegram", 6, BODY % 6) is True  # a new key for the next one
    assert [row.update_id for row in await inbox.take("telegram", 10)] == [6]
