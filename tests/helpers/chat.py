"""Helpers to talk to a Companion as a platform adapter would."""

from __future__ import annotations

from adapters.storage.modes import SEGMENT_COLUMNS, segment_of_row
from adapters.storage.sqlite import SqliteStore
from core.turn.companion import Companion
from core.values.model import InboundMessage, Reply, Segment


async def say(
    companion: Companion,
    text: str,
    *,
    platform: str = "terminal",
    chat: str = "terminal",
    user: str = "owner",
    direct: bool = True,
) -> Reply | None:
    return await companion.handle(InboundMessage(platform, chat, user, text, is_direct=direct))


async def conversation_of(companion: Companion, platform: str = "terminal", chat: str = "terminal"):
    row = await companion.store._one(
        "SELECT id, platform, chat_id, kind, person_id FROM conversations WHERE platform = ? AND chat_id = ?",
        (platform, chat),
    )
    from core.values.model import Conversation

    return Conversation(row[0], row[1], row[2], row[3], row[4])


async def all_rows(store, sql: str, params: tuple = ()) -> list:
    return [tuple(r) for r in await store._all(sql, params)]


async def segments_of(store: SqliteStore, conversation_id: int) -> list[Segment]:
    """Every segment of a conversation, oldest first (tests read what the valve wrote)."""
    rows = await store.database.all(
        f"SELECT {SEGMENT_COLUMNS} FROM segments WHERE conversation_id = ? ORDER BY id", (conversation_id,)
    )
    return [segment_of_row(r) for r in rows]
