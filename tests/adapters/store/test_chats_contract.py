"""ChatQueries' contract (adapters/storage/chats.py), the same tests on SQLite and on PostgreSQL: a chat followed to
its new id, merged when both began, never a conversation that is or was private."""

from __future__ import annotations

import pytest

from adapters.storage.chats import ChatQueries
from adapters.storage.engine import Database, Statement
from tests.adapters.store.interval_rows import column, conversation, delivery, message, scalar, segment

pytestmark = pytest.mark.engines


async def _summary(engine: Database, c: int, text: str) -> None:
    await engine.write(
        Statement(
            "INSERT INTO summaries (conversation_id, mode, text, watermark, updated_at)"
            " VALUES (:c, 'normal', :t, 0, 1.0)",
            {"c": c, "t": text},
        )
    )


async def _binding(engine: Database, c: int, chat: str) -> None:
    await engine.write(
        Statement(
            "INSERT INTO bindings (conversation_id, platform, chat_id, created_at) VALUES (:c, 'telegram', :chat, 1.0)",
            {"c": c, "chat": chat},
        )
    )


async def test_a_conversation_that_had_a_private_interval_is_never_moved(engine: Database) -> None:
    chats = ChatQueries(engine)
    direct = await conversation(engine, "7")
    group = await conversation(engine, "-1", kind="group")
    await segment(engine, group, ended_at=20.0)  # planted: the valve refuses private mode in a group

    assert (await chats.move_chat("telegram", "7", "8", 1.0)).refused
    assert (await chats.move_chat("telegram", "-1", "-100", 1.0)).refused
    assert await column(engine, "SELECT chat_id FROM conversations ORDER BY id") == ["7", "-1"]
    assert direct != group


async def test_a_moved_chat_is_merged_into_the_older_conversation(engine: Database) -> None:
    chats = ChatQueries(engine)
    old = await conversation(engine, "-1", kind="group")
    await message(engine, old, "from the old chat", key="12")
    await _summary(engine, old, "the old summary")
    await _binding(engine, old, "-1")
    pending = await delivery(engine, old)
    await engine.write(Statement("UPDATE deliveries SET chat_id = '-1'"))
    new = await conversation(engine, "-100", kind="group")
    await message(engine, new, "from the new chat", key="12")
    await _summary(engine, new, "the new summary")
    await _binding(engine, new, "-1")

    moved = await chats.move_chat("telegram", "-1", "-100", 5.0)

    assert (moved.conversation_id, moved.merged_conversation_id, moved.refused) == (old, new, False)
    assert (moved.bindings, moved.deliveries) == (1, 1)  # the newer's binding to -1 went with it
    assert await column(engine, "SELECT id FROM conversations") == [old]
    assert await column(engine, "SELECT chat_id FROM conversations") == ["-100"]
    keys = "SELECT platform_message_id FROM messages WHERE conversation_id = :c ORDER BY id"
    assert await column(engine, keys, c=old) == ["-1/12", "12"]
    assert await column(engine, "SELECT text FROM summaries") == ["the old summary"]  # one summary: the older's
    assert await column(engine, "SELECT chat_id FROM bindings ORDER BY id") == ["-100"]
    assert await column(engine, "SELECT chat_id FROM deliveries WHERE id = :d", d=pending) == ["-100"]
    assert await scalar(engine, "SELECT count(*) FROM messages") == 2


async def test_a_chat_moved_before_anything_began_under_its_new_id_keeps_its_conversation(engine: Database) -> None:
    chats = ChatQueries(engine)
    old = await conversation(engine, "-1", kind="group")

    moved = await chats.move_chat("telegram", "-1", "-100", 5.0)

    assert (moved.conversation_id, moved.merged_conversation_id) == (old, None)
    assert await column(engine, "SELECT chat_id FROM conversations") == ["-100"]
    assert await chats.move_chat("telegram", "-5", "-500", 5.0) == type(moved)()
