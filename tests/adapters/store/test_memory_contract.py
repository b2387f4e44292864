"""MemoryQueries' contract (adapters/storage/memory.py) on SQLite and PostgreSQL: recall never reads a private
row, every lasting write is refused while its conversation is private, capture takes normal messages only."""

from __future__ import annotations

import sqlite3

import pytest

from adapters.storage.engine import Database, Statement
from adapters.storage.memory import MemoryQueries
from core.values.errors import PrivateWriteRefused, StoreError
from core.values.model import RunRecord
from tests.adapters.store.seed import conversation, count, end_segment, message, open_segment, person, racing

pytestmark = pytest.mark.engines


async def _plant(engine: Database, source: str, ref: int, person_id: int, text: str) -> None:
    """A row in the recall index as if a trigger had put it there (none does for a private row)."""
    if engine.dialect.name == "postgres":
        sql = "INSERT INTO recall_index (source, ref, person_id, text) VALUES (:source, :ref, :p, :text)"
        params: dict[str, object] = {"source": source, "ref": ref, "p": person_id, "text": text}
    else:
        sql = "INSERT INTO recall_fts (rowid, text, source, person_id) VALUES (:rowid, :text, :source, :p)"
        offset = {"message": 1, "note": 2, "pad": 3}[source]
        params = {"rowid": ref * 4 + offset, "text": text, "source": source, "p": person_id}
    await engine.write(Statement(sql, params))


async def _owner(engine: Database) -> tuple[MemoryQueries, int, int]:
    owner = await person(engine)
    return MemoryQueries(engine), owner, await conversation(engine, owner)


async def test_recall_never_returns_a_private_row_even_one_planted_in_the_index(engine: Database) -> None:
    memory, owner, chat = await _owner(engine)
    normal = await message(engine, chat, "the lighthouse keeper")
    segment = await open_segment(engine, chat)
    secret = await message(engine, chat, "the lighthouse secret", segment_id=segment)
    private_pad = await _insert_private_pad(engine, owner, segment, "lighthouse in private")
    await _plant(engine, "message", secret, owner, "the lighthouse secret")
    await _plant(engine, "pad", private_pad, owner, "lighthouse in private")

    hits = await memory.recall(owner, ("lighthouse",))

    assert [(hit.source, hit.ref) for hit in hits] == [("message", normal)]
    assert "secret" not in repr(hits) and "private" not in repr(hits)


async def _insert_private_pad(engine: Database, owner: int, segment: int, text: str) -> int:
    from adapters.storage.sealing import sealed
    from tests.adapters.store.seed import insert

    return await insert(
        engine,
        "INSERT INTO pad_entries (person_id, segment_id, mode, text, created_at) VALUES (:p, :s, 'private', :t, 1.0)",
        p=owner,
        s=segment,
        t=sealed(engine.sealer, segment, "pad_entries.text", text),
    )


async def test_recall_finds_messages_notes_and_memory_of_that_person_only(engine: Database) -> None:
    memory, owner, chat = await _owner(engine)
    other = await person(engine, "someone else")
    elsewhere = await conversation(engine, other, chat="2")
    said = await message(engine, chat, "Meet at the harbour")
    await message(engine, elsewhere, "the harbour of someone else")
    pad = await memory.remember(owner, chat, "likes the harbour at dawn", 2.0)
    note = await memory.save_capture(owner, "2026-01-01", "walked by the harbour", (), [], 3.0)

    hits = await memory.recall(owner, ("HARBOUR", "nothing"))

    assert {(hit.source, hit.ref) for hit in hits} == {("message", said), ("pad", pad), ("note", note)}
    assert await memory.recall(owner, ()) == []
    assert len(await memory.recall(owner, ("harbour",), limit=2)) == 2


@pytest.mark.parametrize("typed", ['"', "a OR b", "NOT x", "x*", "col:x", "(", "a & b", "!x", "a:*", "'", "\\"])
async def test_recall_reads_what_a_person_typed_as_words_only(engine: Database, typed: str) -> None:
    memory, owner, chat = await _owner(engine)
    await message(engine, chat, "alpha beta")

    assert await memory.recall(owner, (typed,)) == []  # never a syntax error


async def test_a_lasting_write_is_refused_while_private(engine: Database) -> None:
    memory, owner, chat = await _owner(engine)
    entry = await memory.remember(owner, chat, "likes tea", 1.0)
    goal = await memory.add_goal(owner, chat, "run", None, 1.0)
    followup = await memory.add_followup(owner, chat, "reminder", "call", 5.0, 1.0)
    note = await memory.save_capture(owner, "2026-01-01", "a day", (), [], 1.0)
    await open_segment(engine, chat)
    tables = ("pad_entries", "goals", "followups", "notes", "tool_operations")
    before = [await count(engine, f"SELECT count(*) FROM {table}") for table in tables]

    refused = [
        memory.remember(owner, chat, "likes coffee", 2.0),
        memory.forget_pad_entry(owner, chat, entry),
        memory.forget_pad_matching(owner, chat, "tea"),
        memory.add_goal(owner, chat, "swim", None, 2.0),
        memory.update_goal(owner, chat, goal, 2.0, status="done"),
        memory.add_followup(owner, chat, "watch", "the game", None, 2.0),
        memory.set_followup_status(owner, chat, followup, "cancelled", 2.0),
        memory.forget_note(owner, chat, note),
        memory.record_tool_operation(chat, None, "remember", "ok", 3, 4, 2.0),
    ]
    for write in refused:
        with pytest.raises(PrivateWriteRefused):
            await write

    assert [await count(engine, f"SELECT count(*) FROM {table}") for table in tables] == before
    assert [g.status for g in await memory.goals(owner)] == ["active"]
    assert [f.status for f in await memory.followups(owner)] == ["scheduled"]


async def test_a_tool_operation_inside_an_interval_is_the_intervals_and_written(engine: Database) -> None:
    memory, _, chat = await _owner(engine)
    segment = await open_segment(engine, chat)

    await memory.record_tool_operation(chat, segment, "recall", "ok", 3, 4, 2.0)

    assert await count(engine, "SELECT count(*) FROM tool_operations WHERE segment_id = :s", s=segment) == 1


async def test_a_served_tools_call_is_never_written_as_an_intervals_row(engine: Database) -> None:
    memory, _, chat = await _owner(engine)
    await memory.record_tool_operation(chat, None, "list_events", "ok", 3, 4, 1.0, server="calendar")
    segment = await open_segment(engine, chat)

    # The schema's CHECK (SQLite's IntegrityError; PostgreSQL's, raised by its engine as a StoreError).
    with pytest.raises((sqlite3.IntegrityError, StoreError)):
        await memory.record_tool_operation(chat, segment, "read_note", "ok", 3, 4, 2.0, server="notes")

    assert await count(engine, "SELECT count(*) FROM tool_operations WHERE segment_id IS NOT NULL") == 0
    assert await count(engine, "SELECT count(*) FROM tool_operations WHERE server = 'calendar'") == 1


async def test_no_analytics_row_for_a_private_turn(engine: Database) -> None:
    memory, _, chat = await _owner(engine)
    events = (("provider_call", "model", "ok", None, None, None, 1.5), ("tool_call", "recall", "error", 4.0, 1, 2, 1.6))
    await memory.save_run(RunRecord(chat, 1.0, 2.0, "ok", events))
    segment = await open_segment(engine, chat)

    with pytest.raises(PrivateWriteRefused):
        await memory.save_run(RunRecord(chat, 11.0, 12.0, "ok", events))

    assert await count(engine, "SELECT count(*) FROM agent_runs") == 1
    assert await count(engine, "SELECT count(*) FROM agent_events") == 2
    await end_segment(engine, segment)
    await memory.save_run(
        RunRecord(chat, 21.0, 22.0, "error", (("error", "ProviderUnavailable", "error", None, None, None, 21.5),))
    )
    report = await memory.report_rows()
    assert (report["turns"], report["ok"], report["failed"]) == (2, 1, 1)
    assert report["tools"] == [("recall", 1, 1)] and report["errors"] == [("ProviderUnavailable", 1)]
    assert report["latencies"] == [] and report["cut_off"] == 0


async def test_served_tool_calls_are_reported_by_server_tool_and_outcome_apart_from_the_built_in_ones(
    engine: Database,
) -> None:
    memory, _, chat = await _owner(engine)
    events = (
        ("tool_call", "recall", "ok", 4.0, 1, 2, 1.5),
        ("tool_call", "list_events", "ok", 100.0, None, None, 1.6, "calendar"),
        ("tool_call", "list_events", "ok", 300.0, None, None, 1.7, "calendar"),
        ("tool_call", "list_events", "timeout", 30000.0, None, None, 1.8, "calendar"),
    )
    await memory.save_run(RunRecord(chat, 1.0, 2.0, "ok", events))
    report = await memory.report_rows()
    assert report["tools"] == [("recall", 1, 0)]
    assert report["served"] == [
        ("calendar", "list_events", "ok", 2, 200.0, 300.0),
        ("calendar", "list_events", "timeout", 1, 30000.0, 30000.0),
    ]


async def test_capture_never_takes_a_private_message_or_one_inside_an_interval(engine: Database) -> None:
    memory, owner, chat = await _owner(engine)
    group = await conversation(engine, owner, chat="g", kind="group")
    taken = await message(engine, chat, "normal before", at=1.0)
    segment = await open_segment(engine, chat, at=10.0)
    await message(engine, chat, "private", segment_id=segment, at=11.0)
    # A normal row inside the interval's span (a caller that forgot its segment): refused by the join, marked skipped.
    stray = await message(engine, chat, "stray inside", at=12.0)
    await message(engine, group, "in a group", at=13.0)

    pending = await memory.pending_capture(10)

    assert [(p.message_id, p.person_id, p.text) for p in pending] == [(taken, owner, "normal before")]
    assert await count(engine, "SELECT count(*) FROM messages WHERE capture = 'skipped' AND id = :m", m=stray) == 1
    await memory.skip_capture([taken])
    assert await memory.pending_capture(10) == []


async def test_a_capture_keeps_normal_sources_and_each_new_fact_once(engine: Database) -> None:
    memory, owner, chat = await _owner(engine)
    first = await message(engine, chat, "I moved to Lisbon")
    second = await message(engine, chat, "and I like tea")
    segment = await open_segment(engine, chat)
    private = await message(engine, chat, "secret", segment_id=segment)
    await memory.remember(owner, await conversation(engine, owner, chat="2"), "Likes tea", 0.5)

    note = await memory.save_capture(
        owner, "2026-01-01", "moved", ("lives in Lisbon", "likes TEA", "Lives in lisbon"), [first, second, private], 2.0
    )

    sources = await count(engine, "SELECT count(*) FROM note_sources WHERE note_id = :n", n=note)
    assert sources == 2
    assert [n.id for n in await memory.notes(owner)] == [note]
    facts = await count(engine, "SELECT count(*) FROM pad_entries WHERE lower(text) = 'lives in lisbon'")
    assert facts == 1
    attributed = await count(
        engine, "SELECT count(*) FROM pad_entries WHERE text = 'lives in Lisbon' AND conversation_id = :c", c=chat
    )
    assert attributed == 1  # every normal source came from `chat` (the private one counts as a source of it too)
    assert await count(engine, "SELECT count(*) FROM messages WHERE capture = 'done'") == 2


async def test_forgetting_by_words_ignores_case_and_reads_wildcards_as_text(engine: Database) -> None:
    memory, owner, chat = await _owner(engine)
    await memory.remember(owner, chat, "Likes 100% Tea", 1.0)
    await memory.remember(owner, chat, "likes 100 teas", 1.0)
    await memory.remember(owner, chat, "a_b", 1.0)

    assert await memory.forget_pad_matching(owner, chat, "100% TEA") == 1
    assert await memory.forget_pad_matching(owner, chat, "a%b") == 0
    assert await memory.forget_pad_matching(owner, chat, "A_B") == 1
    assert await count(engine, "SELECT count(*) FROM pad_entries") == 1


async def test_goals_and_follow_ups_change_only_the_persons_own(engine: Database) -> None:
    memory, owner, chat = await _owner(engine)
    other = await person(engine, "other")
    goal = await memory.add_goal(owner, chat, "run", 9.0, 1.0)
    watch = await memory.add_followup(owner, chat, "watch", "the game", None, 1.0)
    due = await memory.add_followup(owner, chat, "reminder", "call", 5.0, 1.0)

    assert not await memory.update_goal(other, chat, goal, 2.0, status="done")
    assert await memory.update_goal(owner, chat, goal, 2.0, title="run far")
    assert [(g.title, g.status) for g in await memory.goals(owner)] == [("run far", "active")]
    assert await memory.update_goal(owner, chat, goal, 3.0, status="done")
    assert await memory.goals(owner) == [] and len(await memory.goals(owner, include_closed=True)) == 1
    assert [f.id for f in await memory.followups(owner)] == [due, watch]  # undated last
    assert await memory.set_followup_status(owner, chat, due, "paused", 2.0)
    assert not await memory.set_followup_status(other, chat, watch, "cancelled", 2.0)
    assert [f.status for f in await memory.followups(owner)] == ["paused", "scheduled"]
    assert await memory.forget_pad_entry(owner, chat, 999) == 0


async def test_a_lasting_write_behind_a_segment_being_opened_is_refused(engine: Database) -> None:
    memory, owner, chat = await _owner(engine)

    remembered = await racing(memory.remember(owner, chat, "likes tea", 11.0), engine, chat)

    with pytest.raises(PrivateWriteRefused):
        await remembered
    assert await count(engine, "SELECT count(*) FROM pad_entries") == 0


async def test_recall_ignores_case_on_both_engines_and_matches_accents_as_written(engine: Database) -> None:
    # What both engines share: case folded, an accented word found as written. (FTS5 also folds diacritics,
    # PostgreSQL's 'simple' configuration does not: "cafe" finds "Café" on SQLite only, so no test asks it.)
    memory, owner, chat = await _owner(engine)
    said = await message(engine, chat, "Meet me at the Café Über")

    assert [h.ref for h in await memory.recall(owner, ("café",))] == [said]
    assert [h.ref for h in await memory.recall(owner, ("ÜBER",))] == [said]
