"""LifetimeQueries' contract (adapters/storage/privacy.py), the same tests on SQLite and on PostgreSQL: forgetting,
the expiry of artifacts, export and crossings."""

from __future__ import annotations

import pytest

from adapters.storage.engine import Database
from adapters.storage.privacy import LifetimeQueries
from adapters.storage.timeline import TimelineQueries
from core.values.copy import INTERVAL_ENDED_SHOWN
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
)

pytestmark = pytest.mark.engines


def lifetime_over(engine: Database) -> LifetimeQueries:
    return LifetimeQueries(engine, TimelineQueries(engine))


async def test_forget_private_deletes_every_row_of_every_interval(engine: Database) -> None:
    lifetime = lifetime_over(engine)
    who = await person(engine)
    c = await conversation(engine, who=who)
    other = await conversation(engine, "2", platform="discord", who=who)
    ended = await segment(engine, c, ended_at=20.0)
    await fill_segment(engine, c, ended, who=who)
    await message(engine, c, "normal between")
    living = await segment(engine, c)
    await fill_segment(engine, c, living, who=who)
    kept = await segment(engine, other)
    await fill_segment(engine, other, kept, who=who)

    assert await lifetime.delete_segments_of(c, 30.0) == 2

    for gone in (ended, living):
        assert set((await rows_of_segment(engine, gone)).values()) == {0}
    assert set((await rows_of_segment(engine, kept)).values()) == {1}  # another conversation's interval stays
    assert await column(engine, "SELECT text FROM messages WHERE conversation_id = :c", c=c) == ["normal between"]
    assert await lifetime.delete_segments_of(c, 31.0) == 0


async def test_forget_private_leaves_only_a_retraction_of_what_was_shown(engine: Database) -> None:
    lifetime = lifetime_over(engine)
    c = await conversation(engine)
    interval = await segment(engine, c)
    shown = await delivery(engine, c, segment_id=interval, text="a private answer", streamed='["9"]')

    await lifetime.delete_segments_of(c, 30.0)

    retraction = "SELECT text FROM deliveries WHERE id = :d AND segment_id IS NULL AND retracts = 1"
    assert await column(engine, retraction, d=shown) == [INTERVAL_ENDED_SHOWN]
    assert await column(engine, "SELECT text FROM deliveries") == [INTERVAL_ENDED_SHOWN]


async def test_an_expired_artifact_leaves_no_row_and_a_living_one_stays(engine: Database) -> None:
    lifetime = lifetime_over(engine)
    c = await conversation(engine)
    interval = await segment(engine, c)
    for expires_at in (50.0, 500.0, None):
        await lifetime.request_crossing(interval, "file", 10.0, 99.0)
        await lifetime.confirm_crossing(interval, c, "notes.md", f"until {expires_at}", 11.0, expires_at)

    assert await lifetime.delete_expired_artifacts(50.0) == 1

    assert await column(engine, "SELECT content FROM artifacts ORDER BY id") == ["until 500.0", "until None"]
    assert await lifetime.delete_expired_artifacts(50.0) == 0


async def test_a_crossing_is_confirmed_once_and_only_before_its_time_ends(engine: Database) -> None:
    lifetime = lifetime_over(engine)
    c = await conversation(engine)
    interval = await segment(engine, c)
    await lifetime.request_crossing(interval, "old", 10.0, 99.0)
    await lifetime.request_crossing(interval, "file", 10.0, 99.0)  # replaces the pending one

    made = await lifetime.confirm_crossing(interval, c, "notes.md", "what crossed", 20.0, None)

    assert made is not None
    assert await column(engine, "SELECT destination FROM artifacts WHERE id = :a", a=made) == ["file"]
    assert await lifetime.confirm_crossing(interval, c, "notes.md", "again", 21.0, None) is None
    await lifetime.request_crossing(interval, "file", 30.0, 40.0)
    assert await lifetime.confirm_crossing(interval, c, "late.md", "too late", 41.0, None) is None
    assert await scalar(engine, "SELECT count(*) FROM crossings") == 0  # a late confirmation consumes it too
    assert await scalar(engine, "SELECT count(*) FROM artifacts") == 1


async def test_a_normal_export_holds_a_placeholder_never_the_private_rows(engine: Database) -> None:
    lifetime = lifetime_over(engine)
    c = await conversation(engine)
    first = await message(engine, c, "normal one")
    interval = await segment(engine, c, ended_at=20.0)
    await message(engine, c, "a private word", segment_id=interval)
    last = await message(engine, c, "normal two")

    normal = [(i.position, i.text, i.masked_segment_id) async for i in lifetime.export_items(c, visible_segment=None)]
    private = [i.text async for i in lifetime.export_items(c, visible_segment=interval)]

    assert normal == [(first, "normal one", None), (first, None, interval), (last, "normal two", None)]
    assert private == ["normal one", "a private word", "normal two"]
    assert [i.text for i in await lifetime.segment_items(interval)] == ["a private word"]


async def test_an_export_in_chunks_gives_every_item_once_across_intervals_on_one_anchor(engine: Database) -> None:
    lifetime = lifetime_over(engine)
    c = await conversation(engine)
    first = await message(engine, c, "normal one")
    intervals = [await segment(engine, c, ended_at=20.0) for _ in range(3)]  # one after another: one anchor
    last = await message(engine, c, "normal two")
    whole = [(first, None), *((first, i) for i in intervals), (last, None)]

    for chunk in (1, 2, 3, 5):
        exported = [
            (i.position, i.masked_segment_id) async for i in lifetime.export_items(c, visible_segment=None, chunk=chunk)
        ]
        assert exported == whole, chunk
