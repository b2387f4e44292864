"""SQL of proactive messages: the candidate query (private mode excluded inside it), the claim that
writes a message with its delivery in one transaction, decisions (no text) and each person's manners."""

from __future__ import annotations

from typing import Any

import aiosqlite

from adapters.storage.bindings import insert_mirrors
from adapters.storage.database import Database, inserted_id
from adapters.storage.guard import lasting_tx
from adapters.storage.outbox import insert_delivery
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
# CROSS JOIN keeps the due rows' index the outer loop (SQLite never reorders it): without
# statistics the planner would otherwise start from every conversation of the platform.
_TARGET_JOIN = (
    " CROSS JOIN conversations t ON t.id = coalesce(pp.pinned_conversation_id, pp.conversation_id, {origin})"
    " AND t.kind = 'direct' AND t.person_id = {p} AND t.platform IN ({platforms})"
)
_PREF_NAMES = frozenset({"budget", "quiet", "timezone", "pinned_conversation_id", "cooldown"})


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
) -> list[tuple[str, str, tuple[object, ...]]]:
    """(kind, SQL, parameters) of the four candidate statements; bench/triage.py reads their plans."""
    marks = ", ".join("?" for _ in platforms)
    served = tuple(sorted(platforms))
    followups = (
        f"SELECT f.id AS item, f.due_at AS due, f.text AS text, f.person_id AS person, {_TARGET}, {_PREFS}"
        " FROM followups f LEFT JOIN proactive_people pp ON pp.person_id = f.person_id"
        + _TARGET_JOIN.format(origin="f.conversation_id", p="f.person_id", platforms=marks)
        + " WHERE f.status = 'scheduled' AND f.kind = ? AND f.due_at IS NOT NULL AND f.due_at <= ?"
        + _guarded("f.person_id", "t.id")
        + " ORDER BY f.due_at, f.id LIMIT ?"
    )
    goals = (
        "SELECT g.id AS item, coalesce(g.checked_in_at, g.created_at) AS due, g.title AS text,"
        f" g.person_id AS person, {_TARGET}, {_PREFS}"
        " FROM goals g LEFT JOIN proactive_people pp ON pp.person_id = g.person_id"
        + _TARGET_JOIN.format(origin="g.conversation_id", p="g.person_id", platforms=marks)
        + " WHERE g.status = 'active' AND coalesce(g.checked_in_at, g.created_at) <= ?"
        + _guarded("g.person_id", "t.id")
        + " ORDER BY coalesce(g.checked_in_at, g.created_at), g.id LIMIT ?"
    )
    checkins = (
        f"SELECT pp.person_id AS item, pp.last_wrote_at AS due, '' AS text, pp.person_id AS person, {_TARGET},"
        f" {_PREFS} FROM proactive_people pp"
        + _TARGET_JOIN.format(origin="NULL", p="pp.person_id", platforms=marks)
        + " WHERE pp.checkin_open = 1 AND pp.last_wrote_at <= ?"
        + _guarded("pp.person_id", "t.id")
        + " ORDER BY pp.last_wrote_at, pp.person_id LIMIT ?"
    )
    return [
        ("reminder", followups, (*served, "reminder", now, limit)),
        ("watch", followups, (*served, "watch", now - watch_after, limit)),
        ("goal", goals, (*served, now - goal_every, limit)),
        ("checkin", checkins, (*served, now - checkin_after, limit)),
    ]


class _NothingWritten(Exception):
    """Rolls a claim's transaction back: already claimed, or its person is in private mode now."""


class ProactiveQueries:
    """Implements core.ports.store.proactive (ProactiveStore, PrefsReader, NudgeSettings, DecisionLog)."""

    def __init__(self, db: Database) -> None:
        self._db = db

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
        """Four statements, each an index range over what is due (flat in everyone else), each
        with the privacy predicates inside it; reminders first, then watches, goals, check-ins."""
        if not platforms:
            return []
        found: list[ProactiveCandidate] = []
        for kind, sql, params in candidate_statements(
            now, platforms, watch_after=watch_after, goal_every=goal_every, checkin_after=checkin_after, limit=limit
        ):
            found += [_candidate(kind, row) for row in await self._db.all(sql, params)]
        return found

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
        rows = await self._db.all(
            "SELECT f.person_id, s.id, f.kind, f.id, f.due_at FROM segments s"
            " JOIN conversations c ON c.id = s.conversation_id AND c.person_id IS NOT NULL"
            " JOIN followups f ON f.person_id = c.person_id AND f.status = 'scheduled'"
            "  AND f.due_at <= CASE f.kind WHEN 'watch' THEN :watch ELSE :now END"
            " WHERE s.ended_at IS NULL"
            " UNION ALL SELECT g.person_id, s.id, 'goal', g.id, coalesce(g.checked_in_at, g.created_at) FROM segments s"
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
        )
        return [(r[0], r[1], r[2], r[3]) for r in rows]

    async def nudges_sent_on(self, person_id: int, local_day: str) -> int:
        row = await self._db.one(
            "SELECT count(*) FROM proactive_decisions WHERE person_id = ? AND local_day = ? AND outcome = 'sent'"
            " AND kind <> 'reminder'",
            (person_id, local_day),
        )
        return int(row[0]) if row is not None else 0

    # --- decisions --------------------------------------------------------------

    async def latest_decisions(self, person_id: int, limit: int = 20) -> list[ProactiveDecision]:
        """Newest first; never a decision of private mode (`segment_id IS NULL`): while its interval
        lives, even that a reminder waited for it is the interval's to keep."""
        rows = await self._db.all(
            "SELECT person_id, kind, subject, outcome, reason, local_day, decided_at FROM proactive_decisions"
            " WHERE person_id = ? AND segment_id IS NULL ORDER BY id DESC LIMIT ?",
            (person_id, limit),
        )
        return [ProactiveDecision(r[0], r[1], r[2], r[3], r[4], r[5], r[6]) for r in rows]

    async def record_decision(self, decision: ProactiveDecision) -> bool:
        async with self._db.tx() as db:
            return await _insert_decision(db, decision)

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
        async with self._db.tx() as db:
            if not await _claim(db, candidate, now, "sent"):
                raise _NothingWritten
            # The message is written only where no segment is open (BEGIN IMMEDIATE: none opens now).
            cur = await db.execute(
                "INSERT INTO messages (conversation_id, segment_id, mode, role, kind, text, capture, created_at)"
                " SELECT c.id, NULL, 'normal', 'assistant', 'chat', :text, 'pending', :now FROM conversations c"
                " WHERE c.id = :c AND c.kind = 'direct'"
                f" AND {_NO_PRIVATE_PERSON.format(p='c.person_id')} AND {_NO_OPEN_SEGMENT.format(c='c.id')}",
                {"text": text, "now": now, "c": conversation.id},
            )
            if cur.rowcount != 1:
                raise _NothingWritten  # rolls the claim back with it
            message_id = inserted_id(cur)
            delivery_id = await insert_delivery(
                db,
                conversation.id,
                DeliveryTarget(conversation.platform, conversation.chat_id),
                text,
                now,
                kind="reminder" if candidate.is_reminder else "nudge",
                message_id=message_id,
            )
            mirror_ids = await insert_mirrors(db, conversation.id, message_id, MirrorOf(None, mirror_label), now)
            if not candidate.is_reminder:
                await db.execute(
                    "INSERT INTO proactive_people (person_id, last_nudge_at, unanswered) VALUES (?, ?, 1)"
                    " ON CONFLICT (person_id) DO UPDATE SET last_nudge_at = excluded.last_nudge_at,"
                    " unanswered = unanswered + 1",
                    (candidate.prefs.person_id, now),
                )
            await _insert_decision(db, decision)
            return ProactiveSent(message_id, delivery_id, mirror_ids)

    async def settle_without_message(self, candidate: ProactiveCandidate, decision: ProactiveDecision) -> bool:
        async with self._db.tx() as db:
            outcome = "missed" if decision.outcome == "missed" else None
            if not await _claim(db, candidate, decision.decided_at, outcome):
                return False
            await _insert_decision(db, decision)
            return True

    # --- manners ----------------------------------------------------------------

    async def proactive_prefs(self, person_id: int) -> ProactivePrefs:
        row = await self._db.one(
            "SELECT budget, quiet, timezone, pinned_conversation_id, last_wrote_at, last_nudge_at, unanswered,"
            " cooldown FROM proactive_people pp WHERE person_id = ?",
            (person_id,),
        )
        return ProactivePrefs(person_id) if row is None else _prefs(person_id, row)

    async def set_proactive_pref(
        self, person_id: int, origin: int, name: str, value: float | str | None
    ) -> ProactivePrefs:
        if name not in _PREF_NAMES:
            raise ValueError(f"no manner named {name}")
        async with lasting_tx(self._db, origin, "nudge setting") as db:
            await db.execute(
                f"INSERT INTO proactive_people (person_id, {name}) VALUES (?, ?)"
                f" ON CONFLICT (person_id) DO UPDATE SET {name} = excluded.{name}",
                (person_id, value),
            )
        return await self.proactive_prefs(person_id)

    async def report(self) -> dict[str, Any]:
        """For `companion report`: decisions counted by kind, outcome and reason. No text."""
        rows = await self._db.all(
            "SELECT kind, outcome, reason, count(*) FROM proactive_decisions"
            " GROUP BY kind, outcome, reason ORDER BY kind, outcome, reason"
        )
        return {"decisions": [(r[0], r[1], r[2], r[3]) for r in rows]}


async def _claim(db: aiosqlite.Connection, candidate: ProactiveCandidate, now: float, outcome: str | None) -> bool:
    """Inside the caller's transaction: take the candidate if it is still due as it was read and
    its person has no open segment. The second of two claims finds nothing (rowcount 0)."""
    person = candidate.prefs.person_id
    if candidate.kind in ("reminder", "watch"):
        sql = (
            "UPDATE followups SET status = 'done', outcome = :outcome, updated_at = :now"
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
    cur = await db.execute(
        sql, {"outcome": outcome, "now": now, "item": candidate.item_id, "due": candidate.due_at, "person": person}
    )
    return cur.rowcount == 1


async def _insert_decision(db: aiosqlite.Connection, decision: ProactiveDecision) -> bool:
    """A skip that repeats the subject's latest decision is not written again (a nudge waiting
    out quiet hours is one row, not one per tick). A 'private' one only while its segment exists."""
    cur = await db.execute(
        "INSERT INTO proactive_decisions (person_id, segment_id, kind, subject, outcome, reason, local_day,"
        " decided_at) SELECT :person, :segment, :kind, :subject, :outcome, :reason, :day, :at"
        " WHERE (:segment IS NULL OR EXISTS (SELECT 1 FROM segments WHERE id = :segment))"
        " AND (:outcome <> 'skipped' OR NOT EXISTS (SELECT 1 FROM proactive_decisions d"
        "  WHERE d.id = (SELECT max(id) FROM proactive_decisions WHERE subject = :subject AND person_id = :person)"
        "  AND d.outcome = 'skipped' AND d.reason = :reason AND d.segment_id IS :segment))",
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
    )
    return cur.rowcount == 1


def _prefs(person_id: int, row: aiosqlite.Row) -> ProactivePrefs:
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


def _candidate(kind: str, row: aiosqlite.Row) -> ProactiveCandidate:
    return ProactiveCandidate(
        kind=kind,
        item_id=row["item"],
        due_at=row["due"],
        text=row["text"],
        conversation=Conversation(row["cid"], row["platform"], row["chat_id"], row["ckind"], row["cperson"]),
        prefs=_prefs(row["person"], row),
    )
