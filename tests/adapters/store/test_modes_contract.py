"""ModeQueries' contract (adapters/storage/modes.py), the same tests on SQLite and on PostgreSQL: the valve's
segments, their ends, expiry and the adapters' offsets."""

from __future__ import annotations

import asyncio

import pytest

from adapters.storage.engine import Database, Fetch, Statement
from adapters.storage.guard import refusing_while_private
from adapters.storage.modes import ModeQueries
from core.values.copy import INTERVAL_ENDED_SHOWN
from core.values.errors import PrivateWriteRefused
from tests.adapters.store.interval_rows import (
    column,
    conversation,
    delivery,
    fill_segment,
    message,
    person,
    rows_of_segment,
    scalar,
    segment,
    words,
)

pytestmark = pytest.mark.engines


async def test_open_segment_opens_one_interval_anchored_after_the_last_message(engine: Database) -> None:
    modes = ModeQueries(engine)
    c = await conversation(engine)
    last = await message(engine, c, "before")

    opened = await modes.open_segment(c, 20.0, 80.0)
    again = await modes.open_segment(c, 21.0, None)

    assert again == opened
    assert (opened.anchor_message_id, opened.started_at, opened.expires_at, opened.ended_at) == (last, 20.0, 80.0, None)
    assert await modes.open_segment_of(c) == opened
    assert await scalar(engine, "SELECT count(*) FROM segments") == 1


async def test_a_segment_never_opens_between_a_guarded_writes_check_and_its_commit(engine: Database) -> None:
    modes = ModeQueries(engine)
    c = await conversation(engine)
    async with engine.tx() as tx:
        await tx.run(*refusing_while_private(engine.dialect, c, "a note"))  # checked: normal mode
        opening = asyncio.create_task(modes.open_segment(c, 20.0, None))
        for _ in range(20):  # the valve gets every chance to run before the guarded write commits
            await asyncio.sleep(0.01)
        assert not opening.done()
        await tx.run(Statement("INSERT INTO people (display_name, created_at) VALUES ('lasting', 2.0)"))
    opened = await opening
    assert opened.conversation_id == c
    with pytest.raises(PrivateWriteRefused):  # and once it is open, the next guarded write is refused
        await engine.write(*refusing_while_private(engine.dialect, c, "a note"))


async def test_closing_an_interval_settles_its_unsent_replies_and_retracts_what_it_showed(engine: Database) -> None:
    modes = ModeQueries(engine)
    c = await conversation(engine)
    opened = await modes.open_segment(c, 20.0, None)
    unsent = await delivery(engine, c, segment_id=opened.id, text="a private answer")
    shown = await delivery(engine, c, segment_id=opened.id, text="a private answer", streamed='["7"]')

    assert await modes.close_segment(opened.id, 30.0, "normal") is True
    assert await modes.close_segment(opened.id, 31.0, "normal") is False

    assert await column(engine, "SELECT status FROM deliveries WHERE id = :d", d=unsent) == ["failed"]
    assert await column(engine, "SELECT text FROM deliveries WHERE id = :d", d=unsent) == [None]
    retraction = (
        "SELECT text FROM deliveries WHERE id = :d AND segment_id IS NULL AND retracts = 1 AND status = 'pending'"
    )
    assert await column(engine, retraction, d=shown) == [INTERVAL_ENDED_SHOWN]
    assert await modes.open_segment_of(c) is None


async def test_normal_closes_every_open_interval_of_the_conversation(engine: Database) -> None:
    modes = ModeQueries(engine)
    c = await conversation(engine)
    other = await conversation(engine, "2")
    opened = await modes.open_segment(c, 20.0, None)
    kept = await modes.open_segment(other, 20.0, None)
    unsent = await delivery(engine, c, segment_id=opened.id)

    assert await modes.close_open_segments(c, 30.0, "normal") == 1

    assert await modes.open_segment_of(c) is None
    assert await modes.open_segment_of(other) == kept
    assert await column(engine, "SELECT status FROM deliveries WHERE id = :d", d=unsent) == ["failed"]


async def test_a_crash_open_interval_is_closed_at_start(engine: Database) -> None:
    modes = ModeQueries(engine)
    c = await conversation(engine)
    discord = await conversation(engine, "d", platform="discord")
    opened = await modes.open_segment(c, 20.0, None)
    await message(engine, c, "the last private word", segment_id=opened.id, at=25.0)
    left = await modes.open_segment(discord, 20.0, None)
    unsent = await delivery(engine, c, segment_id=opened.id)

    closed = await modes.close_crash_open_segments(frozenset({"telegram"}), now=100.0)

    assert closed == [c]
    (segment_row,) = await modes.private_intervals(c, 100.0)
    assert (segment_row.ended_at, segment_row.end_reason) == (25.0, "restart")  # its record's end, not the restart
    assert await modes.restart_segment_for(c, 99.0) == opened.id  # sent before the restart: it belongs to it
    assert await modes.restart_segment_for(c, 101.0) is None
    assert await column(engine, "SELECT status FROM deliveries WHERE id = :d", d=unsent) == ["failed"]
    assert await modes.open_segment_of(discord) == left  # another platform's adapter closes its own
    assert await modes.close_crash_open_segments(frozenset(), now=100.0) == []
    assert await modes.close_crash_open_segments(None, now=100.0) == [discord]


async def test_an_expired_interval_leaves_no_row_of_it(engine: Database) -> None:
    modes = ModeQueries(engine)
    who = await person(engine)
    c = await conversation(engine, who=who)
    expired = await segment(engine, c, ended_at=20.0, expires_at=50.0)
    await fill_segment(engine, c, expired, who=who)
    living = await segment(engine, c, ended_at=60.0, expires_at=500.0)
    await fill_segment(engine, c, living, who=who)

    assert [s.id for s in await modes.private_intervals(c, 50.0)] == [living]  # gone for readers at its expiry
    assert await modes.delete_expired_segments(50.0) == 1

    assert set((await rows_of_segment(engine, expired)).values()) == {0}
    assert set((await rows_of_segment(engine, living)).values()) == {1}
    assert await words(engine, "messages") == ["a private word"]
    assert await modes.delete_expired_segments(50.0) == 0


async def test_the_adapters_offsets_are_kept_and_replaced(engine: Database) -> None:
    modes = ModeQueries(engine)
    assert await modes.get_adapter_state("telegram:offset") is None
    await modes.set_adapter_state("telegram:offset", "41", 1.0)
    await modes.set_adapter_state("telegram:offset", "42", 2.0)
    assert await modes.get_adapter_state("telegram:offset") == "42"


async def test_an_expired_interval_leaves_a_retraction_of_what_it_showed_and_nothing_else(engine: Database) -> None:
    modes = ModeQueries(engine)
    c = await conversation(engine)
    expired = await segment(engine, c, ended_at=20.0, expires_at=50.0)
    shown = await delivery(engine, c, segment_id=expired, text="a private answer", streamed='["7"]')

    await modes.delete_expired_segments(50.0)

    left = "SELECT text FROM deliveries WHERE id = :d AND segment_id IS NULL AND retracts = 1 AND status = 'pending'"
    assert await column(engine, left, d=shown) == [INTERVAL_ENDED_SHOWN]
    assert await column(engine, "SELECT text FROM deliveries") == [INTERVAL_ENDED_SHOWN]


async def test_two_valves_opening_at_once_open_one_interval(engine: Database) -> None:
    modes = ModeQueries(engine)
    c = await conversation(engine)
    async with engine.tx() as tx:  # another valve's open_segment, caught between its statements
        await tx.run(Statement(f"SELECT id FROM conversations WHERE id = :c{engine.dialect.for_update}", {"c": c}))
        first = await tx.run(
            Statement(
                "INSERT INTO segments (conversation_id, anchor_message_id, started_at, last_activity_at)"
                " VALUES (:c, 0, 20.0, 20.0) RETURNING id",
                {"c": c},
                Fetch.ONE,
            )
        )
        opening = asyncio.create_task(modes.open_segment(c, 21.0, None))
        for _ in range(20):  # this valve gets every chance to run before the other one commits
            await asyncio.sleep(0.01)
    opened = await opening

    assert opened.id == first[0].scalar
    assert await scalar(engine, "SELECT count(*) FROM segments WHERE ended_at IS NULL") == 1
