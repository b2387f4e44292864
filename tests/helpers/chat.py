"""Helpers to talk to a Companion as a platform adapter would."""

from __future__ import annotations

from adapters.storage.modes import SEGMENT_COLUMNS, segment_of_row
from adapters.storage.stores import Stores
from core.turn.companion import Companion
from core.values.model import InboundMessage, Reply, Segment
from tests.helpers import engines


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
    row = await engines.first(
        engines.stores_of(companion),
        "SELECT id, platform, chat_id, kind, person_id FROM conversations WHERE platform = ? AND chat_id = ?",
        (platform, chat),
    )
    from core.values.model import Conversation

    return Conversation(row[0], row[1], row[2], row[3], row[4])


async def all_rows(stores, sql: str, params: tuple = ()) -> list:
    return [tuple(r) for r in await engines.rows(stores, sql, params)]


async def segments_of(stores: Stores, conversation_id: int) -> list[Segment]:
    """Every segment of a conversation, oldest first (tests read what the valve wrote)."""
    rows = await engines.rows(
        stores, f"SELECT {SEGMENT_COLUMNS} FROM segments WHERE conversation_id = ? ORDER BY id", (conversation_id,)
    )
    return [segment_of_row(r) for r in rows]
