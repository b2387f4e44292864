"""ProactiveQueries' contract (adapters/storage/proactive.py) on SQLite and PostgreSQL: a person in private mode
anywhere is never a candidate and never claimed; a candidate is claimed once; no decision of private mode is
listed."""

from __future__ import annotations

import asyncio

import pytest

from adapters.storage.engine import Database, Statement
from adapters.storage.proactive import ProactiveQueries
from core.values.errors import PrivateWriteRefused
from core.values.model import ProactiveCandidate, ProactiveDecision
from tests.adapters.store.seed import conversation, count, end_segment, insert, open_segment, person, racing

pytestmark = pytest.mark.engines

NOW = 1000.0
TELEGRAM = frozenset({"telegram"})
DAY = 86400.0


async def _due(proactive: ProactiveQueries, now: float = NOW) -> list[ProactiveCandidate]:
    return await proactive.due_candidates(now, TELEGRAM, watch_after=60.0, goal_every=100.0, checkin_after=100.0)


async def _everything_due(engine: Database) -> tuple[int, int, int]:
    """A person with a reminder, a watch and a goal due, and a check-in open: (person, direct chat, other chat)."""
    owner = await person(engine)
    chat = await conversation(engine, owner, chat="1")
    other = await conversation(engine, owner, chat="2", platform="discord")
    for kind, due in (("reminder", 500.0), ("watch", 400.0)):
        await insert(
            engine,
            "INSERT INTO followups (person_id, conversation_id, kind, text, due_at, created_at, updated_at)"
            " VALUES (:p, :c, :k, 'water the plants', :due, 1.0, 1.0)",
            p=owner,
            c=chat,
            k=kind,
            due=due,
        )
    await insert(
        engine,
        "INSERT INTO goals (person_id, conversation_id, title, created_at, updated_at) VALUES (:p, :c, 'run', 1.0, 1.0)",
        p=owner,
        c=chat,
    )
    await engine.write(
        Statement(
            "INSERT INTO proactive_people (person_id, conversation_id, last_wrote_at, checkin_open)"
            " VALUES (:p, :c, 2.0, 1) ON CONFLICT (person_id) DO UPDATE SET conversation_id = excluded.conversation_id,"
            " last_wrote_at = excluded.last_wrote_at, checkin_open = 1",
            {"p": owner, "c": chat},
        )
    )
    return owner, chat, other


def _decision(candidate: ProactiveCandidate, outcome: str = "sent", reason: str = "due") -> ProactiveDecision:
    return ProactiveDecision(candidate.prefs.person_id, candidate.kind, candidate.subject, outcome, reason, "d", NOW)


async def test_a_private_person_is_never_a_nudge_candidate(engine: Database) -> None:
    proactive = ProactiveQueries(engine)
    owner, chat, other = await _everything_due(engine)
    assert sorted(c.kind for c in await _due(proactive)) == ["checkin", "goal", "reminder", "watch"]

    segment = await open_segment(engine, other)  # private elsewhere: private everywhere

    assert await _due(proactive) == []
    waiting = await proactive.waiting_in_private(NOW, watch_after=60.0, goal_every=100.0, checkin_after=100.0)
    assert sorted(kind for _, _, kind, _ in waiting) == ["checkin", "goal", "reminder", "watch"]
    assert {(p, s) for p, s, _, _ in waiting} == {(owner, segment)}
    await end_segment(engine, segment)
    assert len(await _due(proactive)) == 4
    assert [c.conversation.id for c in await _due(proactive)] == [chat] * 4


async def test_a_claim_is_refused_once_the_person_is_private(engine: Database) -> None:
    proactive = ProactiveQueries(engine)
    _, _, other = await _everything_due(engine)
    candidates = await _due(proactive)
    await open_segment(engine, other)
    before = [
        await count(engine, f"SELECT count(*) FROM {t}") for t in ("messages", "deliveries", "proactive_decisions")
    ]

    for candidate in candidates:
        assert await proactive.claim_and_send(candidate, "Reminder: water", _decision(candidate), "telegram") is None
        assert not await proactive.settle_without_message(candidate, _decision(candidate, "skipped", "quiet"))

    after = [
        await count(engine, f"SELECT count(*) FROM {t}") for t in ("messages", "deliveries", "proactive_decisions")
    ]
    assert after == before
    assert await count(engine, "SELECT count(*) FROM followups WHERE status = 'scheduled'") == 2


async def test_a_candidate_is_claimed_once_with_its_message_delivery_and_mirrors(engine: Database) -> None:
    proactive = ProactiveQueries(engine)
    owner, chat, _ = await _everything_due(engine)
    await insert(
        engine,
        "INSERT INTO bindings (conversation_id, platform, chat_id, created_at) VALUES (:c, 'discord', '9', 1.0)",
        c=chat,
    )
    reminder, watch = (c for c in await _due(proactive) if c.kind in ("reminder", "watch"))

    sent = await proactive.claim_and_send(reminder, "Reminder: water", _decision(reminder), "telegram DM")
    again = await proactive.claim_and_send(reminder, "Reminder: water", _decision(reminder), "telegram DM")
    nudged = await proactive.claim_and_send(watch, "How did it go?", _decision(watch), "telegram DM")

    assert sent is not None and again is None and nudged is not None
    assert len(sent.mirror_ids) == 1
    assert await count(engine, "SELECT count(*) FROM messages WHERE role = 'assistant'") == 2
    assert await count(engine, "SELECT count(*) FROM deliveries WHERE kind = 'reminder'") == 1
    assert await count(engine, "SELECT count(*) FROM deliveries WHERE kind = 'nudge'") == 1
    assert await proactive.nudges_sent_on(owner, "d") == 1  # a reminder is not a nudge
    prefs = await proactive.proactive_prefs(owner)
    assert prefs.unanswered == 1 and prefs.last_nudge_at == NOW
    assert [d.kind for d in await proactive.latest_decisions(owner)] == ["watch", "reminder"]


async def test_a_missed_candidate_is_settled_once_without_a_message(engine: Database) -> None:
    proactive = ProactiveQueries(engine)
    await _everything_due(engine)
    reminder = next(c for c in await _due(proactive) if c.kind == "reminder")

    assert await proactive.settle_without_message(reminder, _decision(reminder, "missed", "restart"))
    assert not await proactive.settle_without_message(reminder, _decision(reminder, "missed", "restart"))

    assert await count(engine, "SELECT count(*) FROM followups WHERE outcome = 'missed'") == 1
    assert await count(engine, "SELECT count(*) FROM messages") == 0


async def test_no_decision_of_private_mode_is_listed_and_a_repeated_skip_is_one_row(engine: Database) -> None:
    proactive = ProactiveQueries(engine)
    owner, chat, _ = await _everything_due(engine)
    segment = await open_segment(engine, chat)
    waited = ProactiveDecision(owner, "reminder", "followup:1", "skipped", "private", "d", NOW, segment_id=segment)
    quiet = ProactiveDecision(owner, "watch", "followup:2", "skipped", "quiet", "d", NOW)

    assert await proactive.record_decision(waited)
    assert await proactive.record_decision(quiet)
    assert not await proactive.record_decision(quiet)  # the same skip again: one row
    assert [(d.subject, d.reason) for d in await proactive.latest_decisions(owner)] == [("followup:2", "quiet")]
    await engine.write(Statement("DELETE FROM segments WHERE id = :s", {"s": segment}))
    assert not await proactive.record_decision(waited)  # its interval is gone: not written

    assert [(d.subject, d.reason) for d in await proactive.latest_decisions(owner)] == [("followup:2", "quiet")]
    assert (await proactive.report())["decisions"] == [("watch", "skipped", "quiet", 1)]


async def test_a_nudge_setting_is_refused_while_private(engine: Database) -> None:
    proactive = ProactiveQueries(engine)
    owner, chat, _ = await _everything_due(engine)

    prefs = await proactive.set_proactive_pref(owner, chat, "quiet", "22:00-07:00")
    assert prefs.quiet == "22:00-07:00" and (await proactive.set_proactive_pref(owner, chat, "budget", 2)).budget == 2
    await open_segment(engine, chat)
    with pytest.raises(PrivateWriteRefused):
        await proactive.set_proactive_pref(owner, chat, "budget", 0)
    with pytest.raises(ValueError, match="no manner"):
        await proactive.set_proactive_pref(owner, chat, "unanswered", 0)

    assert (await proactive.proactive_prefs(owner)).budget == 2
    assert (await proactive.proactive_prefs(owner + 1)).budget is None


async def test_a_claim_behind_a_segment_being_opened_is_refused(engine: Database) -> None:
    proactive = ProactiveQueries(engine)
    _, _, other = await _everything_due(engine)
    reminder = next(c for c in await _due(proactive) if c.kind == "reminder")

    claim = proactive.claim_and_send(reminder, "Reminder: water", _decision(reminder), "telegram")
    claimed = await racing(claim, engine, other)  # private on another account: private everywhere

    assert await claimed is None
    assert await count(engine, "SELECT count(*) FROM messages") == 0
    assert await count(engine, "SELECT count(*) FROM followups WHERE status = 'scheduled'") == 2


async def test_two_claims_at_once_send_once(engine: Database) -> None:
    proactive = ProactiveQueries(engine)
    await _everything_due(engine)
    reminder = next(c for c in await _due(proactive) if c.kind == "reminder")

    sent = await asyncio.gather(
        *(proactive.claim_and_send(reminder, "Reminder: water", _decision(reminder), "telegram") for _ in range(2))
    )

    assert sum(s is not None for s in sent) == 1
    assert await count(engine, "SELECT count(*) FROM deliveries") == 1
