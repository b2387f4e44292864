"""The engine interface's contract (adapters/storage/engine.py), the same tests on SQLite and on PostgreSQL:
what every ported query class relies on."""

from __future__ import annotations

import pytest

from adapters.storage.engine import Database, Fetch, Ref, Statement
from adapters.storage.guard import refusing_while_person_private, refusing_while_private
from core.values.errors import IntervalEnded, PrivateWriteRefused

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
    # The same words on every engine: what the refusal names is what a caller tells the person.
    with pytest.raises(PrivateWriteRefused, match=r"^private mode writes no a test$"):
        await engine.write(PERSON, Statement("SELECT companion_raise('private_write', 'a test')", fetch=Fetch.ONE))
    with pytest.raises(IntervalEnded, match=r"^a reply$"):
        await engine.write(PERSON, Statement("SELECT companion_raise('interval_ended', 'a reply')", fetch=Fetch.ONE))

    counted = await engine.read(Statement("SELECT count(*) AS n FROM people", fetch=Fetch.ONE))
    assert counted[0].scalar == 0


async def _conversation(engine: Database) -> int:
    (person,) = await engine.write(PERSON)
    made = await engine.write(
        Statement(
            "INSERT INTO conversations (person_id, platform, chat_id, kind, created_at)"
            " VALUES (:p, 'telegram', '1', 'direct', 1.0)"
            " RETURNING id",
            {"p": person.scalar},
            fetch=Fetch.ONE,
        )
    )
    return int(made[0].scalar)


async def test_a_lasting_write_is_refused_whole_while_its_conversation_is_private(engine: Database) -> None:
    conversation = await _conversation(engine)
    person_of_it = (await engine.read(Statement("SELECT min(id) FROM people", fetch=Fetch.ONE)))[0].scalar
    note = Statement("INSERT INTO people (display_name, created_at) VALUES ('lasting', 2.0)")
    await engine.write(*refusing_while_private(engine.dialect, conversation, "a note"), note)  # normal: written
    await engine.write(
        Statement(
            "INSERT INTO segments (conversation_id, anchor_message_id, started_at, last_activity_at)"
            " VALUES (:c, 0, 3, 3)",
            {"c": conversation},
        )
    )

    with pytest.raises(PrivateWriteRefused):
        await engine.write(*refusing_while_private(engine.dialect, conversation, "a note"), note)
    with pytest.raises(PrivateWriteRefused):
        await engine.write(*refusing_while_person_private(engine.dialect, (person_of_it, 99), "a link"), note)

    counted = await engine.read(
        Statement("SELECT count(*) FROM people WHERE display_name = 'lasting'", fetch=Fetch.ONE)
    )
    assert counted[0].scalar == 1
