"""SQL of the memory paths (pads, notes, goals, follow-ups, recall, capture, analytics).

Every statement that could touch private text says so in its own WHERE clause:
recall joins back to the source row and requires it to be normal; capture joins
against the conversation kind and the segments. Every lasting write (pad, goals,
follow-ups, analytics) passes through the guard of adapters/storage/guard.py.
"""

from __future__ import annotations

from adapters.storage.engine import Database as Engine
from adapters.storage.engine import Fetch, Ref, Statement
from adapters.storage.guard import refusing_while_private
from core.values.model import FollowUp, Goal, Note, PendingCapture, RecallHit, RunRecord


def fts_query(words: tuple[str, ...]) -> str:
    """FTS5's query for any of `words`: each a quoted string, so no operator, column filter or
    syntax a person typed comes through."""
    return " OR ".join('"' + word.replace('"', '""') + '"' for word in words)


class MemoryQueries:
    """Pads, recall, goals, follow-ups, capture and analytics; implements core.ports.store.memory
    (MemoryStore, CaptureStore, RunLog) over the engine interface (adapters/storage/engine.py)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def _guarded(self, origin: int, what: str) -> tuple[Statement, ...]:
        """The guard that opens a lasting write from the conversation `origin` (adapters/storage/guard.py)."""
        return refusing_while_private(self._engine.dialect, origin, what)

    async def _changed(self, guard: tuple[Statement, ...], statement: Statement) -> int:
        """A lasting write of one statement behind `guard`; how many rows it changed."""
        results = await self._engine.write(*guard, statement)
        return results[-1].rowcount

    async def _inserted(self, guard: tuple[Statement, ...], statement: Statement) -> int:
        """A lasting write of one `INSERT ... RETURNING id` behind `guard`; the new row's id."""
        results = await self._engine.write(*guard, statement)
        return int(results[-1].scalar)

    # --- normal pad ---------------------------------------------------------

    async def remember(self, person_id: int, origin: int, text: str, now: float) -> int:
        return await self._inserted(
            self._guarded(origin, "memory"),
            Statement(
                "INSERT INTO pad_entries (person_id, segment_id, mode, text, created_at, conversation_id)"
                " VALUES (:p, NULL, 'normal', :text, :now, :origin) RETURNING id",
                {"p": person_id, "text": text, "now": now, "origin": origin},
                Fetch.ONE,
            ),
        )

    async def forget_pad_entry(self, person_id: int, origin: int, entry_id: int) -> int:
        return await self._changed(
            self._guarded(origin, "change to memory"),
            Statement(
                "DELETE FROM pad_entries WHERE id = :id AND person_id = :p AND mode = 'normal'",
                {"id": entry_id, "p": person_id},
                Fetch.ROWCOUNT,
            ),
        )

    async def forget_pad_matching(self, person_id: int, origin: int, text: str) -> int:
        pattern = "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        # lower() on both sides: SQLite's LIKE ignores ASCII case, PostgreSQL's does not.
        return await self._changed(
            self._guarded(origin, "change to memory"),
            Statement(
                "DELETE FROM pad_entries WHERE person_id = :p AND mode = 'normal'"
                " AND lower(text) LIKE lower(:pattern) ESCAPE '\\'",
                {"p": person_id, "pattern": pattern},
                Fetch.ROWCOUNT,
            ),
        )

    # --- recall ---------------------------------------------------------------

    async def recall(self, person_id: int, words: tuple[str, ...], limit: int = 8) -> list[RecallHit]:
        """Ranked full-text recall of any of `words` (best first). The privacy predicates are part of
        this statement on every engine: a hit from a message counts only if that message is normal,
        outside every segment; a hit from the pad only if the entry is normal. Nothing private is read,
        even to drop it."""
        if not words:
            return []
        statement = (
            Statement(_RECALL_POSTGRES, {"words": list(words), "person": person_id, "limit": limit}, Fetch.ALL)
            if self._engine.dialect.name == "postgres"
            else Statement(_RECALL_SQLITE, {"match": fts_query(words), "person": person_id, "limit": limit}, Fetch.ALL)
        )
        (found,) = await self._engine.read(statement)
        return [RecallHit(r["source"], int(r["ref"]), r["text"], float(r["rank"])) for r in found.rows]

    # --- goals ------------------------------------------------------------------

    async def add_goal(self, person_id: int, origin: int, title: str, due_at: float | None, now: float) -> int:
        return await self._inserted(
            self._guarded(origin, "goal"),
            Statement(
                "INSERT INTO goals (person_id, conversation_id, title, due_at, created_at, updated_at)"
                " VALUES (:p, :origin, :title, :due, :now, :now) RETURNING id",
                {"p": person_id, "origin": origin, "title": title, "due": due_at, "now": now},
                Fetch.ONE,
            ),
        )

    async def goals(self, person_id: int, *, include_closed: bool = False) -> list[Goal]:
        status = "" if include_closed else " AND status = 'active'"
        (found,) = await self._engine.read(
            Statement(
                f"SELECT id, title, status, due_at FROM goals WHERE person_id = :p{status} ORDER BY id",
                {"p": person_id},
                Fetch.ALL,
            )
        )
        return [Goal(r["id"], r["title"], r["status"], r["due_at"]) for r in found.rows]

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
        changed = await self._changed(
            self._guarded(origin, "change to a goal"),
            Statement(
                "UPDATE goals SET status = coalesce(CAST(:status AS TEXT), status),"
                " title = coalesce(CAST(:title AS TEXT), title), updated_at = :now WHERE id = :id AND person_id = :p",
                {"status": status, "title": title, "now": now, "id": goal_id, "p": person_id},
                Fetch.ROWCOUNT,
            ),
        )
        return changed > 0

    # --- follow-ups and event watches ----------------------------------------

    async def add_followup(
        self, person_id: int, origin: int, kind: str, text: str, due_at: float | None, now: float
    ) -> int:
        return await self._inserted(
            self._guarded(origin, "follow-up"),
            Statement(
                "INSERT INTO followups (person_id, conversation_id, kind, text, due_at, created_at, updated_at)"
                " VALUES (:p, :origin, :kind, :text, :due, :now, :now) RETURNING id",
                {"p": person_id, "origin": origin, "kind": kind, "text": text, "due": due_at, "now": now},
                Fetch.ONE,
            ),
        )

    async def followups(self, person_id: int) -> list[FollowUp]:
        (found,) = await self._engine.read(
            Statement(
                "SELECT id, kind, text, due_at, CASE WHEN outcome = 'missed' THEN 'missed' ELSE status END AS status"
                " FROM followups WHERE person_id = :p AND (status IN ('scheduled', 'paused') OR outcome = 'missed')"
                " ORDER BY coalesce(due_at, 1e18), id",
                {"p": person_id},
                Fetch.ALL,
            )
        )
        return [FollowUp(r["id"], r["kind"], r["text"], r["due_at"], r["status"]) for r in found.rows]

    async def set_followup_status(self, person_id: int, origin: int, followup_id: int, status: str, now: float) -> bool:
        """Pause or cancel a follow-up. Returns False when the person has no open follow-up `followup_id`.

        Raises:
            PrivateWriteRefused: the conversation `origin` is private (told apart from a missing follow-up).
        """
        changed = await self._changed(
            self._guarded(origin, "change to a follow-up"),
            Statement(
                "UPDATE followups SET status = :status, outcome = NULL, updated_at = :now"
                " WHERE id = :id AND person_id = :p AND (status IN ('scheduled', 'paused') OR outcome = 'missed')",
                {"status": status, "now": now, "id": followup_id, "p": person_id},
                Fetch.ROWCOUNT,
            ),
        )
        return changed > 0

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
        *,
        server: str | None = None,
    ) -> None:
        """Record one tool call. Inside a segment it is the segment's (it cascades away with it);
        outside one it is lasting, so refused while the conversation is private. `server`: a served
        tool's MCP server; such a call is never a segment's (the schema's CHECK refuses it)."""
        guard = self._guarded(conversation_id, "tool operation") if segment_id is None else ()
        await self._engine.write(
            *guard,
            Statement(
                "INSERT INTO tool_operations (conversation_id, segment_id, tool, status, args_bytes, result_bytes,"
                " created_at, server) VALUES (:c, :s, :tool, :status, :args, :result, :now, :server)",
                {
                    "server": server,
                    "c": conversation_id,
                    "s": segment_id,
                    "tool": tool,
                    "status": status,
                    "args": args_bytes,
                    "result": result_bytes,
                    "now": now,
                },
            ),
        )

    # --- capture --------------------------------------------------------------

    async def pending_capture(self, limit: int) -> list[PendingCapture]:
        """Normal messages waiting for capture. Two checks: the capture mark, and this join,
        which also refuses any row in a private segment, inside a segment's time span, or
        outside a direct conversation, so a caller that forgot the mark still cannot feed
        private text to capture."""
        _, found = await self._engine.write(
            # What the join refuses is marked skipped, so it is not looked at again.
            Statement(
                "UPDATE messages SET capture = 'skipped' WHERE capture = 'pending' AND ("
                " mode <> 'normal' OR segment_id IS NOT NULL"
                " OR NOT EXISTS (SELECT 1 FROM conversations c WHERE c.id = messages.conversation_id"
                "   AND c.kind = 'direct' AND c.person_id IS NOT NULL)"
                " OR EXISTS (SELECT 1 FROM segments s WHERE s.conversation_id = messages.conversation_id"
                "   AND messages.created_at >= s.started_at"
                "   AND (s.ended_at IS NULL OR messages.created_at <= s.ended_at)))"
            ),
            Statement(
                "SELECT m.id, c.person_id, m.role, m.text, m.created_at"
                " FROM messages m JOIN conversations c ON c.id = m.conversation_id"
                " WHERE m.capture = 'pending' AND m.mode = 'normal' AND m.segment_id IS NULL AND m.kind = 'chat'"
                "   AND c.kind = 'direct' AND c.person_id IS NOT NULL"
                "   AND NOT EXISTS (SELECT 1 FROM segments s WHERE s.conversation_id = m.conversation_id"
                "     AND m.created_at >= s.started_at AND (s.ended_at IS NULL OR m.created_at <= s.ended_at))"
                " ORDER BY m.id LIMIT :limit",
                {"limit": limit},
                Fetch.ALL,
            ),
        )
        return [PendingCapture(r["id"], r["person_id"], r["role"], r["text"], r["created_at"]) for r in found.rows]

    async def skip_capture(self, message_ids: list[int]) -> None:
        """Pending messages the model refused to capture: marked so they are not asked again."""
        if not message_ids:
            return
        ids, params = _in_list("m", message_ids)
        await self._engine.write(
            Statement(f"UPDATE messages SET capture = 'skipped' WHERE id IN ({ids}) AND capture = 'pending'", params)
        )

    async def save_capture(
        self, person_id: int, day: str, note: str, facts: tuple[str, ...], message_ids: list[int], now: float
    ) -> int:
        """One note, its sources, new pad facts, and the capture marks, in one write."""
        ids, params = _in_list("m", message_ids)
        ids = ids or "NULL"
        statements = [
            Statement(
                "INSERT INTO notes (person_id, day, text, created_at) VALUES (:p, :day, :note, :now) RETURNING id",
                {"p": person_id, "day": day, "note": note, "now": now},
                Fetch.ONE,
                inserts="notes",
            )
        ]
        if message_ids:
            statements.append(
                Statement(
                    "INSERT INTO note_sources (note_id, message_id) SELECT :note, id FROM messages"
                    f" WHERE id IN ({ids}) AND mode = 'normal' AND segment_id IS NULL",
                    {**params, "note": Ref(0)},
                )
            )
        # A fact is attributed to its conversation when all its sources come from one.
        origin = (
            "(SELECT CASE WHEN count(DISTINCT conversation_id) = 1 THEN max(conversation_id) END"
            f" FROM messages WHERE id IN ({ids}))"
        )
        for fact in facts:  # one statement each: a fact repeated in `facts` sees the one before it
            statements.append(
                Statement(
                    "INSERT INTO pad_entries (person_id, segment_id, mode, text, created_at, conversation_id)"
                    f" SELECT :p, NULL, 'normal', CAST(:fact AS TEXT), :now, {origin}"
                    " WHERE NOT EXISTS (SELECT 1 FROM pad_entries"
                    "  WHERE person_id = :p AND mode = 'normal' AND lower(text) = lower(:fact))",
                    {**params, "p": person_id, "fact": fact, "now": now},
                )
            )
        if message_ids:
            statements.append(
                Statement(f"UPDATE messages SET capture = 'done' WHERE id IN ({ids}) AND capture = 'pending'", params)
            )
        results = await self._engine.write(*statements)
        return int(results[0].scalar)

    async def notes(self, person_id: int, limit: int = 20) -> list[Note]:
        (found,) = await self._engine.read(
            Statement(
                "SELECT id, day, text FROM notes WHERE person_id = :p ORDER BY id DESC LIMIT :limit",
                {"p": person_id, "limit": limit},
                Fetch.ALL,
            )
        )
        return [Note(r["id"], r["day"], r["text"]) for r in found.rows]

    async def forget_note(self, person_id: int, origin: int, note_id: int) -> int:
        """A lasting write like forgetting a memory: refused while `origin` is private. The recall
        index loses the note with it (trigger recall_note_delete)."""
        return await self._changed(
            self._guarded(origin, "change to memory"),
            Statement(
                "DELETE FROM notes WHERE id = :id AND person_id = :p", {"id": note_id, "p": person_id}, Fetch.ROWCOUNT
            ),
        )

    # --- analytics ------------------------------------------------------------

    async def save_run(self, run: RunRecord) -> None:
        """A normal turn's run and its events (a core.turn.analytics.RunRecord), in one write: lasting,
        so refused whole while its conversation is private."""
        guard = self._guarded(run.conversation_id, "analytics")
        await self._engine.write(*guard, *run_rows(run, at=len(guard)))

    async def report_rows(self) -> dict:
        turns, tools, served, errors, latencies, cut_off = await self._engine.read(
            Statement(
                "SELECT count(*) AS turns, count(*) FILTER (WHERE status = 'ok') AS ok,"
                " count(*) FILTER (WHERE status = 'error') AS failed FROM agent_runs",
                fetch=Fetch.ONE,
            ),
            Statement(
                "SELECT name, count(*) AS calls, count(*) FILTER (WHERE status <> 'ok') AS failed"
                " FROM agent_events WHERE kind = 'tool_call' AND server IS NULL GROUP BY name",
                fetch=Fetch.ALL,
            ),
            # Served tools' calls: by server, tool and outcome, with their durations (the server's own time).
            Statement(
                "SELECT server, name, status, count(*) AS calls, avg(duration_ms) AS mean_ms,"
                " max(duration_ms) AS max_ms FROM agent_events WHERE kind = 'tool_call' AND server IS NOT NULL"
                " GROUP BY server, name, status",
                fetch=Fetch.ALL,
            ),
            Statement(
                "SELECT name, count(*) AS n FROM agent_events WHERE kind = 'error' GROUP BY name", fetch=Fetch.ALL
            ),
            Statement(
                "SELECT duration_ms FROM agent_events WHERE kind = 'provider_call' AND duration_ms IS NOT NULL"
                " ORDER BY duration_ms",
                fetch=Fetch.ALL,
            ),
            Statement(
                "SELECT count(*) FROM agent_events WHERE kind = 'provider_call' AND status = 'cut_off'",
                fetch=Fetch.ONE,
            ),
        )
        totals = turns.one or {}
        # Sorted here, not in SQL: names compare by code point on every engine (PostgreSQL's collation would not).
        return {
            "turns": totals["turns"] or 0,
            "ok": totals["ok"] or 0,
            "failed": totals["failed"] or 0,
            "tools": sorted(((r["name"], r["calls"], r["failed"]) for r in tools.rows), key=lambda t: (-t[1], t[0])),
            "served": sorted(
                (r["server"], r["name"], r["status"], r["calls"], r["mean_ms"], r["max_ms"]) for r in served.rows
            ),
            "errors": sorted(((r["name"], r["n"]) for r in errors.rows), key=lambda t: (-t[1], t[0])),
            "latencies": [r["duration_ms"] for r in latencies.rows],
            "cut_off": cut_off.scalar or 0,
        }


# Recall, the one statement no SQL serves on both engines: SQLite's FTS5 table and PostgreSQL's tsvector
# table (migrations/postgres/0014_baseline.sql), each with the same two privacy predicates inside it.
_RECALL_SQLITE = (
    "SELECT f.source, f.rowid / 4 AS ref, f.text, bm25(recall_fts) AS rank"
    " FROM recall_fts f"
    " LEFT JOIN messages m ON f.source = 'message' AND m.id = f.rowid / 4"
    " LEFT JOIN pad_entries p ON f.source = 'pad' AND p.id = f.rowid / 4"
    " WHERE recall_fts MATCH :match AND f.person_id = :person"
    "   AND (f.source <> 'message' OR (m.mode <> 'private' AND m.segment_id IS NULL))"
    "   AND (f.source <> 'pad' OR (p.mode <> 'private' AND p.segment_id IS NULL))"
    " ORDER BY rank LIMIT :limit"
)
# Each word a quoted lexeme (quote_literal), joined by OR: no tsquery operator a person typed comes through.
# The rank is negated so that, as with bm25, lower is better.
_RECALL_POSTGRES = (
    "SELECT r.source, r.ref, r.text, -ts_rank_cd(r.tsv, q.q) AS rank FROM recall_index r"
    " LEFT JOIN messages m ON r.source = 'message' AND m.id = r.ref"
    " LEFT JOIN pad_entries p ON r.source = 'pad' AND p.id = r.ref,"
    " (SELECT to_tsquery('simple', string_agg(quote_literal(w), ' | ')) AS q"
    "  FROM unnest(CAST(:words AS text[])) w) q"
    " WHERE r.tsv @@ q.q AND r.person_id = :person"
    "   AND (r.source <> 'message' OR (m.mode <> 'private' AND m.segment_id IS NULL))"
    "   AND (r.source <> 'pad' OR (p.mode <> 'private' AND p.segment_id IS NULL))"
    " ORDER BY ts_rank_cd(r.tsv, q.q) DESC, r.id DESC LIMIT :limit"
)


def _in_list(prefix: str, values: list[int]) -> tuple[str, dict[str, object]]:
    """`values` as named parameters for `IN (...)`: the list of names, and their values."""
    params: dict[str, object] = {f"{prefix}{n}": value for n, value in enumerate(values)}
    return ", ".join(f":{name}" for name in params), params


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
        values = ", ".join(f"(:k{i}, :n{i}, :s{i}, :d{i}, :i{i}, :o{i}, :t{i}, :v{i})" for i in range(len(run.events)))
        params: dict[str, object] = {"c": run.conversation_id, "run": Ref(at)}
        for i, event in enumerate(run.events):
            kind, name, status, duration, size_in, size_out, created = event[:7]
            server = event[7] if len(event) > 7 else None  # an event of seven fields (older callers) names none
            params.update({f"k{i}": kind, f"n{i}": name, f"s{i}": status, f"d{i}": duration})
            params.update({f"i{i}": size_in, f"o{i}": size_out, f"t{i}": created, f"v{i}": server})
        statements.append(
            Statement(
                "INSERT INTO agent_events"
                " (run_id, kind, name, status, duration_ms, size_in, size_out, created_at, server)"
                # Typed here: a VALUES column of NULLs alone is text on PostgreSQL.
                " SELECT :run, v.column1, v.column2, v.column3, CAST(v.column4 AS DOUBLE PRECISION),"
                " CAST(v.column5 AS INTEGER), CAST(v.column6 AS INTEGER), CAST(v.column7 AS DOUBLE PRECISION),"
                " CAST(v.column8 AS TEXT)"
                f" FROM (VALUES {values}) AS v WHERE {unguarded}",
                params,
            )
        )
    return statements
