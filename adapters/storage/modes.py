"""SQL of the mode state: private segments, and adapter offsets."""

from __future__ import annotations

import aiosqlite

from adapters.storage.database import Database, inserted_id, present
from adapters.storage.outbox import end_shown
from adapters.storage.privacy import Checkpoints, owe_checkpoint
from core.values.model import Segment

SEGMENT_COLUMNS = (
    "id, conversation_id, anchor_message_id, started_at, last_activity_at, ended_at, end_reason, expires_at"
)


class ModeQueries:
    """Private segments and adapter offsets; implements core.ports.store.modes (ModeStore,
    OpenSegmentRead, CrashModes, IntervalList) and core.ports.chat.AdapterStateStore. Deleting expired segments finishes the WAL checkpoint it owes through `checkpoints`."""

    def __init__(self, db: Database, checkpoints: Checkpoints) -> None:
        self._db = db
        self._checkpoints = checkpoints

    # --- private segments (the mode state) ---------------------------------

    async def open_segment(self, conversation_id: int, now: float, expires_at: float | None) -> Segment:
        async with self._db.tx() as db:
            async with db.execute(
                f"SELECT {SEGMENT_COLUMNS} FROM segments WHERE conversation_id = ? AND ended_at IS NULL",
                (conversation_id,),
            ) as cur:
                row = await cur.fetchone()
            if row is not None:
                return segment_of_row(row)
            async with db.execute(
                "SELECT coalesce(max(id), 0) FROM messages WHERE conversation_id = ?", (conversation_id,)
            ) as cur:
                anchor = present(await cur.fetchone())[0]
            cur = await db.execute(
                "INSERT INTO segments (conversation_id, anchor_message_id, started_at, last_activity_at, expires_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (conversation_id, anchor, now, now, expires_at),
            )
            return Segment(inserted_id(cur), conversation_id, anchor, now, now, None, None, expires_at)

    async def open_segment_of(self, conversation_id: int) -> Segment | None:
        row = await self._db.read_one(
            f"SELECT {SEGMENT_COLUMNS} FROM segments WHERE conversation_id = ? AND ended_at IS NULL"
            " ORDER BY id DESC LIMIT 1",
            (conversation_id,),
        )
        return segment_of_row(row) if row else None

    # Each end of an interval settles, in its own transaction, the replies of the interval not sent
    # yet (`end_shown`): nothing more of it goes out, and what it showed is edited once into a constant.

    async def close_segment(self, segment_id: int, now: float, reason: str) -> bool:
        async with self._db.tx() as db:
            await end_shown(db, "SELECT id FROM segments WHERE id = ? AND ended_at IS NULL", (segment_id,), now)
            cur = await db.execute(
                "UPDATE segments SET ended_at = ?, end_reason = ? WHERE id = ? AND ended_at IS NULL",
                (now, reason, segment_id),
            )
            return cur.rowcount > 0

    async def close_open_segments(self, conversation_id: int, now: float, reason: str) -> int:
        async with self._db.tx() as db:
            await end_shown(
                db, "SELECT id FROM segments WHERE conversation_id = ? AND ended_at IS NULL", (conversation_id,), now
            )
            cur = await db.execute(
                "UPDATE segments SET ended_at = ?, end_reason = ? WHERE conversation_id = ? AND ended_at IS NULL",
                (now, reason, conversation_id),
            )
            return cur.rowcount

    async def close_crash_open_segments(
        self, platforms: frozenset[str] | None = None, now: float | None = None
    ) -> list[int]:
        """At start-up: close every open segment (of conversations on `platforms`, or all) at the
        end of its stored record (its newest message, or its start when it holds none). Nothing
        after the restart falls inside it; `now` is kept as the segment's `restart_at`, so a
        message sent before it that arrives later is known to belong to it. Returns the
        conversations whose segment was closed."""
        scope = (
            ""
            if platforms is None
            else (
                " AND conversation_id IN (SELECT id FROM conversations WHERE platform IN"
                f" ({', '.join('?' for _ in platforms)}))"
            )
        )
        params = () if platforms is None else tuple(sorted(platforms))
        async with self._db.tx() as db:
            async with db.execute(
                f"SELECT DISTINCT conversation_id FROM segments WHERE ended_at IS NULL{scope}", params
            ) as cur:
                conversations = [row[0] for row in await cur.fetchall()]
            # Due at once: the retractions are sent as soon as the adapters can send.
            await end_shown(db, f"SELECT id FROM segments WHERE ended_at IS NULL{scope}", params, now or 0.0)
            await db.execute(
                "UPDATE segments SET end_reason = 'restart', restart_at = ?, ended_at = max(started_at,"
                " last_activity_at,"
                " coalesce((SELECT max(created_at) FROM messages WHERE messages.segment_id = segments.id), 0))"
                f" WHERE ended_at IS NULL{scope}",
                (now, *params),
            )
            return conversations

    async def restart_segment_for(self, conversation_id: int, sent_at: float) -> int | None:
        """The segment a message sent at `sent_at` (platform time) belongs to although it arrives
        only now: the conversation's newest segment, when a restart closed it after `sent_at`.
        Turns of a chat run in order, so a message not stored yet was sent after every stored
        one, inside that interval."""
        row = await self._db.one(
            "SELECT id, restart_at FROM segments WHERE conversation_id = ? ORDER BY id DESC LIMIT 1",
            (conversation_id,),
        )
        if row is None or row["restart_at"] is None:  # only a restart's close sets restart_at
            return None
        return row["id"] if sent_at < row["restart_at"] else None

    async def private_intervals(self, conversation_id: int, now: float) -> list[Segment]:
        """The segments of the conversation that still exist: open, or ended and not expired by `now`
        (an expired one the sweep has not deleted yet is gone already for every reader)."""
        rows = await self._db.all(
            f"SELECT {SEGMENT_COLUMNS} FROM segments WHERE conversation_id = ?"
            " AND (expires_at IS NULL OR expires_at > ?) ORDER BY id",
            (conversation_id, now),
        )
        return [segment_of_row(row) for row in rows]

    async def delete_expired_segments(self, now: float) -> int:
        """Delete every segment whose expiry has passed; the foreign keys remove what hangs off it
        (messages, summaries, pad entries, tool operations, pending crossings), and a checkpoint
        leaves none of it in the WAL (or, blocked by a reader, is owed and finished by the next
        deletion, sweep or start)."""
        async with self._db.tx() as db:
            await end_shown(db, "SELECT id FROM segments WHERE expires_at IS NOT NULL AND expires_at <= ?", (now,), now)
            cur = await db.execute("DELETE FROM segments WHERE expires_at IS NOT NULL AND expires_at <= ?", (now,))
            deleted = cur.rowcount
            if deleted:
                await owe_checkpoint(db)
        await self._checkpoints.finish_owed()
        return deleted

    # --- adapter state (offsets, cursors) -----------------------------------

    async def get_adapter_state(self, name: str) -> str | None:
        row = await self._db.one("SELECT value FROM adapter_state WHERE name = ?", (name,))
        return row[0] if row else None

    async def set_adapter_state(self, name: str, value: str, now: float) -> None:
        """Not fsynced: an offset lost to a power cut only makes the platform deliver again, and
        the inbox makes a redelivery a no-op."""
        async with self._db.tx(durable=False) as db:
            await db.execute(
                "INSERT INTO adapter_state (name, value, updated_at) VALUES (?, ?, ?)"
                " ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
                (name, value, now),
            )


def segment_of_row(row: aiosqlite.Row) -> Segment:
    return Segment(
        row["id"],
        row["conversation_id"],
        row["anchor_message_id"],
        row["started_at"],
        row["last_activity_at"],
        row["ended_at"],
        row["end_reason"],
        row["expires_at"],
    )
