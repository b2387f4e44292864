"""The ports of reminders and nudges: what is due, the claim, the decision record (no text) and each
person's manners (adapters.storage.proactive.ProactiveQueries implements all)."""

from __future__ import annotations

from typing import Protocol

from core.values.model import ProactiveCandidate, ProactiveDecision, ProactivePrefs, ProactiveSent


class PrefsReader(Protocol):
    """A person's manners (their time zone, for one: the responder, commands, the owner's pages)."""

    async def proactive_prefs(self, person_id: int) -> ProactivePrefs: ...


class NudgeSettings(PrefsReader, Protocol):
    """`/nudges` and the owner's pages change a manner."""

    async def set_proactive_pref(
        self, person_id: int, origin: int, name: str, value: float | str | None
    ) -> ProactivePrefs:
        """Change one manner (`name`: budget, quiet, timezone, pinned_conversation_id or cooldown; None:
        back to the default) and return them all.

        Raises:
            core.values.errors.PrivateWriteRefused: the conversation `origin` has an open segment.
        """
        ...


class DecisionLog(Protocol):
    """The person's latest decisions (the owner's pages)."""

    async def latest_decisions(self, person_id: int, limit: int = 20) -> list[ProactiveDecision]:
        """The person's newest decisions, newest first: kinds, outcomes and reasons (no text), never
        one of private mode (those name their segment, and go with it)."""
        ...


class ProactiveStore(PrefsReader, Protocol):
    """Reminders and nudges: what is due (never for a conversation with an open segment, by the
    SQL), the claim that writes a message with its delivery, the decision record (no text) and
    each person's manners (core.proactive.service.ProactiveService)."""

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
        """What is due now for people reachable on `platforms`, oldest first per kind. The SQL
        excludes every person with an open segment in any conversation, groups, and any
        conversation that is not direct."""
        ...

    async def waiting_in_private(
        self,
        now: float,
        *,
        watch_after: float = 3600.0,
        goal_every: float = 3 * 86400.0,
        checkin_after: float = 3 * 86400.0,
        limit: int = 500,
    ) -> list[tuple[int, int, str, int]]:
        """(person, open segment, kind, item id) of what is due now (follow-ups, goal check-ins,
        open check-ins) whose person is in private mode: ids only, for the 'private' decision
        (they wait). Reads no message, pad or any row of the segment."""
        ...

    async def nudges_sent_on(self, person_id: int, local_day: str) -> int: ...

    async def record_decision(self, decision: ProactiveDecision) -> bool:
        """Record a decision; a skip repeating the subject's latest decision is not recorded
        again. Returns whether a row was written."""
        ...

    async def claim_and_send(
        self,
        candidate: ProactiveCandidate,
        text: str,
        decision: ProactiveDecision,
        mirror_label: str,
    ) -> ProactiveSent | None:
        """One transaction: claim the candidate (it must still be due and its person must have no
        open segment), store `text` as a normal assistant message in the candidate's
        conversation, write its delivery (kind reminder or nudge) and mirror rows, the person's
        nudge state and `decision`. Returns None (nothing written) when it was claimed already
        or the person is in private mode now."""
        ...

    async def settle_without_message(self, candidate: ProactiveCandidate, decision: ProactiveDecision) -> bool:
        """Claim the candidate with no message (silence, or a missed reminder) and record
        `decision`, in one transaction. Returns False when it was claimed already."""
        ...
