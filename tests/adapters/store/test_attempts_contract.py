"""AttemptQueries' contract (adapters/storage/attempts.py), the same tests on SQLite and on PostgreSQL: the logs of
wrong tries the lockouts count (who and when, never what was tried)."""

from __future__ import annotations

import pytest

from adapters.storage.attempts import AttemptQueries
from adapters.storage.engine import Database
from tests.adapters.store.interval_rows import inserted, person, scalar

pytestmark = pytest.mark.engines


async def _account(engine: Database, user: str) -> int:
    who = await person(engine)
    return await inserted(
        engine,
        "INSERT INTO accounts (person_id, platform, platform_user_id, created_at) VALUES (:p, 'telegram', :u, 1.0)",
        p=who,
        u=user,
    )


async def test_wrong_tries_are_counted_per_account_and_forgotten_past_the_window(engine: Database) -> None:
    log = AttemptQueries(engine, "valve_attempts")
    ann, bob = await _account(engine, "1"), await _account(engine, "2")
    for at in (10.0, 20.0, 30.0):
        await log.record_failed(ann, at, keep_after=0.0)
    await log.record_failed(bob, 40.0, keep_after=15.0)  # an old try of anyone's is deleted with the next write

    assert await log.failed_since(ann, 0.0) == [20.0, 30.0]
    assert await log.failed_since(ann, 20.0) == [30.0]
    assert await log.failed_since(bob, 0.0) == [40.0]
    await log.clear_failed(ann)
    assert await log.failed_since(ann, 0.0) == []
    assert await log.failed_since(bob, 0.0) == [40.0]


async def test_the_two_logs_are_kept_apart(engine: Database) -> None:
    valve, links = AttemptQueries(engine, "valve_attempts"), AttemptQueries(engine, "link_attempts")
    ann = await _account(engine, "1")
    await valve.record_failed(ann, 10.0, keep_after=0.0)

    assert await links.failed_since(ann, 0.0) == []
    assert await scalar(engine, "SELECT count(*) FROM link_attempts") == 0
