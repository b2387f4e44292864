"""QuoteQueries' contract (adapters/storage/quotes.py), the same tests on SQLite and on PostgreSQL: a quote read as
its mode may see it, and an edit kept in its message's own mode and interval."""

from __future__ import annotations

import pytest

from adapters.storage.engine import Database, Statement
from adapters.storage.quotes import QuoteQueries
from tests.adapters.store.interval_rows import column, conversation, message, scalar, segment, words

pytestmark = pytest.mark.engines


async def test_a_quote_of_a_private_message_carries_no_text_outside_its_interval(engine: Database) -> None:
    quotes = QuoteQueries(engine)
    c = await conversation(engine)
    await message(engine, c, "a normal word", key="1")
    interval = await segment(engine, c, ended_at=30.0)
    await message(engine, c, "a private word", segment_id=interval, key="2")
    other = await segment(engine, c)

    normal = await quotes.quoted_message(c, "2", visible_segment=None)
    elsewhere = await quotes.quoted_message(c, "2", visible_segment=other)
    inside = await quotes.quoted_message(c, "2", visible_segment=interval)

    assert normal is not None and normal.text is None
    assert elsewhere is not None and elsewhere.text is None
    assert inside is not None and inside.text == "a private word"
    quoted = await quotes.quoted_message(c, "1", visible_segment=other)
    assert quoted is not None and quoted.text == "a normal word"
    assert await quotes.quoted_message(c, "3", visible_segment=None) is None
    assert await quotes.visible_texts(c, "user", visible_segment=None, limit=5) == ["a normal word"]
    assert await quotes.visible_texts(c, "user", visible_segment=interval, limit=5) == [
        "a private word",
        "a normal word",
    ]


async def test_a_message_sent_inside_another_interval_is_known_to_be_private(engine: Database) -> None:
    quotes = QuoteQueries(engine)
    c = await conversation(engine)
    closed = await segment(engine, c, at=10.0, ended_at=20.0)
    await engine_restart(engine, closed, 25.0)
    living = await segment(engine, c, at=40.0)

    assert await quotes.private_interval_at(c, 24.0, visible_segment=None, margin=0.0)  # before its restart
    assert not await quotes.private_interval_at(c, 30.0, visible_segment=None, margin=0.0)
    assert await quotes.private_interval_at(c, 30.0, visible_segment=None, margin=6.0)  # the margin widens it
    assert await quotes.private_interval_at(c, 50.0, visible_segment=None, margin=0.0)  # open: on and on
    assert not await quotes.private_interval_at(c, 50.0, visible_segment=living, margin=0.0)  # its own is not another
    assert await quotes.conversation_of_chat("telegram", "1") == c
    assert await quotes.conversation_of_chat("telegram", "404") is None


async def engine_restart(engine: Database, segment_id: int, at: float) -> None:
    await engine.write(Statement("UPDATE segments SET restart_at = :at WHERE id = :s", {"at": at, "s": segment_id}))


async def test_an_edit_stays_in_its_messages_mode_and_interval(engine: Database) -> None:
    quotes = QuoteQueries(engine)
    c = await conversation(engine)
    normal = await message(engine, c, "normal", key="1")
    interval = await segment(engine, c)
    private = await message(engine, c, "private", segment_id=interval, key="2")

    # While the interval is open, a normal row is not changed (the words are private-mode input) ...
    assert not await quotes.edit_message(normal, None, "typed while private", 50.0)
    # ... a private row is, only as the row of its own interval, and its idle clock moves.
    assert not await quotes.edit_message(private, None, "moved to normal", 50.0)
    assert await quotes.edit_message(private, interval, "private, edited", 50.0)
    assert not await quotes.edit_message(private, interval, "private, edited", 51.0)  # unchanged: no edit

    assert await words(engine, "messages") == ["normal", "private, edited"]
    assert await column(engine, "SELECT segment_id FROM messages WHERE id = :m", m=private) == [interval]
    assert await scalar(engine, "SELECT last_activity_at FROM segments WHERE id = :s", s=interval) == 50.0


async def test_an_expired_intervals_message_is_never_editable(engine: Database) -> None:
    quotes = QuoteQueries(engine)
    c = await conversation(engine)
    interval = await segment(engine, c, ended_at=20.0, expires_at=60.0)
    private = await message(engine, c, "private", segment_id=interval, key="2")
    normal = await message(engine, c, "normal", key="3")

    assert (await quotes.editable_message(c, "2", 59.0)) is not None
    assert await quotes.editable_message(c, "2", 60.0) is None
    assert not await quotes.edit_message(private, interval, "kept alive?", 60.0)
    editable = await quotes.editable_message(c, "3", 60.0)
    assert editable is not None and editable.id == normal
    assert await quotes.edit_message(normal, None, "normal, edited", 60.0)  # no interval open: a normal edit


async def test_answered_since_sees_an_answer_and_no_newer_user_message(engine: Database) -> None:
    quotes = QuoteQueries(engine)
    c = await conversation(engine)
    asked = await message(engine, c, "asked", at=10.0)
    assert not await quotes.answered_since(c, asked, 10.0)
    await message(engine, c, "answer", role="assistant", at=11.0)
    assert await quotes.answered_since(c, asked, 10.0)
    await message(engine, c, "asked again", at=12.0)
    assert not await quotes.answered_since(c, asked, 10.0)
