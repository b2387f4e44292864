"""Proactive messages: reminders at their time, and nudges that keep their manners or stay silent.

One triage per scheduler tick (missed ticks coalesce into one): the database says what is due.
Reminders go first, then event watches, goal check-ins and open check-ins. A reminder is what
the person asked for: sent at its time in any hours and outside the budget, once; late by
more than LATE_AFTER it says so, late by more than MISSED_AFTER it is marked missed instead. A
nudge keeps the manners (core/proactive/manners.py), at most one per person per tick, and the model may
answer the silence sentinel: a recorded decision, never sent. Every decision is a row without
text. Private mode: the candidate query's SQL never returns a person with an open segment; the
nudge's model input is the masked normal view and the normal pad only (NORMAL state); and the
claim re-checks inside its own transaction, which writes the message, its delivery and mirror
rows together, so a crash cannot send anything twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from core.delivery.mirrors import source_label
from core.delivery.outbox import Outbox
from core.memory.context import ContextAssembler
from core.ports.clock import Clock
from core.ports.metrics import NO_METRICS, Metrics
from core.ports.model import BaseProvider
from core.ports.store.proactive import ProactiveStore
from core.proactive.manners import Manners, local, local_day, why_not, zone_of
from core.values import copy
from core.values.model import ChatMessage, CompletionRequest, ProactiveCandidate, ProactiveDecision
from core.values.modes import NORMAL

log = logging.getLogger(__name__)

LATE_AFTER = 5 * 60.0  # a reminder sent later than this says "(late: due at HH:MM)"
MISSED_AFTER = 12 * 3600.0  # ...and one later than this is marked missed, not sent
_ORDER = {"reminder": 0, "watch": 1, "goal": 2, "checkin": 3}


@dataclass(frozen=True, slots=True)
class ProactiveConfig:
    manners: Manners = field(default_factory=Manners)
    watch_after: float = 3600.0  # an event watch is due this long after its event
    goal_every: float = 3 * 86400.0  # a goal check-in after this long without one
    checkin_after: float = 3 * 86400.0  # an open check-in after this long a silence


@dataclass(slots=True)
class TickResult:
    """What one triage did, counted (tests and the bench read it)."""

    candidates: int = 0
    sent: int = 0
    silent: int = 0
    skipped: int = 0
    missed: int = 0
    private: int = 0


class ProactiveService:
    """The triage behind the `proactive` scheduler job.

    Args:
        store: candidates, claims, decisions and manners.
        provider: writes nudges (or answers the silence sentinel).
        clock: the one clock schedules, budgets and quiet hours are computed from.
        outbox: sends what a claim wrote; its registered platforms are where anything can go.
        context: assembles the masked normal view and normal pad for a nudge.
    """

    def __init__(
        self,
        store: ProactiveStore,
        provider: BaseProvider,
        clock: Clock,
        outbox: Outbox,
        context: ContextAssembler,
        config: ProactiveConfig | None = None,
        metrics: Metrics = NO_METRICS,
        holds: Callable[[int], bool] | None = None,
    ) -> None:
        self._metrics = metrics
        # A shared database (issue 33): the conversations this process holds; each reminder and nudge goes out
        # from the process holding its conversation (the store's claim of it happens once all the same).
        self._holds = holds
        self._store = store
        self._provider = provider
        self._clock = clock
        self._outbox = outbox
        self._context = context
        self.config = config or ProactiveConfig()

    async def tick(self) -> TickResult:
        """One triage of everything due now. Safe to run after any downtime: every decision is
        read from and written to the database, and each claim happens once."""
        now = self._clock.now()
        manners = self.config.manners
        result = TickResult()
        waiting = await self._store.waiting_in_private(
            now,
            watch_after=self.config.watch_after,
            goal_every=self.config.goal_every,
            checkin_after=self.config.checkin_after,
        )
        for person, segment, kind, item in waiting:
            # It waits for normal mode; the row names the segment and goes with it.
            day = local_day(now, zone_of(await self._store.proactive_prefs(person), manners))
            subject = f"{'followup' if kind in ('reminder', 'watch') else kind}:{item}"
            decision = ProactiveDecision(person, kind, subject, "skipped", "private", day, now, segment)
            if await self._store.record_decision(decision):
                result.private += 1
        candidates = await self._store.due_candidates(
            now,
            self._outbox.platforms,
            watch_after=self.config.watch_after,
            goal_every=self.config.goal_every,
            checkin_after=self.config.checkin_after,
        )
        candidates.sort(key=lambda c: (_ORDER[c.kind], c.due_at))
        result.candidates = len(candidates)
        nudged: set[int] = set()  # at most one nudge per person per tick (also the first after a start)
        for candidate in candidates:
            if self._holds is not None and not self._holds(candidate.conversation.id):
                continue
            try:
                if candidate.is_reminder:
                    await self._remind(candidate, now, result)
                elif candidate.prefs.person_id not in nudged and await self._nudge(candidate, now, result):
                    nudged.add(candidate.prefs.person_id)
            except Exception as exc:  # noqa: BLE001 - one person's failure must not stop the others
                log.warning("proactive %s %s failed (%s)", candidate.kind, candidate.subject, type(exc).__name__)
        if result.sent or result.silent or result.missed:
            log.info(
                "proactive tick: %d due, %d sent, %d silent, %d missed, %d skipped",
                result.candidates,
                result.sent,
                result.silent,
                result.missed,
                result.skipped,
            )
        return result

    async def _remind(self, candidate: ProactiveCandidate, now: float, result: TickResult) -> None:
        zone = zone_of(candidate.prefs, self.config.manners)
        day = local_day(now, zone)
        late = now - candidate.due_at
        if late > MISSED_AFTER:
            decision = self._decision(candidate, "missed", "missed", day, now)
            if await self._store.settle_without_message(candidate, decision):
                result.missed += 1
                self._counted(decision)
            return
        text = copy.REMINDER.format(text=candidate.text)
        reason = "due"
        if late > LATE_AFTER:
            text += copy.REMINDER_LATE.format(time=local(candidate.due_at, zone).strftime("%H:%M"))
            reason = "late"
        await self._send(candidate, text, self._decision(candidate, "sent", reason, day, now), result)

    async def _nudge(self, candidate: ProactiveCandidate, now: float, result: TickResult) -> bool:
        """Returns whether the person had their one nudge of this tick (sent or silent)."""
        manners = self.config.manners
        day = local_day(now, zone_of(candidate.prefs, manners))
        sent_today = await self._store.nudges_sent_on(candidate.prefs.person_id, day)
        reason = why_not(now, candidate.prefs, manners, sent_today)
        if reason is not None:
            skipped = self._decision(candidate, "skipped", reason, day, now)
            if await self._store.record_decision(skipped):
                result.skipped += 1
                self._counted(skipped)
            return False
        text = await self._write(candidate)
        if text is None:
            decision = self._decision(candidate, "silent", "model", day, self._clock.now())
            if await self._store.settle_without_message(candidate, decision):
                result.silent += 1
                self._counted(decision)
            return True
        await self._send(candidate, text, self._decision(candidate, "sent", "due", day, self._clock.now()), result)
        return True

    async def _write(self, candidate: ProactiveCandidate) -> str | None:
        """Ask the model for the nudge, from the masked normal view and the normal pad only (the
        NORMAL state: no private pad, every segment one placeholder). None: silence."""
        context = await self._context.assemble(candidate.conversation, NORMAL)
        why = copy.NUDGE_WHY[candidate.kind].format(text=candidate.text)
        messages = (*context.messages, ChatMessage("system", copy.NUDGE_INSTRUCTION.format(why=why)))
        # A provider failure raises: nothing is claimed or recorded, and the next tick asks again.
        completion = await self._provider.complete(
            CompletionRequest(messages, purpose="nudge", temperature=0.7, max_tokens=200)
        )
        text = completion.text.strip()
        if not text or text.upper().startswith(copy.NUDGE_SILENCE):
            return None
        return text

    async def _send(
        self, candidate: ProactiveCandidate, text: str, decision: ProactiveDecision, result: TickResult
    ) -> None:
        sent = await self._store.claim_and_send(candidate, text, decision, source_label(candidate.conversation))
        if sent is None:
            return  # claimed already, or the person is in private mode now: nothing was written
        result.sent += 1
        self._counted(decision)
        log.info("proactive %s %s sent as delivery %d", candidate.kind, candidate.subject, sent.delivery_id)
        await self._outbox.deliver(candidate.conversation.id, sent.delivery_id)
        if sent.mirror_ids:
            await self._outbox.deliver_all(candidate.conversation.id, sent.mirror_ids)

    def _counted(self, decision: ProactiveDecision) -> None:
        """The operator's counter of decisions: by kind and outcome, never a 'private' one (those
        are recorded in `tick` only, where nothing counts them)."""
        self._metrics.nudge_decision(decision.kind, decision.outcome)

    def _decision(
        self, candidate: ProactiveCandidate, outcome: str, reason: str, day: str, now: float
    ) -> ProactiveDecision:
        return ProactiveDecision(
            candidate.prefs.person_id, candidate.kind, candidate.subject, outcome, reason, day, now
        )
