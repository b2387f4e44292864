"""Nothing outlives a private interval (seed 001): expiry by cascade, and gone means gone."""

from __future__ import annotations

import pytest

from bot.bootstrap import build_companion
from core.values.errors import StoreError
from core.values.model import DeliveryTarget, ProactiveDecision, Summary
from tests.conftest import PASSPHRASE
from tests.helpers import engines
from tests.helpers.chat import all_rows, conversation_of, say, segments_of
from tests.helpers.reader import files_holding

pytestmark = [pytest.mark.engines, pytest.mark.privacy]

# Tables that by design never hold data derived from a private interval. Everything
# else must have a cascading foreign-key path to `segments`, so a table added later
# cannot escape expiry silently: this list is the one place to argue otherwise.
NEVER_PRIVATE = {
    "bindings": "no text; the mutator's INSERT refuses a conversation with an open segment",
    "schema_migrations": "migration names",
    "people": "owners; their private rows hang off segments",
    "accounts": "platform ids",
    "conversations": "owners of segments",
    "valve_attempts": "times of failed entries, no secret",
    "link_codes": "hashes of one-time link codes, no text; linking is refused while a conversation is private",
    "link_attempts": "times of wrong link codes, no code",
    "adapter_state": "platform offsets",
    "notes": "capture reads only normal rows (two checks, tests/core/test_memory.py)",
    "note_sources": "link notes to normal messages",
    "goals": "the store refuses the write while a conversation is private",
    "followups": "the store refuses the write while a conversation is private",
    "agent_runs": "private turns have no analytics context",
    "agent_events": "private turns have no analytics context",
    "artifacts": "a confirmed crossing: a new non-private artifact with its own retention",
    "proactive_people": (
        "manners and times, no text; the message trigger reads only normal rows, the commands refuse"
        " in private mode and their write passes the guard"
    ),
    "recall_fts": "private rows are never indexed (trigger WHEN clauses) nor matched (SQL predicates)",
    "recall_index": "PostgreSQL's recall_fts: the same triggers and WHEN clauses, the same predicates",
    "web_login_codes": "hashes of one-time sign-in codes, no text",
    "web_sessions": "hashes of session cookies, no text",
    "health_probe": "the readiness probe's one row: a time",
    "gateway_processes": "the running processes of a shared database: host, pid, times",
    "chat_claims": "which process answers a conversation: ids, a fence and a time, no text",
    "job_runs": "which process ran a scheduled job's slot: names, ids and times",
    "webhook_inbox": (
        "an update's JSON only until it is handled (then NULL, its row a tombstone of ids); its mode is not known"
        " before: sealed under a transit key on PostgreSQL (tests/adapters/store/test_inbox_contract.py)"
    ),
}


async def cascade_paths(stores) -> dict[str, set[str]]:
    parents: dict[str, set[str]] = {}
    for table in await engines.tables(stores):
        parents[table] = {
            parent for _, parent, on_delete in await engines.foreign_keys(stores, table) if on_delete == "CASCADE"
        }
    return parents


def reaches(parents: dict[str, set[str]], table: str, target: str, seen: frozenset = frozenset()) -> bool:
    if table == target:
        return True
    return any(reaches(parents, p, target, seen | {table}) for p in parents.get(table, ()) if p not in seen)


async def test_every_table_that_can_hold_private_derived_data_cascades_from_segments(stores):
    parents = await cascade_paths(stores)
    other_engines_recall = {"recall_fts", "recall_index"} - {engines.recall_table(stores)}
    assert set(NEVER_PRIVATE) - other_engines_recall <= set(parents), (
        "the allowlist names a table that no longer exists"
    )
    escaping = [t for t in parents if t not in NEVER_PRIVATE and not reaches(parents, t, "segments")]
    assert escaping == [], f"tables with no cascading path to segments: {escaping}"


async def populate_private(companion, stores, clock) -> int:
    """A private interval with a row in every table that hangs off it."""
    from core.values.model import Completion, ToolCall

    await say(companion, "normal before")
    await say(companion, f"/private {PASSPHRASE} 1h")
    companion.provider.script = [Completion("", (ToolCall("c1", "current_time", "{}"),)), Completion("ok")]
    await say(companion, "PRIVATE-EXPIRY-CANARY words")
    conversation = await conversation_of(companion)
    (segment,) = await segments_of(stores, conversation.id)
    await stores.timeline.save_summary(
        conversation.id,
        Summary("PRIVATE-EXPIRY-CANARY summary", 1),
        clock.now(),
        segment_id=segment.id,
        pad_person_id=conversation.person_id,
        pad_facts=("PRIVATE-EXPIRY-CANARY fact",),
    )
    await stores.lifetime.request_crossing(segment.id, "somewhere", clock.now(), clock.now() + 300)
    # The reply's delivery into its own private thread (pending: the platform was down).
    await stores.timeline.record_reply(
        conversation.id,
        "PRIVATE-EXPIRY-CANARY reply",
        clock.now(),
        segment_id=segment.id,
        target=DeliveryTarget("telegram", conversation.chat_id),
    )
    # The scheduler's decision that a reminder waits for normal mode names the segment.
    await stores.proactive.record_decision(
        ProactiveDecision(conversation.person_id, "reminder", "followup:1", "skipped", "private", "d", 0.0, segment.id)
    )
    return segment.id


async def test_every_dependent_row_goes_when_a_segment_expires(companion, stores, clock):
    segment_id = await populate_private(companion, stores, clock)
    parents = await cascade_paths(stores)
    dependent = [
        t
        for t in parents
        if t != "segments" and reaches(parents, t, "segments") and "segment_id" in await engines.columns(stores, t)
    ]
    assert set(dependent) >= {
        "messages",
        "summaries",
        "pad_entries",
        "tool_operations",
        "crossings",
        "proactive_decisions",
    }
    for table in dependent:
        assert await all_rows(stores, f"SELECT count(*) FROM {table} WHERE segment_id = ?", (segment_id,)) != [(0,)], (
            table
        )
    clock.advance(3601)
    assert await companion.sweep() == 1
    for table in dependent:
        assert await all_rows(stores, f"SELECT count(*) FROM {table} WHERE segment_id IS NOT NULL") == [(0,)], table
    assert await all_rows(stores, "SELECT text FROM messages WHERE kind = 'chat' AND role = 'user'") == [
        ("normal before",)
    ]


async def test_the_sweep_expires_intervals_before_anything_else_can_fail(companion, stores, clock, monkeypatch):
    await populate_private(companion, stores, clock)
    clock.advance(3601)

    async def refused(now: float) -> int:
        raise StoreError("artifacts unreachable")

    monkeypatch.setattr(stores.lifetime, "delete_expired_artifacts", refused)
    with pytest.raises(StoreError):
        await companion.sweep()
    assert await all_rows(stores, "SELECT count(*) FROM segments") == [(0,)]


@pytest.mark.sqlite_only("SQLite's file and WAL; PostgreSQL's files are test_postgres_shredding.py's (sealed text)")
async def test_private_text_is_gone_from_the_database_files_after_expiry(companion, stores, clock):
    await populate_private(companion, stores, clock)
    clock.advance(3601)
    await companion.sweep()
    files = [
        p for p in engines.sqlite_file(stores).parent.iterdir() if p.name.startswith(engines.sqlite_file(stores).name)
    ]
    assert any(p.name.endswith("-wal") for p in files)  # still open: the WAL is searched too
    assert files_holding(files, b"PRIVATE-EXPIRY-CANARY") == []


async def test_a_segment_that_expired_while_down_is_deleted_at_start_up(companion, stores, provider, clock):

    await populate_private(companion, stores, clock)
    clock.advance(7200)
    restarted = build_companion(stores, provider, companion.config, clock=clock)
    await restarted.start()
    assert await all_rows(stores, "SELECT count(*) FROM segments") == [(0,)]


async def test_expiry_during_a_conversation_deletes_the_interval_at_once(companion, stores, clock):
    await say(companion, f"/private {PASSPHRASE} 45s")
    await say(companion, "short-lived")
    clock.advance(46)
    await say(companion, "hello?")
    assert await all_rows(stores, "SELECT count(*) FROM segments") == [(0,)]
    assert await engines.ids_saying(stores, "messages", "short-lived") == []


async def test_never_means_kept_until_forgotten(companion, stores, clock):
    await say(companion, f"/private {PASSPHRASE} never")
    await say(companion, "kept")
    await say(companion, "/normal")
    clock.advance(400 * 86400)
    await companion.sweep()
    assert len(await engines.ids_saying(stores, "messages", "kept")) == 1
    reply = await say(companion, "/forget private")
    assert "1 private interval of this conversation was deleted now" in reply.text
    assert await engines.ids_saying(stores, "messages", "kept") == []


async def test_forget_private_works_inside_private_mode_and_ends_it(companion, stores):
    await say(companion, f"/private {PASSPHRASE}")
    await say(companion, "one")
    await say(companion, "/normal")
    await say(companion, f"/private {PASSPHRASE}")
    await say(companion, "two")
    reply = await say(companion, "/forget private")
    assert reply.text.startswith("Private mode is off, and 2 private intervals")
    assert await all_rows(stores, "SELECT count(*) FROM segments") == [(0,)]
    assert (await say(companion, "/mode")).text.startswith("You are in normal mode.")
