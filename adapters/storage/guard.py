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
from adapters.storage.engine import Dialect, Statement
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


# --- the same guard as statements, for the engine interface (adapters/storage/engine.py) ---------------


def refusing_while_private(dialect: Dialect, origin: int, what: str) -> tuple[Statement, ...]:
    """The statements that open a guarded write (`engine.write(*refusing_while_private(...), *the_write)`):
    the write is refused whole, PrivateWriteRefused(`what`), when the conversation `origin` has an open
    segment. On PostgreSQL the conversation's row is locked first, and the valve's `open_segment` takes the
    same lock, so no segment opens between the check and the write (SQLite's BEGIN IMMEDIATE does that)."""
    check = Statement(
        "SELECT companion_raise('private_write', :what) FROM segments"
        " WHERE conversation_id = :origin AND ended_at IS NULL LIMIT 1",
        {"origin": origin, "what": what},
    )
    if not dialect.for_update:
        return (check,)
    lock = Statement(f"SELECT id FROM conversations WHERE id = :origin{dialect.for_update}", {"origin": origin})
    return (lock, check)


def refusing_while_person_private(dialect: Dialect, people: tuple[int, ...], what: str) -> tuple[Statement, ...]:
    """As `refusing_while_private`, over every conversation of every one of `people` (linking and
    unlinking change whose memory a conversation reads)."""
    params: dict[str, object] = {f"p{n}": person for n, person in enumerate(people)}
    named = ", ".join(f":{name}" for name in params)
    check = Statement(
        "SELECT companion_raise('private_write', :what) FROM segments s JOIN conversations c"
        f" ON c.id = s.conversation_id WHERE s.ended_at IS NULL AND c.person_id IN ({named}) LIMIT 1",
        {**params, "what": what},
    )
    if not dialect.for_update:
        return (check,)
    lock = Statement(
        f"SELECT id FROM conversations WHERE person_id IN ({named}) ORDER BY id{dialect.for_update}", params
    )
    return (lock, check)
