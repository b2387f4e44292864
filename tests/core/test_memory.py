"""Memory that serves normal mode (seed 001): tools per mode, capture, recall, analytics."""

from __future__ import annotations

import contextlib
import json
import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.storage.memory import fts_query
from core.memory.operations import default_tools, words_of
from core.memory.tools import PRIVATE_FORBIDDEN, ToolContext, ToolStores, run_tool_call
from core.turn.analytics import render_report
from core.values import copy
from core.values.errors import PrivateWriteRefused
from core.values.model import Completion, Note, ToolCall
from core.values.modes import NORMAL, PrivateState
from tests.conftest import PASSPHRASE
from tests.helpers import engines
from tests.helpers.chat import all_rows, conversation_of, say

pytestmark = [pytest.mark.engines, pytest.mark.privacy]

LASTING_TOOLS = {
    "remember",
    "recall",
    "forget",
    "list_goals",
    "set_goal",
    "update_goal",
    "schedule_followup",
    "watch_event",
    "list_followups",
    "pause_followup",
}


async def go_private(companion) -> None:
    reply = await say(companion, f"/private {PASSPHRASE} 1h")
    assert "Private mode is on" in reply.text


def tool_names(request) -> set[str]:
    return {t.name for t in request.tools}


async def test_a_private_turn_never_receives_memory_goal_or_followup_tools(companion, provider):
    await say(companion, "normal")
    assert tool_names(provider.last_reply_request()) >= LASTING_TOOLS
    await go_private(companion)
    await say(companion, "private")
    assert tool_names(provider.last_reply_request()).isdisjoint(LASTING_TOOLS)


def test_the_private_tool_set_is_decided_by_capability_tags_alone():
    # "A goal tool is hidden while scheduling tools remain exposed" cannot happen: every tool
    # is in the private set exactly when none of its tags is forbidden there.
    from core.values.model import Conversation, Segment

    registry = default_tools()
    conversation = Conversation(1, "terminal", "t", "direct", 1)
    private = PrivateState(Segment(1, 1, 0, 0.0, 0.0, None, None, None))
    private_names = {t.name for t in registry.tools_for(conversation, private)}
    for tool in registry.tools_for(conversation, NORMAL):  # the normal set is every tool
        assert (tool.name in private_names) == tool.tags.isdisjoint(PRIVATE_FORBIDDEN), tool.name
    assert {"memory-write", "memory-read", "goal", "follow-up", "export", "publish"} <= PRIVATE_FORBIDDEN
    assert private_names.isdisjoint(LASTING_TOOLS)
    assert {t.name for t in registry.tools_for(conversation, NORMAL)} >= LASTING_TOOLS


async def test_a_tool_call_for_a_withheld_tool_is_not_run_in_private_mode(companion, provider, stores):
    await go_private(companion)
    provider.script = [Completion("", (ToolCall("c1", "remember", '{"text": "PRIVATE-FACT"}'),)), Completion("ok")]
    await say(companion, "remember this")
    assert await all_rows(stores, "SELECT count(*) FROM pad_entries") == [(0,)]
    assert provider.requests[-1].messages[-1].content.startswith("error: no tool named 'remember'")


async def test_private_replies_are_never_pending_for_capture(companion, stores):
    await say(companion, "normal words")
    await go_private(companion)
    await say(companion, "private words")
    rows = await all_rows(stores, "SELECT mode, capture FROM messages WHERE kind = 'chat'")
    assert ("normal", "pending") in rows
    assert all(capture == "skipped" for mode, capture in rows if mode == "private")


async def test_capture_turns_normal_messages_into_daily_notes_and_pad_facts(companion, stores, provider):
    provider.script = [Completion("ok")]
    await say(companion, "my sister is Ana")
    provider.script = [Completion("NOTE:\nTalked about family.\nFACTS:\n- has a sister named Ana")]
    assert await companion.capture.run_once() == 2
    conversation = await conversation_of(companion)
    assert await stores.memory.notes(conversation.person_id) == [Note(1, "2027-01-15", "Talked about family.")]
    assert [e.text for e in await stores.timeline.normal_pad(conversation.person_id)] == ["has a sister named Ana"]
    assert await all_rows(stores, "SELECT DISTINCT capture FROM messages WHERE kind = 'chat'") == [("done",)]
    assert await companion.capture.run_once() == 0  # nothing captured twice


async def test_capture_never_sees_private_text_even_when_a_caller_forgot_the_mark(companion, stores, provider, clock):
    await go_private(companion)
    clock.advance(5)
    await say(companion, "PRIVATE-CANARY in the segment")
    clock.advance(5)
    conversation = await conversation_of(companion)
    # A buggy future writer stores private-time text as a normal, pending row.
    await engines.rows(
        stores,
        "INSERT INTO messages (conversation_id, mode, role, kind, text, capture, created_at)"
        " VALUES (?, 'normal', 'user', 'chat', 'FORGOTTEN-MARK-CANARY', 'pending', ?)",
        (conversation.id, clock.now()),
    )
    clock.advance(5)
    await say(companion, "/normal")
    clock.advance(5)
    await say(companion, "normal again")
    await companion.capture.run_once()
    capture_inputs = [r for r in provider.requests if r.purpose == "capture"]
    assert any("normal again" in (m.content or "") for r in capture_inputs for m in r.messages)
    assert all("CANARY" not in (m.content or "") for r in capture_inputs for m in r.messages)
    assert await all_rows(stores, "SELECT capture FROM messages WHERE text = 'FORGOTTEN-MARK-CANARY'") == [("skipped",)]


async def test_capture_while_an_interval_is_still_open_never_sees_a_mismarked_row_inside_it(
    companion, stores, provider, clock
):
    await say(companion, "normal before")
    await go_private(companion)
    clock.advance(5)
    conversation = await conversation_of(companion)
    # A buggy future writer stores private-time text as a normal, pending row; the interval stays open.
    await engines.rows(
        stores,
        "INSERT INTO messages (conversation_id, mode, role, kind, text, capture, created_at)"
        " VALUES (?, 'normal', 'user', 'chat', 'OPEN-SPAN-CANARY', 'pending', ?)",
        (conversation.id, clock.now()),
    )
    await companion.capture.run_once()
    capture_inputs = [m.content or "" for r in provider.requests if r.purpose == "capture" for m in r.messages]
    assert all("OPEN-SPAN-CANARY" not in text for text in capture_inputs)
    assert await all_rows(stores, "SELECT capture FROM messages WHERE text = 'OPEN-SPAN-CANARY'") == [("skipped",)]


async def test_recall_never_returns_private_messages_even_when_they_match_best(companion, stores):
    await say(companion, "we talked about zebra once")
    await go_private(companion)
    await say(companion, "zebra zebra zebra zebra private")
    await say(companion, "/normal")
    reply = await say(companion, "/recall zebra")
    assert "we talked about zebra once" in reply.text and "private" not in reply.text


async def test_the_recall_privacy_predicate_is_inside_the_sql(companion, stores):
    await go_private(companion)
    await say(companion, "okapi secret")
    await say(companion, "/normal")
    conversation = await conversation_of(companion)
    (private_id,) = await engines.ids_saying(stores, "messages", "okapi secret")
    # Simulate an index that wrongly holds the private row: the recall statement itself refuses it.
    await engines.plant_in_recall(stores, "message", private_id, conversation.person_id, "okapi secret")
    assert await stores.memory.recall(conversation.person_id, words_of("okapi")) == []


async def test_recall_never_returns_a_private_pad_entry_even_when_the_index_holds_it(companion, stores, clock):
    await say(companion, "/remember the walrus is grey")
    await go_private(companion)
    conversation = await conversation_of(companion)
    (segment_id,) = (await all_rows(stores, "SELECT id FROM segments"))[0]
    # A private pad fact, the way a private fold writes it ...
    await engines.plant(
        stores,
        "INSERT INTO pad_entries (person_id, segment_id, mode, text, created_at) VALUES (?, ?, 'private', ?, ?)",
        (
            conversation.person_id,
            segment_id,
            engines.sealed(stores, segment_id, "pad_entries.text", "the walrus is a secret"),
            clock.now(),
        ),
    )
    (private_id,) = (await all_rows(stores, "SELECT id FROM pad_entries WHERE mode = 'private'"))[0]
    # ... and an index that wrongly holds it: the recall statement itself must refuse it.
    await engines.plant_in_recall(stores, "pad", private_id, conversation.person_id, "the walrus is a secret")
    hits = await stores.memory.recall(conversation.person_id, words_of("walrus"))
    assert [h.text for h in hits] == ["the walrus is grey"]


async def test_the_recall_tool_never_hands_the_model_private_text_even_when_the_index_holds_it(
    companion, stores, provider, clock
):
    await say(companion, "/remember the heron is blue")
    await go_private(companion)
    await say(companion, "heron secret message")
    await say(companion, "/normal")
    conversation = await conversation_of(companion)
    (segment_id,) = (await all_rows(stores, "SELECT id FROM segments"))[0]
    await engines.plant(
        stores,
        "INSERT INTO pad_entries (person_id, segment_id, mode, text, created_at) VALUES (?, ?, 'private', ?, ?)",
        (
            conversation.person_id,
            segment_id,
            engines.sealed(stores, segment_id, "pad_entries.text", "heron secret fact"),
            clock.now(),
        ),
    )
    # An index that wrongly holds both private rows: only the recall statement stands in the way.
    ((message_id,), (pad_id,)) = (
        await engines.ids_saying(stores, "messages", "heron secret message"),
        [r[0] for r in await all_rows(stores, "SELECT id FROM pad_entries WHERE mode = 'private'")],
    )
    await engines.plant_in_recall(stores, "message", message_id, conversation.person_id, "heron secret message")
    await engines.plant_in_recall(stores, "pad", pad_id, conversation.person_id, "heron secret fact")
    provider.script = [Completion("", (ToolCall("c1", "recall", '{"query": "heron"}'),)), Completion("ok")]
    await say(companion, "what do you know about herons?")
    result = provider.requests[-1].messages[-1].content
    assert "the heron is blue" in result and "secret" not in result


async def test_private_messages_never_enter_the_recall_index(companion, stores):
    await go_private(companion)
    await say(companion, "quokka in private")
    assert await engines.recall_hits(stores, "quokka") == 0


async def test_no_event_row_exists_for_a_private_run(companion, stores, provider):
    await say(companion, "normal turn")
    before = (
        await all_rows(stores, "SELECT count(*) FROM agent_runs"),
        await all_rows(stores, "SELECT count(*) FROM agent_events"),
    )
    await go_private(companion)
    provider.script = [Completion("", (ToolCall("c1", "current_time", "{}"),)), Completion("ok")]
    await say(companion, "private turn with a tool")
    provider.fail_all = True
    await say(companion, "private turn that fails")
    after = (
        await all_rows(stores, "SELECT count(*) FROM agent_runs"),
        await all_rows(stores, "SELECT count(*) FROM agent_events"),
    )
    assert before == after


async def test_structural_error_events_hold_no_private_ids_or_text(companion, stores, provider):
    await go_private(companion)
    provider.fail_all = True
    await say(companion, "PRIVATE-ERROR-CANARY")
    await say(companion, "/normal")
    await say(companion, "normal failing turn")
    provider.fail_all = False
    segment_ids = {r[0] for r in await all_rows(stores, "SELECT id FROM segments")}
    private_message_ids = {r[0] for r in await all_rows(stores, "SELECT id FROM messages WHERE mode = 'private'")}
    events = await all_rows(stores, "SELECT * FROM agent_events")
    runs = await all_rows(stores, "SELECT * FROM agent_runs")
    assert [e[2:4] for e in events if e[2] == "error"] == [("error", "ProviderUnavailable")]
    assert len(runs) == 1  # only the normal turn has a run
    flat = " ".join(map(str, events + runs))
    assert "CANARY" not in flat and "normal failing turn" not in flat
    # The only ids an event carries are its own and its run's: no segment, message or operation ids.
    columns = await engines.columns(stores, "agent_events")
    assert not {"segment_id", "message_id", "operation_id", "conversation_id"} & set(columns)
    assert segment_ids and private_message_ids


async def test_remember_recall_and_memory_work_together_in_normal_mode(companion):
    assert (await say(companion, "/remember my sister is Ana")).text.startswith("Remembered (#1)")
    assert "my sister is Ana" in (await say(companion, "/recall Ana")).text
    assert "#1 my sister is Ana" in (await say(companion, "/memory")).text
    assert (await say(companion, "/forget 1")).text == "Forgot memory #1."
    assert "my sister is Ana" not in (await say(companion, "/memory")).text


async def test_the_remember_tool_writes_the_normal_pad(companion, provider, stores):
    provider.script = [
        Completion("", (ToolCall("c1", "remember", '{"text": "likes green tea"}'),)),
        Completion("Noted."),
    ]
    await say(companion, "remember that I like green tea")
    conversation = await conversation_of(companion)
    assert [e.text for e in await stores.timeline.normal_pad(conversation.person_id)] == ["likes green tea"]
    assert await all_rows(stores, "SELECT tool, status FROM tool_operations") == [("remember", "ok")]


async def test_lasting_commands_are_refused_in_private_mode_with_the_reason(companion, stores):
    await go_private(companion)
    for command in (
        "/remember x",
        "/recall x",
        "/forget x",
        "/goals",
        "/goal x",
        "/followups",
        "/followup 2h x",
        "/watch x",
    ):
        reply = await say(companion, command)
        assert "Private mode writes nothing that outlives it" in reply.text, command
    for table in ("pad_entries", "goals", "followups", "notes"):
        assert await all_rows(stores, f"SELECT count(*) FROM {table}") == [(0,)]


async def test_commands_sent_in_private_mode_leave_normal_memory_as_it_was(companion, stores):
    await say(companion, "/remember my sister is Ana")
    await say(companion, "/goal run 5k")
    await say(companion, "/followup in 2h call mum")
    lasting = "SELECT 'pad', text FROM pad_entries UNION ALL SELECT 'goal', title || status FROM goals"
    lasting += " UNION ALL SELECT 'followup', text || status FROM followups ORDER BY 1, 2"
    before = await all_rows(stores, lasting)
    await go_private(companion)
    for command in ("/forget 1", "/forget Ana", "/goal done 1", "/goal drop 1", "/followup cancel 1"):
        await say(companion, command)
    assert await all_rows(stores, lasting) == before


async def test_the_store_refuses_lasting_writes_while_the_conversation_is_private(companion, stores, clock):
    await go_private(companion)
    conversation = await conversation_of(companion)
    person, at = conversation.person_id, clock.now()
    for write in (  # each coroutine is created where it is awaited: a failure leaves none unawaited
        lambda: stores.memory.remember(person, conversation.id, "x", at),
        lambda: stores.memory.add_goal(person, conversation.id, "x", None, at),
        lambda: stores.memory.add_followup(person, conversation.id, "reminder", "x", None, at),
    ):
        with pytest.raises(PrivateWriteRefused):
            await write()


async def test_a_goal_or_follow_up_update_is_refused_while_the_conversation_is_private(companion, stores, clock):
    await say(companion, "/goal run 5k")
    await say(companion, "/followup in 2h call mum")
    await go_private(companion)
    conversation = await conversation_of(companion)
    person, origin = conversation.person_id, conversation.id
    # Refused either way the store says it (False, or PrivateWriteRefused): what counts is that nothing changed.
    for update in (
        lambda: stores.memory.update_goal(person, origin, 1, clock.now(), status="done"),
        lambda: stores.memory.update_goal(person, origin, 1, clock.now(), title="PRIVATE-TITLE-CANARY"),
        lambda: stores.memory.set_followup_status(person, origin, 1, "cancelled", clock.now()),
    ):
        with contextlib.suppress(PrivateWriteRefused):
            assert await update() is False
    assert await all_rows(stores, "SELECT title, status FROM goals") == [("run 5k", "active")]
    assert await all_rows(stores, "SELECT status FROM followups") == [("scheduled",)]


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("remember", {"text": "RACE-CANARY"}),
        ("set_goal", {"title": "RACE-CANARY"}),
        ("update_goal", {"goal_id": 1, "title": "RACE-CANARY"}),
        ("schedule_followup", {"text": "RACE-CANARY", "when": "2h"}),
        ("watch_event", {"description": "RACE-CANARY"}),
        ("pause_followup", {"followup_id": 1}),
    ],
)
async def test_a_memory_tool_call_racing_a_private_entry_changes_nothing(companion, stores, clock, tool, arguments):
    await say(companion, "/goal run 5k")
    await say(companion, "/followup in 2h call mum")
    conversation = await conversation_of(companion)
    lasting = "SELECT 'pad', text FROM pad_entries UNION ALL SELECT 'goal', title || status FROM goals"
    lasting += " UNION ALL SELECT 'followup', text || status FROM followups ORDER BY 1, 2"
    before = await all_rows(stores, lasting)
    offered = default_tools().tools_for(conversation, NORMAL)  # a normal turn was offered its tools ...
    await stores.modes.open_segment(conversation.id, clock.now(), None)  # ... then private mode opened elsewhere
    context = ToolContext(
        conversation, NORMAL, clock.now(), "UTC", ToolStores(stores.memory, stores.timeline, stores.links)
    )
    result = await run_tool_call(offered, ToolCall("c1", tool, json.dumps(arguments)), context)
    assert await all_rows(stores, lasting) == before, result


@pytest.mark.parametrize(
    "command",
    [
        "/followup someday call",
        "/goal done abc",
        "/forget",
        "/remember",
        "/followup 2h",
        "/recall ???",
        "/followup pause x",
    ],
)
async def test_bad_arguments_give_a_clear_message_and_change_nothing(companion, stores, command):
    reply = await say(companion, command)
    assert reply.text.startswith("Usage") or "Nothing changed" in reply.text or "There is no" in reply.text
    for table in ("pad_entries", "goals", "followups"):
        assert await all_rows(stores, f"SELECT count(*) FROM {table}") == [(0,)]


async def test_goals_and_followups_round_trip(companion):
    assert (await say(companion, "/goal run 5k")).text == "Goal #1 set: run 5k"
    assert (await say(companion, "/goals")).text == "#1 run 5k"
    assert (await say(companion, "/goal done 1")).text == "Goal #1 updated."
    assert (await say(companion, "/goals")).text == "No active goals."
    assert "scheduled for" in (await say(companion, "/followup in 2h call mum")).text
    assert "Watching for #2" in (await say(companion, "/watch the job interview")).text
    assert (await say(companion, "/followup pause 1")).text == "Follow-up #1 paused."
    listing = (await say(companion, "/followups")).text
    assert "call mum (paused)" in listing and "when it happens: the job interview" in listing
    assert (await say(companion, "/followup cancel 2")).text == "Follow-up #2 cancelled."


async def test_tool_operations_are_owned_by_their_conversation(companion, provider, stores):
    provider.script = [Completion("", (ToolCall("c1", "current_time", "{}"),)), Completion("ok")]
    await say(companion, "time?")
    await engines.rows(stores, "DELETE FROM conversations")
    for table in ("tool_operations", "agent_runs", "agent_events", "messages"):
        assert await all_rows(stores, f"SELECT count(*) FROM {table}") == [(0,)], table


async def test_report_counts_turns_tools_errors_and_latency_without_text(companion, provider, stores):
    provider.script = [Completion("", (ToolCall("c1", "current_time", "{}"),)), Completion("REPLY-TEXT")]
    await say(companion, "USER-TEXT")
    provider.fail_all = True
    await say(companion, "another")
    report = render_report(await stores.memory.report_rows())
    assert "turns: 2 (1 answered, 1 failed)" in report
    assert "current_time: 1 (0 failed)" in report and "ProviderUnavailable: 1" in report
    assert "provider latency ms: p50" in report
    assert "USER-TEXT" not in report and "REPLY-TEXT" not in report


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80))
def test_any_text_becomes_a_safe_fts_query(text):
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize = 'unicode61 remove_diacritics 2')")
    db.executemany("INSERT INTO t (x) VALUES (?)", [("alpha beta",), ('quote " and star *',), ("NEAR AND OR NOT",)])
    words = words_of(text)
    if not words:
        return
    query = fts_query(words)
    db.execute("SELECT x FROM t WHERE t MATCH ?", (query,)).fetchall()  # never a syntax error


@pytest.mark.parametrize("text", ['"', "a OR", "NOT x", "x*", "col:x", "NEAR(a b)", "(", "a AND", "^x", "-x", "{x}"])
def test_fts_operators_typed_by_a_person_are_only_words(text):
    words = words_of(text)
    query = fts_query(words) if words else None
    assert query is None or all(part.startswith('"') and part.endswith('"') for part in query.split(" OR "))


async def test_report_counts_replies_cut_off_at_max_tokens(companion, provider, stores):
    provider.script = [Completion("a long answer that stops", truncated=True), Completion("a whole answer")]
    reply = await say(companion, "tell me everything")
    assert reply.text.endswith(copy.CUT_OFF_MARKER.strip())
    await say(companion, "and briefly?")
    assert "replies cut off at max_tokens: 1" in render_report(await stores.memory.report_rows())
