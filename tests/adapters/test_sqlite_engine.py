"""The SQLite engine (adapters/storage/sqlite_engine.py): a write is one trip to aiosqlite's thread and one
commit, whole or not at all; a read is one trip and one snapshot; `companion_raise` becomes the core's error."""

from __future__ import annotations

import inspect
import sqlite3
import threading

import aiosqlite
import pytest

from adapters.storage.engine import Fetch, Ref, Statement
from adapters.storage.sqlite_engine import on_thread
from adapters.storage.stores import Stores
from core.values.errors import IntervalEnded, PrivateWriteRefused
from core.values.model import ConversationKey, DeliveryTarget, MirrorOf, RunRecord, Summary
from tests.helpers import engines

PERSON = Statement(
    "INSERT INTO people (display_name, created_at) VALUES (:name, 0) RETURNING id",
    {"name": "someone"},
    Fetch.ONE,
    inserts="people",
)


def test_aiosqlite_still_runs_a_function_on_its_thread_the_way_the_engine_calls_it():
    # The engine's one trip a write rests on aiosqlite's own (private) call; if a release drops or
    # changes it, this fails before anything else does (pinned <1 in pyproject.toml).
    execute = aiosqlite.Connection._execute
    assert inspect.iscoroutinefunction(execute)
    assert list(inspect.signature(execute).parameters)[:2] == ["self", "fn"]


async def test_a_function_sent_to_the_thread_runs_there_on_the_connection_itself(stores: Stores):
    seen = await on_thread(stores.database.connection, lambda raw: (raw, threading.get_ident()))
    assert isinstance(seen[0], sqlite3.Connection)
    assert seen[1] != threading.get_ident()


async def test_a_write_is_one_trip_and_one_fsynced_commit_and_a_ref_names_the_id_inserted_before(stores: Stores):
    engine = stores.database.engine
    before = (engine.counters.trips, engine.counters.commits, engine.counters.fsynced_commits)
    first, account = await engine.write(
        PERSON,
        Statement(
            "INSERT INTO accounts (person_id, platform, platform_user_id, created_at)"
            " VALUES (:p, 'telegram', '1', 0) RETURNING person_id",
            {"p": Ref(0)},
            Fetch.ONE,
        ),
    )
    assert account.scalar == first.scalar
    after = (engine.counters.trips, engine.counters.commits, engine.counters.fsynced_commits)
    assert after == (before[0] + 1, before[1] + 1, before[2] + 1)


async def test_an_unsynced_write_counts_a_commit_but_no_fsync_and_leaves_every_later_commit_full(stores: Stores):
    engine = stores.database.engine
    commits, fsynced = engine.counters.commits, engine.counters.fsynced_commits
    _, inside = await engine.write(PERSON, Statement("PRAGMA synchronous", fetch=Fetch.ONE), durable=False)
    assert inside.scalar == 1  # NORMAL: committed without waiting for the disk
    assert (engine.counters.commits, engine.counters.fsynced_commits) == (commits + 1, fsynced)
    assert (await engines.first(stores, "PRAGMA synchronous"))[0] == 2  # FULL


async def test_a_write_that_fails_half_way_keeps_nothing(stores: Stores):
    with pytest.raises(sqlite3.IntegrityError):
        await stores.database.engine.write(
            PERSON,
            Statement(
                "INSERT INTO accounts (person_id, platform, platform_user_id, created_at) VALUES (999, 'x', 'y', 0)"
            ),
        )
    assert await engines.rows(stores, "SELECT id FROM people") == []


async def test_a_read_is_one_trip_in_one_snapshot(stores: Stores):
    engine = stores.database.engine
    await engine.write(PERSON)
    trips = engine.counters.trips
    counted, listed = await engine.read(
        Statement("SELECT count(*) AS n FROM people", fetch=Fetch.ONE),
        Statement("SELECT display_name FROM people", fetch=Fetch.ALL),
    )
    assert engine.counters.trips == trips + 1
    assert counted.scalar == 1 and [dict(r) for r in listed.rows] == [{"display_name": "someone"}]


@pytest.mark.parametrize(("kind", "error"), [("private_write", PrivateWriteRefused), ("interval_ended", IntervalEnded)])
async def test_companion_raise_rolls_the_write_back_and_raises_the_cores_error(stores: Stores, kind, error):
    with pytest.raises(error):
        await stores.database.engine.write(
            PERSON, Statement("SELECT companion_raise(:kind, :what)", {"kind": kind, "what": "analytics"})
        )
    assert await engines.rows(stores, "SELECT id FROM people") == []
    await stores.database.engine.write(PERSON)  # the next write is not taken for a raise
    assert len(await engines.rows(stores, "SELECT id FROM people")) == 1


async def test_a_normal_reply_is_written_in_one_trip_with_its_run_its_mirror_and_its_delivery(stores: Stores):
    c = await stores.timeline.ensure_conversation(ConversationKey("telegram", "5"), "direct", None, 0.0)
    await stores.bindings.add_binding(c.id, "discord", "9", 0.0)
    user = await stores.timeline.add_inbound(c.id, "hi", 1.0, segment_id=None, account_id=None, platform_message_id="1")
    engine = stores.database.engine
    trips, commits = engine.counters.trips, engine.counters.commits
    run = RunRecord(c.id, 1.0, 2.0, "ok", (("provider_call", "chat", "ok", 5, 1, 2, 2.0),))
    recorded = await stores.timeline.record_reply(
        c.id,
        "hello",
        2.0,
        stored_text="hello",
        run=run,
        answers=user,
        target=DeliveryTarget("telegram", "5"),
        mirror=MirrorOf(user, "telegram"),
    )
    assert (engine.counters.trips, engine.counters.commits) == (trips + 1, commits + 1)
    assert recorded.delivery is not None and recorded.delivery.id == recorded.delivery_id
    assert recorded.delivery.text == "hello" and len(recorded.mirror_ids) == 1
    assert [tuple(r) for r in await engines.rows(stores, "SELECT count(*) FROM agent_events")] == [(1,)]
    assert [tuple(r) for r in await engines.rows(stores, "SELECT turn FROM messages WHERE id = ?", (user,))] == [
        ("done",)
    ]


async def test_a_reply_behind_an_earlier_pending_row_of_its_lane_is_not_handed_over_as_written(stores: Stores):
    c = await stores.timeline.ensure_conversation(ConversationKey("telegram", "5"), "direct", None, 0.0)
    target = DeliveryTarget("telegram", "5")
    first = await stores.timeline.record_reply(c.id, "first", 1.0, target=target)
    assert first.delivery is not None  # alone in its lane
    second = await stores.timeline.record_reply(c.id, "second", 2.0, target=target)
    assert second.delivery_id is not None and second.delivery is None  # the first still waits: read in order


async def test_a_redelivered_message_does_not_move_its_intervals_idle_clock(stores: Stores):
    c = await stores.timeline.ensure_conversation(ConversationKey("telegram", "5"), "direct", None, 0.0)
    segment = await stores.modes.open_segment(c.id, 1.0, None)
    kept = await stores.timeline.add_inbound(
        c.id, "x", 2.0, segment_id=segment.id, account_id=None, platform_message_id="7"
    )
    again = await stores.timeline.add_inbound(
        c.id, "x", 9.0, segment_id=segment.id, account_id=None, platform_message_id="7"
    )
    assert kept is not None and again is None
    assert [tuple(r) for r in await engines.rows(stores, "SELECT last_activity_at FROM segments")] == [(2.0,)]


async def test_each_modes_context_starts_after_its_own_summary_and_normal_mode_never_after_a_private_one(
    stores: Stores,
):
    c = await stores.timeline.ensure_conversation(ConversationKey("telegram", "5"), "direct", None, 0.0)
    said = [await stores.timeline.add_message(c.id, "user", f"normal {i}", float(i)) for i in range(3)]
    segment = await stores.modes.open_segment(c.id, 3.0, None)
    private = await stores.timeline.add_message(c.id, "user", "private 0", 4.0, segment_id=segment.id)
    assert private is not None and said[0] is not None
    await stores.timeline.save_summary(c.id, Summary("private so far", private), 5.0, segment_id=segment.id)
    await stores.timeline.save_summary(c.id, Summary("normal so far", said[0]), 5.0)

    normal = await stores.timeline.context_reads(c.id, person_id=None, segment_id=None, limit=10, count_up_to=20)
    assert [i.text for i in normal.items] == ["normal 1", "normal 2", None]  # and the interval's placeholder
    assert normal.messages_after == 2
    own = await stores.timeline.context_reads(c.id, person_id=None, segment_id=segment.id, limit=10, count_up_to=20)
    assert own.items == [] and own.messages_after == 0  # after the private summary's watermark
    assert own.private_summary == Summary("private so far", private)
