"""SQL of the outbox: delivery rows written with what they carry, sent by adapters, marked after."""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING

import aiosqlite

from adapters.storage.database import inserted_id
from core.model import DeliveryTarget, OutboundDelivery

if TYPE_CHECKING:
    from adapters.storage.sqlite import SqliteStore

_COLUMNS = "id, conversation_id, kind, platform, chat_id, reply_to, thread_id, nonce, text, parts_sent, attempts"


async def insert_delivery(
    db: aiosqlite.Connection,
    conversation_id: int,
    target: DeliveryTarget,
    text: str,
    now: float,
    *,
    kind: str = "reply",
    message_id: int | None = None,
    segment_id: int | None = None,
) -> int:
    """Write one pending delivery inside the caller's transaction. The schema refuses a private
    segment on anything but a reply, and a segment other than the carried message's."""
    cur = await db.execute(
        "INSERT INTO deliveries (conversation_id, message_id, segment_id, kind, platform, chat_id, reply_to,"
        " thread_id, nonce, text, next_attempt_at, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            conversation_id,
            message_id,
            segment_id,
            kind,
            target.platform,
            target.chat_id,
            target.reply_to,
            target.thread_id,
            secrets.token_hex(8),
            text,
            now,
            now,
        ),
    )
    return inserted_id(cur)


class SqliteOutboxStore:
    """The outbox's reads and marks; implements core.ports.OutboxStore on the database of a
    SqliteStore (shared with it: one writer connection, one lock)."""

    def __init__(self, store: SqliteStore) -> None:
        self._db = store.database

    async def pending_of(self, conversation_id: int, upto: int) -> list[OutboundDelivery]:
        """Pending deliveries of one conversation up to `upto`, oldest first: they go out in order."""
        rows = await self._db.all(
            f"SELECT {_COLUMNS} FROM deliveries WHERE conversation_id = ? AND status = 'pending' AND id <= ?"
            " ORDER BY id",
            (conversation_id, upto),
        )
        return [_delivery(r) for r in rows]

    async def due(
        self, platforms: frozenset[str], now: float, untried_after: float = 0.0, limit: int = 200
    ) -> list[tuple[int, int]]:
        """(conversation, newest due delivery id) for conversations with a pending delivery due now
        on one of `platforms`; one never tried only once it is `untried_after` seconds old (its
        adapter is sending it right now)."""
        if not platforms:
            return []
        marks = ", ".join("?" for _ in platforms)
        rows = await self._db.all(
            "SELECT conversation_id, max(id) FROM deliveries WHERE status = 'pending' AND next_attempt_at <= ?"
            f" AND (attempts > 0 OR created_at <= ?) AND platform IN ({marks})"
            " GROUP BY conversation_id ORDER BY min(id) LIMIT ?",
            (now, now - untried_after, *sorted(platforms), limit),
        )
        return [(r[0], r[1]) for r in rows]

    async def mark_sent(self, delivery_id: int, parts_sent: int, now: float) -> None:
        # Not fsynced: a mark lost to a power cut only sends the reply again (at least once).
        async with self._db.tx(durable=False) as db:
            await db.execute(
                "UPDATE deliveries SET status = 'sent', text = NULL, parts_sent = ?, settled_at = ?, error = NULL"
                " WHERE id = ? AND status = 'pending'",
                (parts_sent, now, delivery_id),
            )

    async def mark_retry(self, delivery_id: int, parts_sent: int, error: str, next_attempt_at: float) -> None:
        async with self._db.tx() as db:
            await db.execute(
                "UPDATE deliveries SET attempts = attempts + 1, parts_sent = ?, error = ?, next_attempt_at = ?"
                " WHERE id = ? AND status = 'pending'",
                (parts_sent, error[:64], next_attempt_at, delivery_id),
            )

    async def mark_failed(self, delivery_id: int, parts_sent: int, error: str, now: float) -> None:
        async with self._db.tx() as db:
            await db.execute(
                "UPDATE deliveries SET status = 'failed', text = NULL, attempts = attempts + 1, parts_sent = ?,"
                " error = ?, settled_at = ? WHERE id = ? AND status = 'pending'",
                (parts_sent, error[:64], now, delivery_id),
            )

    async def append_text(self, delivery_id: int, suffix: str) -> None:
        """Add a line to a pending delivery before it is sent (the note to delete a secret)."""
        async with self._db.tx() as db:
            await db.execute(
                "UPDATE deliveries SET text = text || ? WHERE id = ? AND status = 'pending' AND parts_sent = 0",
                (suffix, delivery_id),
            )

    async def prune_settled(self, before: float) -> int:
        """Forget settled rows (they hold no text) once they are old."""
        async with self._db.tx() as db:
            cur = await db.execute("DELETE FROM deliveries WHERE status <> 'pending' AND settled_at < ?", (before,))
            return cur.rowcount


def _delivery(row: aiosqlite.Row) -> OutboundDelivery:
    return OutboundDelivery(
        id=row["id"],
        conversation_id=row["conversation_id"],
        kind=row["kind"],
        target=DeliveryTarget(row["platform"], row["chat_id"], row["reply_to"], row["thread_id"]),
        nonce=row["nonce"],
        text=row["text"] or "",
        parts_sent=row["parts_sent"],
        attempts=row["attempts"],
    )
