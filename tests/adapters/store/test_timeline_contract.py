"""TimelineQueries' contract (adapters/storage/timeline.py), the same tests on SQLite and on PostgreSQL: people,
conversations, the timeline's writes, summaries and pads, each as the mode it is read in may see it."""

from __future__ import annotations

import pytest

from adapters.storage.engine import Database, Statement
from adapters.storage.modes import ModeQueries
from adapters.storage.timeline import TimelineQueries
from core.values.errors import PrivateWriteRefused
from core.values.model import ConversationKey, RunRecord, Summary
from tests.adapters.store.interval_rows import column, conversation, message, person, scalar, segment, words

pytestmark = pytest.mark.engines

RUN = ("provider_call", "model", "ok", 12.0, 3, 4, 1.0)


async def test_normal_mode_reads_a_placeholder_not_the_private_rows(engine: Database) -> None:
    timeline = TimelineQueries(engine)
    c = await conversation(engine)
    before = await message(engine, c, "normal before")
    interval = await segment(engine, c, ended_at=30.0)
    await message(engine, c, "a private word", segment_id=interval)
    after = await message(engine, c, "normal after")

    items = await timeline.view(c, visible_segment=None, after=0, limit=10)
    assert [(i.position, i.text, i.masked_segment_id) for i in items] == [
        (before, "normal before", None),
        (before, None, interval),
        (after, "normal after", None),
    ]
    # What decides a fold counts the view's messages only: never the private rows in normal mode.
    normal = await timeline.context_reads(c, person_id=None, segment_id=None, limit=10, count_up_to=10)
    assert normal.messages_after == 2
    assert [i.text for i in normal.items] == [i.text for i in items]
    own = await timeline.context_reads(c, person_id=None, segment_id=interval, limit=10, count_up_to=10)
    assert own.messages_after == 3


async def test_a_private_message_is_never_captured_and_moves_its_intervals_idle_clock(engine: Database) -> None:
    timeline = TimelineQueries(engine)
    c = await conversation(engine)
    interval = await segment(engine, c)
    stored = await timeline.add_message(c, "user", "a private word", 40.0, segment_id=interval)
    normal = await timeline.add_message(c, "user", "a normal word", 41.0)

    captures = "SELECT capture FROM messages WHERE id = :m"
    assert await column(engine, captures, m=stored) == ["skipped"]
    assert await column(engine, captures, m=normal) == ["pending"]
    assert await scalar(engine, "SELECT last_activity_at FROM segments WHERE id = :s", s=interval) == 40.0


async def test_a_redelivered_message_is_stored_once(engine: Database) -> None:
    timeline = TimelineQueries(engine)
    c = await conversation(engine)
    interval = await segment(engine, c)
    first = await timeline.add_message(c, "user", "once", 40.0, segment_id=interval, platform_message_id="7")
    again = await timeline.add_message(c, "user", "once", 45.0, segment_id=interval, platform_message_id="7")

    assert first is not None and again is None
    assert await scalar(engine, "SELECT count(*) FROM messages") == 1
    assert await scalar(engine, "SELECT last_activity_at FROM segments WHERE id = :s", s=interval) == 40.0


async def test_a_message_assumed_normal_is_never_stored_while_a_segment_is_open(engine: Database) -> None:
    # The gate's fast path (core/turn/gate.py): normal mode assumed, not read. The write itself refuses it whole
    # while the conversation has an open segment, whatever the caller believed; the words are stored nowhere.
    timeline = TimelineQueries(engine)
    c = await conversation(engine)
    stored = await timeline.add_inbound(
        c, "normal words", 10.0, segment_id=None, account_id=None, platform_message_id="1", assumed_normal=True
    )
    assert stored is not None
    await segment(engine, c)

    with pytest.raises(PrivateWriteRefused):
        await timeline.add_inbound(
            c, "a secret word", 11.0, segment_id=None, account_id=None, platform_message_id="2", assumed_normal=True
        )
    with pytest.raises(ValueError, match="assumed normal"):
        await timeline.add_inbound(
            c, "a secret word", 11.0, segment_id=1, account_id=None, platform_message_id="2", assumed_normal=True
        )

    assert await words(engine, "messages") == ["normal words"]  # the recall index is fed by these rows alone


async def test_an_analytics_run_is_never_written_while_the_conversation_is_private(engine: Database) -> None:
    timeline = TimelineQueries(engine)
    c = await conversation(engine)
    run = RunRecord(c, 1.0, 2.0, "ok", (RUN,))
    assert await timeline.add_message(c, "assistant", "normal", 2.0, run=run, platform_message_id="a") is not None
    await segment(engine, c)

    with pytest.raises(PrivateWriteRefused):
        await timeline.add_message(c, "assistant", "written normal while private", 3.0, run=run)
    with pytest.raises(ValueError, match="analytics"):
        await timeline.add_message(c, "assistant", "private", 3.0, run=run, segment_id=1)

    assert await scalar(engine, "SELECT count(*) FROM agent_runs") == 1
    assert await scalar(engine, "SELECT count(*) FROM agent_events") == 1
    assert await column(engine, "SELECT text FROM messages") == ["normal"]


async def test_a_private_summary_and_its_facts_stay_in_their_interval(engine: Database) -> None:
    timeline = TimelineQueries(engine)
    who = await person(engine)
    c = await conversation(engine, who=who)
    other = await conversation(engine, "2", platform="discord", who=who)
    interval = await segment(engine, c)
    elsewhere = await segment(engine, other)
    await timeline.save_summary(c, Summary("normal", 1), 10.0)
    await timeline.save_summary(c, Summary("normal, later", 2), 11.0)
    await timeline.save_summary(
        c, Summary("private", 3), 12.0, segment_id=interval, pad_person_id=who, pad_facts=("a fact", "a fact")
    )
    await timeline.save_summary(other, Summary("private too", 4), 12.0, segment_id=elsewhere)

    assert await timeline.normal_summary(c) == Summary("normal, later", 2)
    assert await timeline.private_summary(interval) == Summary("private", 3)
    assert await timeline.normal_summary(other) is None
    assert await timeline.normal_pad(who) == []  # a private fact never reaches the normal pad
    assert [e.text for e in await timeline.private_pad(who, c)] == ["a fact"]
    assert await timeline.private_pad(who, other) == []  # nor another conversation's private mode


async def test_people_and_conversations_are_made_once(engine: Database) -> None:
    timeline = TimelineQueries(engine)
    account = await timeline.ensure_account("telegram", "42", "Ann", 1.0)
    assert await timeline.ensure_account("telegram", "42", "Ann again", 2.0) == account
    key = ConversationKey("telegram", "42")
    made = await timeline.ensure_conversation(key, "direct", account.person_id, 1.0)
    group = await timeline.ensure_conversation(ConversationKey("telegram", "-5"), "group", account.person_id, 1.0)

    assert await timeline.ensure_conversation(key, "direct", account.person_id, 2.0) == made
    assert await timeline.conversation_at(key) == made
    assert await timeline.conversation_at(ConversationKey("discord", "42")) is None
    assert group.person_id is None  # a group belongs to no person
    assert await timeline.conversations_of(account.person_id) == [made]
    assert await scalar(engine, "SELECT count(*) FROM people") == 1


async def test_a_private_turn_is_never_an_open_turn_to_answer_after_a_restart(engine: Database) -> None:
    timeline = TimelineQueries(engine)
    c = await conversation(engine)
    discord = await conversation(engine, "d", platform="discord")
    interval = await segment(engine, c)
    normal = await timeline.add_message(c, "user", "normal", 1.0)
    private = await timeline.add_message(c, "user", "private", 2.0, segment_id=interval)
    other = await timeline.add_message(discord, "user", "elsewhere", 2.0)
    await engine.write(Statement("UPDATE messages SET turn = 'open'"))

    assert [t.message_id for t in await timeline.open_turns(frozenset({"telegram"}))] == []
    assert [t.message_id for t in await timeline.open_turns(None)] == [other]
    assert await timeline.turn_is_open(private) and await timeline.turn_is_open(normal)


@pytest.mark.parametrize("write", ["user message", "reply", "other message"])
async def test_every_private_write_extends_the_segments_idle_clock(engine: Database, write: str) -> None:
    timeline, modes = TimelineQueries(engine), ModeQueries(engine)
    conversation = await timeline.ensure_conversation(ConversationKey("terminal", "t"), "direct", None, 0.0)
    segment = await modes.open_segment(conversation.id, 0.0, None)
    if write == "user message":
        await timeline.add_inbound(
            conversation.id, "x", 500.0, segment_id=segment.id, account_id=None, platform_message_id="m1"
        )
    elif write == "reply":
        await timeline.record_reply(conversation.id, "x", 500.0, stored_text="x", segment_id=segment.id)
    else:
        await timeline.add_message(conversation.id, "assistant", "x", 500.0, segment_id=segment.id)
    opened = await modes.open_segment_of(conversation.id)
    assert opened is not None and opened.last_activity_at == 500.0
