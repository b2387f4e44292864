"""SQL of the memory paths (pads, notes, goals, follow-ups, recall, capture, analytics).

Every statement that could touch private text says so in its own WHERE clause:
recall joins back to the source row and requires it to be normal; capture joins
against the conversation kind and the segments. Every lasting write (pad, goals,
follow-ups, analytics) passes through the guard of adapters/storage/guard.py.
"""

from __future__ import annotations

import aiosqlite

from adapters.storage.database import Database, inserted_id, present
from adapters.storage.engine import Ref, Statement
from adapters.storage.guard import lasting_tx, refuse_while_private
from core.values.model import FollowUp, Goal, Note, PendingCapture, RecallHit, RunRecord


def fts_query(words: tuple[str, ...]) -> str:
    """FTS5's query for any of `words`: each a quoted string, so no operator, column filter or
    syntax a person typed comes through."""
    return " OR ".join('"' + word.replace('"', '""') + '"' for word in words)


class MemoryQueries:
    """Pads, recall, goals, follow-ups, capture and analytics; implements core.ports.store.memory
    (MemoryStore, CaptureStore, RunLog)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    # --- normal pad ---------------------------------------------------------

    async def remember(self, person_id: int, origin: int, text: str, now: float) -> int:
        async with lasting_tx(self._db, origin, "memory") as db:
            cur = await db.execute(
                "INSERT INTO pad_entries (person_id, segment_id, mode, text, created_at, conversation_id)"
                " VALUES (?, NULL, 'normal', ?, ?, ?)",
                (person_id, text, now, origin),
            )
            return inserted_id(cur)

    async def forget_pad_entry(self, person_id: int, origin: int, entry_id: int) -> int:
        async with lasting_tx(self._db, origin, "change to memory") as db:
            cur = await db.execute(
                "DELETE FROM pad_entries WHERE id = ? AND person_id = ? AND mode = 'normal'", (entry_id, person_id)
            )
            return cur.rowcount

    async def forget_pad_matching(self, person_id: int, origin: int, text: str) -> int:
        pattern = "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        async with lasting_tx(self._db, origin, "change to memory") as db:
            cur = await db.execute(
                "DELETE FROM pad_entries WHERE person_id = ? AND mode = 'normal' AND text LIKE ? ESCAPE '\\'",
                (person_id, pattern),
            )
            return cur.rowcount

    # --- recall ---------------------------------------------------------------

    async def recall(self, person_id: int, words: tuple[str, ...], limit: int = 8) -> list[RecallHit]:
        """Ranked full-text recall of any of `words`. The privacy predicates are part of this
        statement: a hit from a message counts only if that message is normal, outside every
        segment; a hit from the pad only if the entry is normal. Nothing private is read, even to drop it."""
        if not words:
            return []
        match = fts_query(words)
        rows = await self._db.all(
            "SELECT f.source, f.rowid / 4 AS ref, f.text, bm25(recall_fts) AS rank"
            " FROM recall_fts f"
            " LEFT JOIN messages m ON f.source = 'message' AND m.id = f.rowid / 4"
            " LEFT JOIN pad_entries p ON f.source = 'pad' AND p.id = f.rowid / 4"
            " WHERE recall_fts MATCH :match AND f.person_id = :person"
            "   AND (f.source <> 'message' OR (m.mode <> 'private' AND m.segment_id IS NULL))"
            "   AND (f.source <> 'pad' OR (p.mode <> 'private' AND p.segment_id IS NULL))"
            " ORDER BY rank LIMIT :limit",
            {"match": match, "person": person_id, "limit": limit},
        )
        return [RecallHit(r["source"], r["ref"], r["text"], r["rank"]) for r in rows]

    # --- goals ------------------------------------------------------------------

    async def add_goal(self, person_id: int, origin: int, title: str, due_at: float | None, now: float) -> int:
        async with lasting_tx(self._db, origin, "goal") as db:
            cur = await db.execute(
                "INSERT INTO goals (person_id, conversation_id, title, due_at, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (person_id, origin, title, due_at, now, now),
            )
            return inserted_id(cur)

    async def goals(self, person_id: int, *, include_closed: bool = False) -> list[Goal]:
        status = "" if include_closed else " AND status = 'active'"
        rows = await self._db.all(
            f"SELECT id, title, status, due_at FROM goals WHERE person_id = ?{status} ORDER BY id", (person_id,)
        )
        return [Goal(r["id"], r["title"], r["status"], r["due_at"]) for r in rows]

    async def update_goal(
        self,
        person_id: int,
        origin: int,
        goal_id: int,
        now: float,
        *,
        status: str | None = None,
        title: str | None = None,
    ) -> bool:
        """Change a goal. Returns False when the person has no goal `goal_id`.

        Raises:
            PrivateWriteRefused: the conversation `origin` is private (told apart from a missing goal).
        """
        async with lasting_tx(self._db, origin, "change to a goal") as db:
            cur = await db.execute(
                "UPDATE goals SET status = coalesce(?, status), title = coalesce(?, title), updated_at = ?"
                " WHERE id = ? AND person_id = ?",
                (status, title, now, goal_id, person_id),
            )
            return cur.rowcount > 0

    # --- follow-ups and event watches ----------------------------------------

    async def add_followup(
        self, person_id: int, origin: int, kind: str, text: str, due_at: float | None, now: float
    ) -> int:
        async with lasting_tx(self._db, origin, "follow-up") as db:
            cur = await db.execute(
                "INSERT INTO followups (person_id, conversation_id, kind, text, due_at, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (person_id, origin, kind, text, due_at, now, now),
            )
            return inserted_id(cur)

    async def followups(self, person_id: int) -> list[FollowUp]:
        rows = await self._db.all(
            "SELECT id, kind, text, due_at, CASE WHEN outcome = 'missed' THEN 'missed' ELSE status END AS status"
            " FROM followups WHERE person_id = ? AND (status IN ('scheduled', 'paused') OR outcome = 'missed')"
            " ORDER BY coalesce(due_at, 1e18), id",
            (person_id,),
        )
        return [FollowUp(r["id"], r["kind"], r["text"], r["due_at"], r["status"]) for r in rows]

    async def set_followup_status(self, person_id: int, origin: int, followup_id: int, status: str, now: float) -> bool:
        """Pause or cancel a follow-up. Returns False when the person has no open follow-up `followup_id`.

        Raises:
            PrivateWriteRefused: the conversation `origin` is private (told apart from a missing follow-up).
        """
        async with lasting_tx(self._db, origin, "change to a follow-up") as db:
            cur = await db.execute(
                "UPDATE followups SET status = ?, outcome = NULL, updated_at = ?"
                " WHERE id = ? AND person_id = ? AND (status IN ('scheduled', 'paused') OR outcome = 'missed')",
                (status, now, followup_id, person_id),
            )
            return cur.rowcount > 0

    # --- tool operations ------------------------------------------------------

    async def record_tool_operation(
        self,
        conversation_id: int,
        segment_id: int | None,
        tool: str,
        status: str,
        args_bytes: int,
        result_bytes: int,
        now: float,
    ) -> None:
        """Record one tool call. Inside a segment it is the segment's (it cascades away with it);
        outside one it is lasting, so refused while the conversation is private."""
        async with self._db.tx() as db:
            if segment_id is None:
                await refuse_while_private(db, conversation_id, "tool operation")
            await db.execute(
                "INSERT INTO tool_operations (conversation_id, segment_id, tool, status, args_bytes, result_bytes,"
                " created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (conversation_id, segment_id, tool, status, args_bytes, result_bytes, now),
            )

    # --- capture --------------------------------------------------------------

    async def pending_capture(self, limit: int) -> list[PendingCapture]:
        """Normal messages waiting for capture. Two checks: the capture mark, and this join,
        which also refuses any row in a private segment, inside a segment's time span, or
        outside a direct conversation, so a caller that forgot the mark still cannot feed
        private text to capture."""
        async with self._db.tx() as db:
            # What the join refuses is marked skipped, so it is not looked at again.
            await db.execute(
                "UPDATE messages SET capture = 'skipped' WHERE capture = 'pending' AND ("
                " mode <> 'normal' OR segment_id IS NOT NULL"
                " OR NOT EXISTS (SELECT 1 FROM conversations c WHERE c.id = messages.conversation_id"
                "   AND c.kind = 'direct' AND c.person_id IS NOT NULL)"
                " OR EXISTS (SELECT 1 FROM segments s WHERE s.conversation_id = messages.conversation_id"
                "   AND messages.created_at >= s.started_at"
                "   AND (s.ended_at IS NULL OR messages.created_at <= s.ended_at)))"
            )
            async with db.execute(
                "SELECT m.id, c.person_id, m.role, m.text, m.created_at"
                " FROM messages m JOIN conversations c ON c.id = m.conversation_id"
                " WHERE m.capture = 'pending' AND m.mode = 'normal' AND m.segment_id IS NULL AND m.kind = 'chat'"
                "   AND c.kind = 'direct' AND c.person_id IS NOT NULL"
                "   AND NOT EXISTS (SELECT 1 FROM segments s WHERE s.conversation_id = m.conversation_id"
                "     AND m.created_at >= s.started_at AND (s.ended_at IS NULL OR m.created_at <= s.ended_at))"
                " ORDER BY m.id LIMIT ?",
                (limit,),
            ) as cur:
                rows = await cur.fetchall()
        return [PendingCapture(r[0], r[1], r[2], r[3], r[4]) for r in rows]

    async def skip_capture(self, message_ids: list[int]) -> None:
        """Pending messages the model refused to capture: marked so they are not asked again."""
        async with self._db.tx() as db:
            await db.executemany(
                "UPDATE messages SET capture = 'skipped' WHERE id = ? AND capture = 'pending'",
                [(mid,) for mid in message_ids],
            )

    async def save_capture(
        self, person_id: int, day: str, note: str, facts: tuple[str, ...], message_ids: list[int], now: float
    ) -> int:
        """One note, its sources, new pad facts, and the capture marks, in one transaction."""
        async with self._db.tx() as db:
            cur = await db.execute(
                "INSERT INTO notes (person_id, day, text, created_at) VALUES (?, ?, ?, ?)", (person_id, day, note, now)
            )
            note_id = inserted_id(cur)
            await db.executemany(
                "INSERT INTO note_sources (note_id, message_id) SELECT ?, id FROM messages"
                " WHERE id = ? AND mode = 'normal' AND segment_id IS NULL",
                [(note_id, mid) for mid in message_ids],
            )
            # A fact is attributed to its conversation when all its sources come from one.
            marks = ", ".join("?" for _ in message_ids) or "NULL"
            async with db.execute(
                "SELECT CASE WHEN count(DISTINCT conversation_id) = 1 THEN max(conversation_id) END"
                f" FROM messages WHERE id IN ({marks})",
                message_ids,
            ) as cur:
                row = await cur.fetchone()
            origin = row[0] if row is not None else None
            for fact in facts:
                await db.execute(
                    "INSERT INTO pad_entries (person_id, segment_id, mode, text, created_at, conversation_id)"
                    " SELECT ?, NULL, 'normal', ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM pad_entries"
                    "  WHERE person_id = ? AND mode = 'normal' AND lower(text) = lower(?))",
                    (person_id, fact, now, origin, person_id, fact),
                )
            await db.executemany(
                "UPDATE messages SET capture = 'done' WHERE id = ? AND capture = 'pending'",
                [(mid,) for mid in message_ids],
            )
            return note_id

    async def notes(self, person_id: int, limit: int = 20) -> list[Note]:
        rows = await self._db.all(
            "SELECT id, day, text FROM notes WHERE person_id = ? ORDER BY id DESC LIMIT ?", (person_id, limit)
        )
        return [Note(r[0], r[1], r[2]) for r in rows]

    async def forget_note(self, person_id: int, origin: int, note_id: int) -> int:
        """A lasting write like forgetting a memory: refused while `origin` is private. The recall
        index loses the note with it (trigger recall_note_delete, 0003)."""
        async with lasting_tx(self._db, origin, "change to memory") as db:
            cur = await db.execute("DELETE FROM notes WHERE id = ? AND person_id = ?", (note_id, person_id))
            return cur.rowcount

    # --- analytics ------------------------------------------------------------

    async def save_run(self, run: RunRecord) -> None:
        """A normal turn's run and its events (a core.turn.analytics.RunRecord), in one transaction."""
        async with self._db.tx() as db:
            await insert_run(db, run)

    async def report_rows(self) -> dict:
        turns = present(
            await self._db.one("SELECT count(*), sum(status = 'ok'), sum(status = 'error') FROM agent_runs")
        )
        tools = await self._db.all(
            "SELECT name, count(*), sum(status <> 'ok') FROM agent_events WHERE kind = 'tool_call'"
            " GROUP BY name ORDER BY count(*) DESC, name"
        )
        errors = await self._db.all(
            "SELECT name, count(*) FROM agent_events WHERE kind = 'error' GROUP BY name ORDER BY count(*) DESC, name"
        )
        latencies = await self._db.all(
            "SELECT duration_ms FROM agent_events WHERE kind = 'provider_call' AND duration_ms IS NOT NULL"
            " ORDER BY duration_ms"
        )
        cut_off = present(
            await self._db.one("SELECT count(*) FROM agent_events WHERE kind = 'provider_call' AND status = 'cut_off'")
        )
        return {
            "turns": turns[0] or 0,
            "ok": turns[1] or 0,
            "failed": turns[2] or 0,
            "tools": [(r[0], r[1], r[2]) for r in tools],
            "errors": [(r[0], r[1]) for r in errors],
            "latencies": [r[0] for r in latencies],
            "cut_off": cut_off[0] or 0,
        }


def run_rows(run: RunRecord, *, at: int) -> list[Statement]:
    """A core.turn.analytics.RunRecord as statements of the caller's write: lasting, so left out (not
    refused: the rest of the write is kept) while its conversation has a segment open. The first
    statement (number `at` of the write) inserts the run (rowcount 0: left out); the events name it by `Ref`."""
    unguarded = "NOT EXISTS (SELECT 1 FROM segments WHERE conversation_id = :c AND ended_at IS NULL)"
    statements = [
        Statement(
            "INSERT INTO agent_runs (conversation_id, started_at, ended_at, status)"
            f" SELECT :c, :started, :ended, :status WHERE {unguarded}",
            {"c": run.conversation_id, "started": run.started_at, "ended": run.ended_at, "status": run.status},
            inserts="agent_runs",
        )
    ]
    if run.events:
        values = ", ".join(f"(:k{i}, :n{i}, :s{i}, :d{i}, :i{i}, :o{i}, :t{i})" for i in range(len(run.events)))
        params: dict[str, object] = {"c": run.conversation_id, "run": Ref(at)}
        for i, (kind, name, status, duration, size_in, size_out, created) in enumerate(run.events):
            params.update({f"k{i}": kind, f"n{i}": name, f"s{i}": status, f"d{i}": duration})
            params.update({f"i{i}": size_in, f"o{i}": size_out, f"t{i}": created})
        statements.append(
            Statement(
                "INSERT INTO agent_events (run_id, kind, name, status, duration_ms, size_in, size_out, created_at)"
                " SELECT :run, v.column1, v.column2, v.column3, v.column4, v.column5, v.column6, v.column7"
                f" FROM (VALUES {values}) AS v WHERE {unguarded}",
                params,
            )
        )
    return statements


async def insert_run(db: aiosqlite.Connection, run: RunRecord) -> int:
    """Write a core.turn.analytics.RunRecord inside the caller's transaction: lasting, so refused
    (the whole transaction with it) while its conversation is private."""
    await refuse_while_private(db, run.conversation_id, "analytics")
    cur = await db.execute(
        "INSERT INTO agent_runs (conversation_id, started_at, ended_at, status) VALUES (?, ?, ?, ?)",
        (run.conversation_id, run.started_at, run.ended_at, run.status),
    )
    run_id = inserted_id(cur)
    await db.executemany(
        "INSERT INTO agent_events (run_id, kind, name, status, duration_ms, size_in, size_out, created_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [(run_id, *event) for event in run.events],
    )
    return run_id
