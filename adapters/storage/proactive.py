"""SQL of proactive messages: the candidate query (private mode excluded inside it), the claim that
writes a message with its delivery in one transaction, decisions (no text) and each person's manners."""

from __future__ import annotations

from typing import Any

from adapters.storage.bindings import mirror_rows
from adapters.storage.engine import SQLITE, Dialect, Fetch, Row, Statement
from adapters.storage.engine import Database as Engine
from adapters.storage.guard import refusing_while_private
from adapters.storage.outbox import delivery_row
from core.values.errors import StoreError
from core.values.model import (
    Conversation,
    DeliveryTarget,
    MirrorOf,
    ProactiveCandidate,
    ProactiveDecision,
    ProactivePrefs,
    ProactiveSent,
)

# The one predicate of "this person is in private mode somewhere": any conversation of theirs has
# an open segment. Every candidate statement and the claim carry it inside their own SQL.
_NO_PRIVATE_PERSON = (
    "NOT EXISTS (SELECT 1 FROM segments s JOIN conversations sc ON sc.id = s.conversation_id"
    " WHERE s.ended_at IS NULL AND sc.person_id = {p})"
)
# ...and of the target conversation itself (the same thing said twice: a direct conversation
# belongs to its person, but a row planted with another person id is still refused).
_NO_OPEN_SEGMENT = "NOT EXISTS (SELECT 1 FROM segments s2 WHERE s2.conversation_id = {c} AND s2.ended_at IS NULL)"

_PREFS = (
    "pp.budget, pp.quiet, pp.timezone, pp.pinned_conversation_id, pp.last_wrote_at, pp.last_nudge_at,"
    " coalesce(pp.unanswered, 0) AS unanswered, pp.cooldown"
)
_TARGET = "t.id AS cid, t.platform, t.chat_id, t.kind AS ckind, t.person_id AS cperson"
# Where a proactive message goes: `/nudges here`, else the direct conversation the person last
# wrote in (normal mode), else where the item was made. Never a group, never another person's.
# SQLite's CROSS JOIN keeps the due rows' index the outer loop (SQLite never reorders it): without
# statistics the planner would otherwise start from every conversation of the platform.
_TARGET_JOIN = (
    " {join} conversations t ON t.id = coalesce(pp.pinned_conversation_id, pp.conversation_id, {origin})"
    " AND t.kind = 'direct' AND t.person_id = {p} AND t.platform IN ({platforms})"
)
_PREF_NAMES = frozenset({"budget", "quiet", "timezone", "pinned_conversation_id", "cooldown"})
_PREF_COLUMNS = "budget, quiet, timezone, pinned_conversation_id, last_wrote_at, last_nudge_at, unanswered, cooldown"


def _guarded(person: str, target: str) -> str:
    return f" AND {_NO_PRIVATE_PERSON.format(p=person)} AND {_NO_OPEN_SEGMENT.format(c=target)}"


def candidate_statements(
    now: float,
    platforms: frozenset[str],
    *,
    watch_after: float,
    goal_every: float,
    checkin_after: float,
    limit: int,
    dialect: Dialect = SQLITE,
) -> list[tuple[str, str, dict[str, object]]]:
    """(kind, SQL, named parameters) of the four candidate statements; bench/triage.py reads their plans."""
    served: dict[str, object] = {f"pl{i}": platform for i, platform in enumerate(sorted(platforms))}
    marks = ", ".join(f":{name}" for name in served)
    join = dialect.join_in_order
    followups = (
        f"SELECT f.id AS item, f.due_at AS due, f.text AS text, f.person_id AS person, {_TARGET}, {_PREFS}"
        " FROM followups f LEFT JOIN proactive_people pp ON pp.person_id = f.person_id"
        + _TARGET_JOIN.format(join=join, origin="f.conversation_id", p="f.person_id", platforms=marks)
        + " WHERE f.status = 'scheduled' AND f.kind = :kind AND f.due_at IS NOT NULL AND f.due_at <= :due"
        + _guarded("f.person_id", "t.id")
        + " ORDER BY f.due_at, f.id LIMIT :limit"
    )
    goals = (
        "SELECT g.id AS item, coalesce(g.checked_in_at, g.created_at) AS due, g.title AS text,"
        f" g.person_id AS person, {_TARGET}, {_PREFS}"
        " FROM goals g LEFT JOIN proactive_people pp ON pp.person_id = g.person_id"
        + _TARGET_JOIN.format(join=join, origin="g.conversation_id", p="g.person_id", platforms=marks)
        + " WHERE g.status = 'active' AND coalesce(g.checked_in_at, g.created_at) <= :due"
        + _guarded("g.person_id", "t.id")
        + " ORDER BY coalesce(g.checked_in_at, g.created_at), g.id LIMIT :limit"
    )
    checkins = (
        f"SELECT pp.person_id AS item, pp.last_wrote_at AS due, '' AS text, pp.person_id AS person, {_TARGET},"
        f" {_PREFS} FROM proactive_people pp"
        + _TARGET_JOIN.format(join=join, origin="CAST(NULL AS BIGINT)", p="pp.person_id", platforms=marks)
        + " WHERE pp.checkin_open = 1 AND pp.last_wrote_at <= :due"
        + _guarded("pp.person_id", "t.id")
        + " ORDER BY pp.last_wrote_at, pp.person_id LIMIT :limit"
    )
    return [
        ("reminder", followups, {**served, "kind": "reminder", "due": now, "limit": limit}),
        ("watch", followups, {**served, "kind": "watch", "due": now - watch_after, "limit": limit}),
        ("goal", goals, {**served, "due": now - goal_every, "limit": limit}),
        ("checkin", checkins, {**served, "due": now - checkin_after, "limit": limit}),
    ]


class _NothingWritten(Exception):
    """Rolls a claim's transaction back: already claimed, or its person is in private mode now."""


class ProactiveQueries:
    """Implements core.ports.store.proactive (ProactiveStore, PrefsReader, NudgeSettings, DecisionLog) over
    the engine interface (adapters/storage/engine.py)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    # --- candidates -----------------------------------------------------------

    async def due_candidates(
        self,
        now: float,
        platforms: frozenset[str],
        *,
        watch_after: float,
        goal_every: float,
        checkin_after: float,
        limit: int = 500,
    ) -> list[ProactiveCandidate]:
        """Four statements in one read, each an index range over what is due (flat in everyone else),
        each with the privacy predicates inside it; reminders first, then watches, goals, check-ins."""
        if not platforms:
            return []
        statements = candidate_statements(
            now,
            platforms,
            watch_after=watch_after,
            goal_every=goal_every,
            checkin_after=checkin_after,
            limit=limit,
            dialect=self._engine.dialect,
        )
        results = await self._engine.read(*(Statement(sql, params, Fetch.ALL) for _, sql, params in statements))
        return [
            _candidate(kind, row)
            for (kind, _, _), result in zip(statements, results, strict=True)
            for row in result.rows
        ]

    async def waiting_in_private(
        self,
        now: float,
        *,
        watch_after: float = 3600.0,
        goal_every: float = 3 * 86400.0,
        checkin_after: float = 3 * 86400.0,
        limit: int = 500,
    ) -> list[tuple[int, int, str, int]]:
        """From the open segments (few) to their people's due follow-ups, goal check-ins and open
        check-ins (due as `due_candidates` counts them): ids only, never a row of the segment."""
        (found,) = await self._engine.read(
            Statement(
                "SELECT f.person_id AS person, s.id AS segment, f.kind AS kind, f.id AS item, f.due_at AS due"
                " FROM segments s"
                " JOIN conversations c ON c.id = s.conversation_id AND c.person_id IS NOT NULL"
                " JOIN followups f ON f.person_id = c.person_id AND f.status = 'scheduled'"
                "  AND f.due_at <= CASE f.kind WHEN 'watch' THEN :watch ELSE :now END"
                " WHERE s.ended_at IS NULL"
                " UNION ALL SELECT g.person_id, s.id, 'goal', g.id, coalesce(g.checked_in_at, g.created_at)"
                " FROM segments s"
                " JOIN conversations c ON c.id = s.conversation_id AND c.person_id IS NOT NULL"
                " JOIN goals g ON g.person_id = c.person_id AND g.status = 'active'"
                "  AND coalesce(g.checked_in_at, g.created_at) <= :goal"
                " WHERE s.ended_at IS NULL"
                " UNION ALL SELECT pp.person_id, s.id, 'checkin', pp.person_id, pp.last_wrote_at FROM segments s"
                " JOIN conversations c ON c.id = s.conversation_id AND c.person_id IS NOT NULL"
                " JOIN proactive_people pp ON pp.person_id = c.person_id AND pp.checkin_open = 1"
                "  AND pp.last_wrote_at <= :checkin"
                " WHERE s.ended_at IS NULL ORDER BY 5, 4 LIMIT :limit",
                {
                    "now": now,
                    "watch": now - watch_after,
                    "goal": now - goal_every,
                    "checkin": now - checkin_after,
                    "limit": limit,
                },
                Fetch.ALL,
            )
        )
        return [(r["person"], r["segment"], r["kind"], r["item"]) for r in found.rows]

    async def nudges_sent_on(self, person_id: int, local_day: str) -> int:
        (found,) = await self._engine.read(
            Statement(
                "SELECT count(*) FROM proactive_decisions WHERE person_id = :p AND local_day = :day"
                " AND outcome = 'sent' AND kind <> 'reminder'",
                {"p": person_id, "day": local_day},
                Fetch.ONE,
            )
        )
        return int(found.scalar or 0)

    # --- decisions --------------------------------------------------------------

    async def latest_decisions(self, person_id: int, limit: int = 20) -> list[ProactiveDecision]:
        """Newest first; never a decision of private mode (`segment_id IS NULL`): while its interval
        lives, even that a reminder waited for it is the interval's to keep."""
        (found,) = await self._engine.read(
            Statement(
                "SELECT person_id, kind, subject, outcome, reason, local_day, decided_at FROM proactive_decisions"
                " WHERE person_id = :p AND segment_id IS NULL ORDER BY id DESC LIMIT :limit",
                {"p": person_id, "limit": limit},
                Fetch.ALL,
            )
        )
        return [
            ProactiveDecision(
                r["person_id"], r["kind"], r["subject"], r["outcome"], r["reason"], r["local_day"], r["decided_at"]
            )
            for r in found.rows
        ]

    async def record_decision(self, decision: ProactiveDecision) -> bool:
        (written,) = await self._engine.write(_decision_row(decision))
        return written.rowcount == 1

    # --- the claim --------------------------------------------------------------

    async def claim_and_send(
        self,
        candidate: ProactiveCandidate,
        text: str,
        decision: ProactiveDecision,
        mirror_label: str,
    ) -> ProactiveSent | None:
        try:
            return await self._claim_and_send(candidate, text, decision, mirror_label)
        except _NothingWritten:
            return None

    async def _claim_and_send(
        self,
        candidate: ProactiveCandidate,
        text: str,
        decision: ProactiveDecision,
        mirror_label: str,
    ) -> ProactiveSent:
        conversation = candidate.conversation
        now = decision.decided_at
        # A transaction of two trips: the rest is written only once the claim and the message were.
        async with self._engine.tx() as tx:
            claimed, message = (
                await tx.run(
                    *self._person_locked(candidate.prefs.person_id),
                    _claim(candidate, now, "sent"),
                    # The message is written only where no segment is open (SQLite's BEGIN IMMEDIATE, and
                    # PostgreSQL's lock on the person's conversations, which the valve takes too: none opens now).
                    Statement(
                        "INSERT INTO messages (conversation_id, segment_id, mode, role, kind, text, capture, created_at)"
                        " SELECT c.id, NULL, 'normal', 'assistant', 'chat', :text, 'pending', :now FROM conversations c"
                        " WHERE c.id = :c AND c.kind = 'direct'"
                        f" AND {_NO_PRIVATE_PERSON.format(p='c.person_id')} AND {_NO_OPEN_SEGMENT.format(c='c.id')}"
                        " RETURNING id",
                        {"text": text, "now": now, "c": conversation.id},
                        Fetch.ONE,
                    ),
                )
            )[-2:]
            if claimed.rowcount != 1 or message.one is None:
                raise _NothingWritten  # rolls the claim (or the message) back with it
            message_id = int(message.scalar)
            statements = [
                delivery_row(
                    conversation.id,
                    DeliveryTarget(conversation.platform, conversation.chat_id),
                    text,
                    now,
                    kind="reminder" if candidate.is_reminder else "nudge",
                    message_id=message_id,
                ),
                mirror_rows(conversation.id, message_id, MirrorOf(None, mirror_label), now),
                _decision_row(decision),
            ]
            if not candidate.is_reminder:
                statements.append(
                    Statement(
                        "INSERT INTO proactive_people (person_id, last_nudge_at, unanswered) VALUES (:p, :now, 1)"
                        " ON CONFLICT (person_id) DO UPDATE SET last_nudge_at = excluded.last_nudge_at,"
                        " unanswered = proactive_people.unanswered + 1",
                        {"p": candidate.prefs.person_id, "now": now},
                    )
                )
            delivery, mirrors, *_ = await tx.run(*statements)
            return ProactiveSent(message_id, int(delivery.scalar), tuple(sorted(r["id"] for r in mirrors.rows)))

    async def settle_without_message(self, candidate: ProactiveCandidate, decision: ProactiveDecision) -> bool:
        outcome = "missed" if decision.outcome == "missed" else None
        async with self._engine.tx() as tx:
            claimed = (
                await tx.run(
                    *self._person_locked(candidate.prefs.person_id), _claim(candidate, decision.decided_at, outcome)
                )
            )[-1]
            if claimed.rowcount != 1:
                return False
            await tx.run(_decision_row(decision))
            return True

    def _person_locked(self, person_id: int) -> tuple[Statement, ...]:
        """On PostgreSQL, the person's conversations locked as the valve locks one to open a segment, so none
        opens between a claim's privacy check and its commit (SQLite's BEGIN IMMEDIATE does that)."""
        if not self._engine.dialect.for_update:
            return ()
        return (
            Statement(
                f"SELECT id FROM conversations WHERE person_id = :p ORDER BY id{self._engine.dialect.for_update}",
                {"p": person_id},
            ),
        )

    # --- manners ----------------------------------------------------------------

    async def proactive_prefs(self, person_id: int) -> ProactivePrefs:
        (found,) = await self._engine.read(
            Statement(f"SELECT {_PREF_COLUMNS} FROM proactive_people WHERE person_id = :p", {"p": person_id}, Fetch.ONE)
        )
        return ProactivePrefs(person_id) if found.one is None else _prefs(person_id, found.one)

    async def set_proactive_pref(
        self, person_id: int, origin: int, name: str, value: float | str | None
    ) -> ProactivePrefs:
        if name not in _PREF_NAMES:
            raise ValueError(f"no manner named {name}")
        *_, written = await self._engine.write(
            *refusing_while_private(self._engine.dialect, origin, "nudge setting"),
            Statement(
                f"INSERT INTO proactive_people (person_id, {name}) VALUES (:p, :value)"
                f" ON CONFLICT (person_id) DO UPDATE SET {name} = excluded.{name} RETURNING {_PREF_COLUMNS}",
                {"p": person_id, "value": value},
                Fetch.ONE,
            ),
        )
        return _prefs(person_id, present_row(written.one))

    async def report(self) -> dict[str, Any]:
        """For `companion report`: decisions counted by kind, outcome and reason. No text."""
        (found,) = await self._engine.read(
            Statement(
                "SELECT kind, outcome, reason, count(*) AS n FROM proactive_decisions GROUP BY kind, outcome, reason",
                fetch=Fetch.ALL,
            )
        )
        # Sorted here (no reason first, as SQLite orders NULL), not by either engine's collation.
        rows = sorted(found.rows, key=lambda r: (r["kind"], r["outcome"], r["reason"] is not None, r["reason"] or ""))
        return {"decisions": [(r["kind"], r["outcome"], r["reason"], r["n"]) for r in rows]}


def _claim(candidate: ProactiveCandidate, now: float, outcome: str | None) -> Statement:
    """Take the candidate if it is still due as it was read and its person has no open segment. The
    second of two claims finds nothing (rowcount 0)."""
    person = candidate.prefs.person_id
    if candidate.kind in ("reminder", "watch"):
        sql = (
            "UPDATE followups SET status = 'done', outcome = CAST(:outcome AS TEXT), updated_at = :now"
            " WHERE id = :item AND status = 'scheduled' AND due_at = :due AND person_id = :person"
        )
    elif candidate.kind == "goal":
        sql = (
            "UPDATE goals SET checked_in_at = :now WHERE id = :item AND status = 'active'"
            " AND coalesce(checked_in_at, created_at) = :due AND person_id = :person"
        )
    else:
        sql = (
            "UPDATE proactive_people SET checkin_open = 0 WHERE person_id = :item AND checkin_open = 1"
            " AND last_wrote_at = :due AND person_id = :person"
        )
    sql += f" AND {_NO_PRIVATE_PERSON.format(p=':person')}"
    params: dict[str, object] = {"now": now, "item": candidate.item_id, "due": candidate.due_at, "person": person}
    if ":outcome" in sql:
        params["outcome"] = outcome
    return Statement(sql, params, Fetch.ROWCOUNT)


def _decision_row(decision: ProactiveDecision) -> Statement:
    """A decision, as a statement. A skip that repeats the subject's latest decision is not written again
    (a nudge waiting out quiet hours is one row, not one per tick). A 'private' one only while its segment
    exists."""
    return Statement(
        "INSERT INTO proactive_decisions (person_id, segment_id, kind, subject, outcome, reason, local_day,"
        " decided_at) SELECT :person, CAST(:segment AS BIGINT), :kind, :subject, CAST(:outcome AS TEXT),"
        " CAST(:reason AS TEXT), :day, :at"
        " WHERE (CAST(:segment AS BIGINT) IS NULL OR EXISTS (SELECT 1 FROM segments WHERE id = :segment))"
        " AND (CAST(:outcome AS TEXT) <> 'skipped' OR NOT EXISTS (SELECT 1 FROM proactive_decisions d"
        "  WHERE d.id = (SELECT max(id) FROM proactive_decisions WHERE subject = :subject AND person_id = :person)"
        "  AND d.outcome = 'skipped' AND d.reason = :reason"
        "  AND d.segment_id IS NOT DISTINCT FROM CAST(:segment AS BIGINT)))",
        {
            "person": decision.person_id,
            "segment": decision.segment_id,
            "kind": decision.kind,
            "subject": decision.subject,
            "outcome": decision.outcome,
            "reason": decision.reason,
            "day": decision.local_day,
            "at": decision.decided_at,
        },
        Fetch.ROWCOUNT,
    )


def present_row(row: Row | None) -> Row:
    """The row a write that always returns one returned."""
    if row is None:
        raise StoreError("a write that always returns a row returned none")
    return row


def _prefs(person_id: int, row: Row) -> ProactivePrefs:
    return ProactivePrefs(
        person_id=person_id,
        budget=row["budget"],
        quiet=row["quiet"],
        timezone=row["timezone"],
        pinned_conversation_id=row["pinned_conversation_id"],
        last_wrote_at=row["last_wrote_at"],
        last_nudge_at=row["last_nudge_at"],
        unanswered=row["unanswered"] or 0,
        cooldown=row["cooldown"],
    )


def _candidate(kind: str, row: Row) -> ProactiveCandidate:
    return ProactiveCandidate(
        kind=kind,
        item_id=row["item"],
        due_at=row["due"],
        text=row["text"],
        conversation=Conversation(row["cid"], row["platform"], row["chat_id"], row["ckind"], row["cperson"]),
        prefs=_prefs(row["person"], row),
    )
