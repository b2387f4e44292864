"""The one guard of lasting writes: nothing that outlives a private segment is written while
the conversation it comes from (its origin) has a segment open.

A lasting write is a row no segment's cascade removes that a turn causes: normal pad entries
(added or forgotten), goals, follow-ups and event watches (added or changed), analytics runs,
and tool operations outside a segment; linking and unlinking accounts
(`refuse_while_person_private`, over every conversation of the people concerned). Every such write runs in `lasting_tx` (or, inside a
transaction that also writes other rows, calls `refuse_while_private` first). The transaction is BEGIN IMMEDIATE, so no segment can
open between the check and the write. Rows a segment owns (its messages, summaries, private
pad facts, tool operations, its reply's delivery) are not lasting: they cascade away with it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiosqlite

from adapters.storage.database import Database
from core.values.errors import PrivateWriteRefused


async def refuse_while_private(conn: aiosqlite.Connection, origin: int, what: str) -> None:
    """Inside the caller's write transaction: raise PrivateWriteRefused(`what`) when the
    conversation `origin` has an open private segment (the transaction then rolls back whole).

    Raises:
        PrivateWriteRefused: the conversation is private; nothing of the transaction is kept.
    """
    # execute_fetchall: one trip to the connection's thread (a cursor's fetch and close are two more).
    if await conn.execute_fetchall(
        "SELECT 1 FROM segments WHERE conversation_id = ? AND ended_at IS NULL LIMIT 1", (origin,)
    ):
        raise PrivateWriteRefused(what)


async def refuse_while_person_private(conn: aiosqlite.Connection, people: tuple[int, ...], what: str) -> None:
    """Inside the caller's write transaction: raise PrivateWriteRefused(`what`) when any
    conversation of any of `people` has an open private segment. Linking and unlinking change
    whose memory a conversation reads, so they wait until every interval of both is closed.

    Raises:
        PrivateWriteRefused: a conversation is private; nothing of the transaction is kept.
    """
    marks = ", ".join("?" for _ in people)
    if await conn.execute_fetchall(
        "SELECT 1 FROM segments s JOIN conversations c ON c.id = s.conversation_id"
        f" WHERE s.ended_at IS NULL AND c.person_id IN ({marks}) LIMIT 1",
        people,
    ):
        raise PrivateWriteRefused(what)


@asynccontextmanager
async def lasting_tx(db: Database, origin: int, what: str) -> AsyncIterator[aiosqlite.Connection]:
    """The guarded mutator: a write transaction for a lasting write, refused (PrivateWriteRefused,
    nothing written) while the conversation `origin` has an open private segment."""
    async with db.tx() as conn:
        await refuse_while_private(conn, origin, what)
        yield conn
