"""SQL of private-mode lifetimes: expiry, forgetting, export, crossings."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import aiosqlite

from adapters.storage.database import Database
from adapters.storage.engine import Database as EngineDatabase
from adapters.storage.engine import Fetch, Statement
from adapters.storage.outbox import ending_shown
from adapters.storage.sealing import opened, sealed
from adapters.storage.timeline import TimelineQueries
from core.values.model import TimelineItem

log = logging.getLogger(__name__)

# The durable flag (a row of adapter_state): deleted private text may still sit in the WAL or
# in a page the WAL has not yet overwritten. Its value counts the deletions it covers.
CHECKPOINT_OWED = "store:checkpoint_owed"


def owing_checkpoint(deleting: str, params: Mapping[str, object]) -> Statement:
    """The statement that records, inside the deleting write and before its DELETE, that a checkpoint
    is owed when `deleting` (SQL selecting what the DELETE removes, with named `params`) finds a row: a
    crash between the commit and the checkpoint still leaves the debt for the next start or sweep."""
    return Statement(
        "INSERT INTO adapter_state (name, value, updated_at) SELECT :owed_name, '1', :owed_at"
        f" WHERE EXISTS ({deleting}) ON CONFLICT (name) DO UPDATE"
        " SET value = CAST(CAST(adapter_state.value AS INTEGER) + 1 AS TEXT), updated_at = excluded.updated_at",
        {**params, "owed_name": CHECKPOINT_OWED, "owed_at": time.time()},
    )


async def owe_checkpoint(db: aiosqlite.Connection) -> None:
    """`owing_checkpoint` unconditionally, inside the caller's transaction."""
    owed = owing_checkpoint("SELECT 1", {})
    await db.execute(owed.sql, dict(owed.params))


def _checkpoint_file(path: Path) -> tuple[int, int, bool]:
    """On a short-lived connection of its own that never waits (busy timeout 0): copy what it
    can (PASSIVE), and when nobody reads an older snapshot, empty the WAL (TRUNCATE).
    Returns (WAL frames, frames copied, whether the WAL was emptied)."""
    db = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        busy, frames, copied = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        if busy or copied < frames:  # a reader's snapshot still needs the older pages
            return frames, copied, False
        busy, _, _ = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        return frames, copied, not busy
    finally:
        db.close()


class Checkpoints:
    """WAL checkpoints that deleted private text owes (a durable flag in adapter_state)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def _owed(self) -> str | None:
        row = await self._db.one("SELECT value FROM adapter_state WHERE name = ?", (CHECKPOINT_OWED,))
        return row[0] if row else None

    async def run(self) -> bool:
        """Move the WAL into the main file and truncate it, so deleted text lingers in neither
        (secure_delete has already overwritten the freed space of the pages themselves).

        Runs in a thread on a connection of its own, holding no store lock, and never waits: a
        reader in another process holding an older snapshot makes it stop at once, and the
        durable flag keeps the debt until a later call empties the WAL.
        Returns whether the WAL was emptied.
        """
        owed = await self._owed()
        try:
            if self._db.in_memory:  # no file, no WAL: nothing can linger
                frames, copied, emptied = 0, 0, True
            else:
                frames, copied, emptied = await asyncio.to_thread(_checkpoint_file, self._db.path)
        except sqlite3.Error as exc:  # e.g. SQLITE_BUSY opening the file: the same as blocked
            frames, copied, emptied = -1, -1, False
            log.warning("WAL checkpoint failed (%s)", type(exc).__name__)
        if emptied:
            if owed is not None:  # unless a deletion committed meanwhile owes another one
                async with self._db.tx() as db:
                    await db.execute("DELETE FROM adapter_state WHERE name = ? AND value = ?", (CHECKPOINT_OWED, owed))
            log.info("WAL checkpoint emptied the log (%d frames)", frames)
            return True
        if owed is None:
            async with self._db.tx() as db:
                await owe_checkpoint(db)
        log.warning(
            "WAL checkpoint blocked by a reader (%d of %d frames copied); owed until a sweep or start completes it",
            copied,
            frames,
        )
        return False

    async def finish_owed(self) -> bool:
        """Finish a checkpoint a deletion owes (the durable flag); True when none is owed now."""
        if await self._owed() is None:
            return True
        return await self.run()


class LifetimeQueries:
    """Forgetting, expiry of artifacts, export and confirmed crossings; implements
    core.ports.store.lifetime (ForgetStore, ArtifactExpiry, ExportStore).

    `checkpoints` (SQLite only) is the hook of the WAL checkpoint a deletion owes, as for ModeQueries:
    with it, each deletion records the debt in its own write and finishes it after; without it
    (PostgreSQL) nothing is owed."""

    def __init__(
        self, engine: EngineDatabase, timeline: TimelineQueries, checkpoints: Checkpoints | None = None
    ) -> None:
        self._engine = engine
        self._timeline = timeline
        self._checkpoints = checkpoints

    def _owing(self, deleting: str, params: Mapping[str, object]) -> tuple[Statement, ...]:
        return () if self._checkpoints is None else (owing_checkpoint(deleting, params),)

    async def _finish_owed(self) -> None:
        if self._checkpoints is not None:
            await self._checkpoints.finish_owed()

    async def delete_segments_of(self, conversation_id: int, now: float) -> int:
        """`/forget private`: delete every segment of the conversation now; cascades do the rest (a
        reply of theirs that showed messages first leaves as their retraction, `ending_shown`).
        Keys first, rows after: every interval's key is shredded before its rows are deleted, so a
        crash between the two leaves rows nothing opens (masked, deleted at the next `/forget private`
        or expiry); a key of an interval opened meanwhile is shredded with the rows that name it."""
        segments = "SELECT id FROM segments WHERE conversation_id = :c"
        params = {"c": conversation_id}
        sealer = self._engine.sealer
        if sealer.keyed:
            (keyed,) = await self._engine.read(
                Statement(
                    "SELECT key_id FROM segments WHERE conversation_id = :c AND key_id IS NOT NULL", params, Fetch.ALL
                )
            )
            await sealer.shred(row["key_id"] for row in keyed.rows)
        results = await self._engine.write(
            *ending_shown(segments, params, now),
            *self._owing(segments, params),
            Statement("DELETE FROM segments WHERE conversation_id = :c RETURNING id, key_id", params, Fetch.ALL),
        )
        deleted = results[-1].rows
        await sealer.shred(row["key_id"] for row in deleted if row["key_id"] is not None)
        for row in deleted:
            sealer.unbind(row["id"])
        await self._finish_owed()
        return len(deleted)

    async def delete_expired_artifacts(self, now: float) -> int:
        """Delete crossing artifacts past their retention; like every deletion, it also
        finishes an owed checkpoint, so a sweep or start retries one a reader blocked."""
        expired = "SELECT id FROM artifacts WHERE expires_at IS NOT NULL AND expires_at <= :now"
        params = {"now": now}
        results = await self._engine.write(
            *self._owing(expired, params),
            Statement(
                "DELETE FROM artifacts WHERE expires_at IS NOT NULL AND expires_at <= :now", params, Fetch.ROWCOUNT
            ),
        )
        await self._finish_owed()
        return results[-1].rowcount

    async def export_items(
        self, conversation_id: int, *, visible_segment: int | None, chunk: int = 1000
    ) -> AsyncIterator[TimelineItem]:
        """The whole view of one mode, oldest first, in chunks (masked for normal mode)."""
        after = -1
        while True:
            items: list[TimelineItem] = await self._timeline.view(
                conversation_id, visible_segment=visible_segment, after=after, limit=chunk, newest_first=False
            )
            if not items:
                return
            for item in items:
                yield item
            messages = [i for i in items if not i.is_placeholder]
            if len(items) < chunk or not messages:
                return
            after = messages[-1].position

    async def segment_items(self, segment_id: int) -> list[TimelineItem]:
        """The interval's own messages, opened (none when its key is gone)."""
        (found,) = await self._engine.read(
            Statement(
                "SELECT id, role, text FROM messages WHERE segment_id = :s AND kind = 'chat' ORDER BY id",
                {"s": segment_id},
                Fetch.ALL,
            )
        )
        items = []
        for r in found.rows:
            text = opened(self._engine.sealer, segment_id, "messages.text", r["text"])
            if text is not None:
                items.append(TimelineItem(r["id"], r["role"], text))
        return items

    async def request_crossing(self, segment_id: int, destination: str, now: float, confirm_by: float) -> int:
        """A pending crossing; its destination is the interval's words until confirmed (sealed in its row)."""
        _, made = await self._engine.write(
            Statement("DELETE FROM crossings WHERE segment_id = :s", {"s": segment_id}),
            Statement(
                "INSERT INTO crossings (segment_id, destination, requested_at, confirm_by)"
                " VALUES (:s, :destination, :now, :confirm_by) RETURNING id",
                {
                    "s": segment_id,
                    "destination": sealed(self._engine.sealer, segment_id, "crossings.destination", destination),
                    "now": now,
                    "confirm_by": confirm_by,
                },
                Fetch.ONE,
            ),
        )
        return int(made.scalar)

    async def confirm_crossing(
        self,
        segment_id: int,
        conversation_id: int,
        filename: str,
        content: str,
        now: float,
        expires_at: float | None,
    ) -> int | None:
        """Consume a pending, unexpired crossing of this segment and create the artifact, in one
        transaction. Returns the artifact id, or None when nothing was pending (or its key is gone).
        The destination is opened in Python (sealed in the crossing's row, the row locked on PostgreSQL):
        a confirmed crossing is the one way words leave an interval, as the person asked."""
        consumed = Statement("DELETE FROM crossings WHERE segment_id = :s", {"s": segment_id})
        async with self._engine.tx() as tx:
            (found,) = await tx.run(
                Statement(
                    "SELECT destination FROM crossings WHERE segment_id = :s AND confirm_by >= :now"
                    f" ORDER BY id DESC LIMIT 1{self._engine.dialect.for_update}",
                    {"s": segment_id, "now": now},
                    Fetch.ONE,
                )
            )
            row = found.one
            destination = (
                None
                if row is None
                else opened(self._engine.sealer, segment_id, "crossings.destination", row["destination"])
            )
            if destination is None:
                await tx.run(consumed)
                return None
            made, _ = await tx.run(
                Statement(
                    "INSERT INTO artifacts (conversation_id, kind, destination, filename, content, created_at,"
                    " expires_at) VALUES (:c, 'crossing', :destination, :filename, :content, :now,"
                    " CAST(:expires AS DOUBLE PRECISION)) RETURNING id",
                    {
                        "c": conversation_id,
                        "destination": destination,
                        "filename": filename,
                        "content": content,
                        "now": now,
                        "expires": expires_at,
                    },
                    Fetch.ONE,
                ),
                consumed,
            )
            return int(made.scalar)
