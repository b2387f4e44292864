"""The store's one guard of lasting writes (adapters/storage/guard.py): while a conversation has
an open private segment, every write that would outlive the segment raises PrivateWriteRefused
and changes nothing; a missing row is still told apart from a refusal."""

from __future__ import annotations

import pytest

from core.values.errors import PrivateWriteRefused
from core.values.model import ConversationKey, RunRecord
from tests.helpers import engines

pytestmark = [pytest.mark.engines, pytest.mark.privacy]

NOW = 1_000.0


@pytest.fixture
async def chat(stores):
    """A person's direct conversation with a goal, a follow-up and a memory, then a private segment."""
    account = await stores.timeline.ensure_account("terminal", "owner", None, NOW)
    conversation = await stores.timeline.ensure_conversation(
        ConversationKey("terminal", "t"), "direct", account.person_id, NOW
    )
    person = account.person_id
    ids = {
        "goal": await stores.memory.add_goal(person, conversation.id, "run 5k", None, NOW),
        "followup": await stores.memory.add_followup(person, conversation.id, "reminder", "call mum", NOW + 60, NOW),
        "memory": await stores.memory.remember(person, conversation.id, "sister is Ana", NOW),
    }
    segment = await stores.modes.open_segment(conversation.id, NOW, None)
    return person, conversation, segment, ids


async def rows(stores, sql: str) -> list[tuple]:
    return [tuple(r) for r in await engines.rows(stores, sql)]


async def test_update_goal_while_private_is_refused_not_reported_missing(stores, chat):
    person, conversation, _, ids = chat
    with pytest.raises(PrivateWriteRefused):
        await stores.memory.update_goal(person, conversation.id, ids["goal"], NOW, status="done", title="changed")
    assert await rows(stores, "SELECT title, status FROM goals") == [("run 5k", "active")]
    # A goal that does not exist is refused the same way while private: the refusal comes first.
    with pytest.raises(PrivateWriteRefused):
        await stores.memory.update_goal(person, conversation.id, 999, NOW, status="done")


async def test_set_followup_status_while_private_is_refused_not_reported_missing(stores, chat):
    person, conversation, _, ids = chat
    with pytest.raises(PrivateWriteRefused):
        await stores.memory.set_followup_status(person, conversation.id, ids["followup"], "cancelled", NOW)
    assert await rows(stores, "SELECT status FROM followups") == [("scheduled",)]


async def test_forget_pad_entry_while_private_is_refused(stores, chat):
    person, conversation, _, ids = chat
    with pytest.raises(PrivateWriteRefused):
        await stores.memory.forget_pad_entry(person, conversation.id, ids["memory"])
    assert await rows(stores, "SELECT text FROM pad_entries") == [("sister is Ana",)]


async def test_forget_pad_matching_while_private_is_refused(stores, chat):
    person, conversation, _, _ = chat
    with pytest.raises(PrivateWriteRefused):
        await stores.memory.forget_pad_matching(person, conversation.id, "Ana")
    assert await rows(stores, "SELECT text FROM pad_entries") == [("sister is Ana",)]


async def test_forget_note_while_private_is_refused(stores, chat):
    person, conversation, segment, _ = chat
    await stores.modes.close_segment(segment.id, NOW, "normal")
    note = await stores.memory.save_capture(person, "2027-01-15", "Talked about the harbour.", (), [], NOW)
    await stores.modes.open_segment(conversation.id, NOW, None)
    with pytest.raises(PrivateWriteRefused):
        await stores.memory.forget_note(person, conversation.id, note)
    assert await rows(stores, "SELECT text FROM notes") == [("Talked about the harbour.",)]


async def test_every_lasting_addition_while_private_is_refused(stores, chat):
    person, conversation, _, _ = chat
    writes = {  # called one at a time, so a failure leaves no coroutine unawaited
        "memory": lambda: stores.memory.remember(person, conversation.id, "x", NOW),
        "goal": lambda: stores.memory.add_goal(person, conversation.id, "x", None, NOW),
        "follow-up": lambda: stores.memory.add_followup(person, conversation.id, "watch", "x", None, NOW),
    }
    for what, write in writes.items():
        with pytest.raises(PrivateWriteRefused, match=f"writes no {what}$"):
            await write()
    assert await rows(stores, "SELECT count(*) FROM pad_entries WHERE text = 'x'") == [(0,)]
    assert await rows(stores, "SELECT (SELECT count(*) FROM goals) + (SELECT count(*) FROM followups)") == [(2,)]


async def test_an_analytics_run_while_private_is_refused_with_its_whole_transaction(stores, chat):
    _, conversation, _, _ = chat
    run = RunRecord(conversation.id, NOW, NOW + 1, "ok", (("tool_call", "x", "ok", 1.0, 1, 1, NOW),))
    with pytest.raises(PrivateWriteRefused):
        await stores.memory.save_run(run)
    with pytest.raises(PrivateWriteRefused):
        await stores.timeline.add_message(conversation.id, "user", "hello", NOW, run=run)
    assert await rows(stores, "SELECT (SELECT count(*) FROM agent_runs) + (SELECT count(*) FROM messages)") == [(0,)]


async def test_a_reply_while_a_segment_is_stuck_open_is_kept_without_its_analytics_run(stores, chat):
    """The valve holds a conversation in normal mode when closing its segment failed; the answer of
    such a turn is written, and only its run (a lasting row) is left out by the guard."""
    _, conversation, _, _ = chat
    run = RunRecord(conversation.id, NOW, NOW + 1, "ok", (("tool_call", "x", "ok", 1.0, 1, 1, NOW),))
    recorded = await stores.timeline.record_reply(conversation.id, "reply", NOW, stored_text="reply", run=run)
    assert recorded.message_id is not None
    assert await rows(stores, "SELECT count(*) FROM agent_runs") == [(0,)]
    assert await rows(stores, "SELECT text FROM messages") == [("reply",)]


async def test_a_tool_operation_outside_the_open_segment_is_refused_and_one_inside_it_is_kept(stores, chat):
    _, conversation, segment, _ = chat
    with pytest.raises(PrivateWriteRefused):
        await stores.memory.record_tool_operation(conversation.id, None, "current_time", "ok", 2, 10, NOW)
    await stores.memory.record_tool_operation(conversation.id, segment.id, "current_time", "ok", 2, 10, NOW)
    assert await rows(stores, "SELECT segment_id FROM tool_operations") == [(segment.id,)]


async def test_writes_of_the_segment_itself_are_allowed_while_it_is_open(stores, chat):
    _, conversation, segment, _ = chat
    await stores.timeline.add_message(conversation.id, "user", "private words", NOW, segment_id=segment.id)
    await stores.timeline.record_reply(conversation.id, "reply", NOW, stored_text="reply", segment_id=segment.id)
    assert await rows(stores, "SELECT count(*) FROM messages WHERE segment_id IS NOT NULL") == [(2,)]


async def test_the_guard_refuses_only_while_the_segment_is_open_and_only_its_conversation(stores, chat):
    person, conversation, segment, ids = chat
    other = await stores.timeline.ensure_conversation(ConversationKey("terminal", "other"), "direct", person, NOW)
    assert await stores.memory.update_goal(person, other.id, ids["goal"], NOW, status="done")  # another chat is normal
    await stores.modes.close_segment(segment.id, NOW + 1, "normal")
    assert await stores.memory.set_followup_status(person, conversation.id, ids["followup"], "paused", NOW)
    assert await stores.memory.forget_pad_entry(person, conversation.id, ids["memory"]) == 1
    # Back in normal mode, a goal that does not exist is reported missing, not refused.
    assert await stores.memory.update_goal(person, conversation.id, 999, NOW, status="done") is False
