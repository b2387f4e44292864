"""SQL of private-mode lifetimes: expiry, forgetting, export, crossings."""

from __future__ import annotations

import logging

from core.model import TimelineItem

log = logging.getLogger(__name__)


class PrivacyQueries:
    """Mixed into SqliteStore; uses its `_tx`, `_one`, `_all` and `view`."""

    async def delete_segments_of(self, conversation_id: int) -> int:
        """`/forget private`: delete every segment of the conversation now; cascades do the rest."""
        async with self._tx() as db:
            cur = await db.execute("DELETE FROM segments WHERE conversation_id = ?", (conversation_id,))
            deleted = cur.rowcount
        if deleted:
            await self.checkpoint()
        return deleted

    async def checkpoint(self) -> None:
        """Move the WAL into the main file and truncate it, so deleted private text lingers in
        neither (secure_delete has already overwritten the freed space in the main file)."""
        async with self._lock:
            async with self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)") as cur:
                busy, _, _ = await cur.fetchone()
        if busy:
            log.warning("WAL checkpoint was blocked by a reader; it will be retried at the next sweep")

    async def delete_expired_artifacts(self, now: float) -> int:
        async with self._tx() as db:
            cur = await db.execute("DELETE FROM artifacts WHERE expires_at IS NOT NULL AND expires_at <= ?", (now,))
            return cur.rowcount

    async def export_items(self, conversation_id: int, *, visible_segment: int | None, chunk: int = 1000):
        """The whole view of one mode, oldest first, in chunks (masked for normal mode)."""
        after = -1
        while True:
            items: list[TimelineItem] = await self.view(
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
        rows = await self._all(
            "SELECT id, role, text FROM messages WHERE segment_id = ? AND kind = 'chat' ORDER BY id", (segment_id,)
        )
        return [TimelineItem(r["id"], r["role"], r["text"]) for r in rows]

    async def request_crossing(self, segment_id: int, destination: str, now: float, confirm_by: float) -> int:
        async with self._tx() as db:
            await db.execute("DELETE FROM crossings WHERE segment_id = ?", (segment_id,))
            cur = await db.execute(
                "INSERT INTO crossings (segment_id, destination, requested_at, confirm_by) VALUES (?, ?, ?, ?)",
                (segment_id, destination, now, confirm_by),
            )
            return cur.lastrowid

    async def confirm_crossing(
        self, segment_id: int, conversation_id: int, filename: str, content: str, now: float,
        expires_at: float | None,
    ) -> int | None:
        """Consume a pending, unexpired crossing of this segment and create the artifact, in one
        transaction. Returns the artifact id, or None when nothing was pending."""
        async with self._tx() as db:
            async with db.execute(
                "SELECT id, destination FROM crossings WHERE segment_id = ? AND confirm_by >= ?"
                " ORDER BY id DESC LIMIT 1", (segment_id, now),
            ) as cur:
                pending = await cur.fetchone()
            await db.execute("DELETE FROM crossings WHERE segment_id = ?", (segment_id,))
            if pending is None:
                return None
            cur = await db.execute(
                "INSERT INTO artifacts (conversation_id, kind, destination, filename, content, created_at, expires_at)"
                " VALUES (?, 'crossing', ?, ?, ?, ?, ?)",
                (conversation_id, pending["destination"], filename, content, now, expires_at),
            )
            return cur.lastrowid
