"""The engine interface's contract (adapters/storage/engine.py), the same tests on SQLite and on PostgreSQL:
what every ported query class relies on."""

from __future__ import annotations

import pytest

from adapters.storage.engine import Database, Fetch, Ref, Statement
from core.values.errors import PrivateWriteRefused

pytestmark = pytest.mark.engines

PERSON = Statement(
    "INSERT INTO people (display_name, created_at) VALUES (:name, :now) RETURNING id",
    {"name": "owner", "now": 1.0},
    fetch=Fetch.ONE,
    inserts="people",
)


async def test_a_write_returns_what_it_inserted_and_a_ref_names_it(engine: Database) -> None:
    account = Statement(
        "INSERT INTO accounts (person_id, platform, platform_user_id, created_at) VALUES (:p, 'telegram', '1', 1.0)",
        {"p": Ref(0)},
    )
    person, _ = await engine.write(PERSON, account)

    rows = (await engine.read(Statement("SELECT person_id FROM accounts", fetch=Fetch.ALL)))[0].rows
    assert [row["person_id"] for row in rows] == [person.scalar]


async def test_a_write_that_fails_half_way_writes_nothing(engine: Database) -> None:
    with pytest.raises(Exception):  # noqa: B017, PT011 - each engine's own constraint error
        await engine.write(PERSON, Statement("INSERT INTO accounts (person_id) VALUES (NULL)"))

    counted = await engine.read(Statement("SELECT count(*) AS n FROM people", fetch=Fetch.ONE))
    assert counted[0].scalar == 0


async def test_companion_raise_refuses_the_write_as_the_error_it_names(engine: Database) -> None:
    with pytest.raises(PrivateWriteRefused):
        await engine.write(PERSON, Statement("SELECT companion_raise('private_write', 'a test')", fetch=Fetch.ONE))

    counted = await engine.read(Statement("SELECT count(*) AS n FROM people", fetch=Fetch.ONE))
    assert counted[0].scalar == 0
