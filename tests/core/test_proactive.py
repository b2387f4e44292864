"""Reminders and nudges (issue 14): the triage called directly, time moved by the injected clock.

The core, the real SQLite store and the outbox run for real; the far end is a FakeSender.
"""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

import adapters.storage.proactive as proactive_sql
from bot.bootstrap import build_companion
from core.delivery.outbox import Outbox
from core.proactive.manners import Manners
from core.proactive.service import ProactiveConfig
from core.turn.companion import Companion
from core.turn.config import CompanionConfig
from core.values import copy
from core.values.model import Completion, InboundMessage, ProactiveDecision
from tests.conftest import PASSPHRASE
from tests.helpers import engines
from tests.helpers.chat import all_rows, segments_of
from tests.helpers.fakes import FakeSender, request_text

# The privacy tests of this module run on both engines (marked one by one); the rest are the scheduler's own
# (budgets, quiet hours, time zones), whose SQL tests/adapters/store/test_proactive_contract.py runs on both.

USER = "100"
CANARY = "NUDGE-PRIVATE-CANARY"
HOUR = 3600.0


def at(clock, moment: str, zone: str = "UTC") -> None:
    """Set the clock to a wall-clock moment in a zone (`2027-01-15 09:00`)."""
    clock.t = datetime.fromisoformat(moment).replace(tzinfo=ZoneInfo(zone)).timestamp()


@pytest.fixture
def telegram() -> FakeSender:
    return FakeSender("telegram")


@pytest.fixture
def make(stores, provider, clock, passphrase_hash, telegram):
    async def make(**manners) -> Companion:
        manners.setdefault("quiet_hours", None)
        outbox = Outbox(stores.outbox, clock, rand=lambda: 1.0)
        outbox.register(telegram)
        companion = build_companion(
            stores,
            provider,
            CompanionConfig(
                passphrase_hash=passphrase_hash,
                allowed_accounts=frozenset({f"telegram:{USER}", "telegram:200"}),
                platforms=frozenset({"telegram"}),
                proactive=ProactiveConfig(Manners(**manners)),
            ),
            clock=clock,
            outbox=outbox,
        )
        await companion.start()
        return companion

    return make


_ids = iter(range(1, 10**6))


async def tell(companion: Companion, text: str, user: str = USER, chat: str | None = None, direct: bool = True):
    message = InboundMessage(
        "telegram",
        chat or user,
        user,
        text,
        is_direct=direct,
        message_id=f"m{next(_ids)}",
        sent_at=companion.clock.now(),
    )
    reply = await companion.handle(message)
    assert reply is not None
    if reply.delivery_id is not None and companion.outbox is not None:
        await companion.outbox.deliver(reply.conversation_id, reply.delivery_id)
    return reply


async def tick(companion: Companion):
    assert companion.proactive is not None
    return await companion.proactive.tick()


async def person_and_chat(stores, user: str = USER) -> tuple[int, int]:
    row = await engines.first(stores, "SELECT person_id, id FROM conversations WHERE chat_id = ?", (user,))
    return row[0], row[1]


async def watch(companion: Companion, text: str, due: float) -> int:
    person, chat = await person_and_chat(engines.stores_of(companion))
    return await engines.stores_of(companion).memory.add_followup(
        person, chat, "watch", text, due, companion.clock.now()
    )


async def decisions(stores) -> list[tuple]:
    return await all_rows(stores, "SELECT kind, outcome, reason FROM proactive_decisions ORDER BY id")


def proactive_sent(telegram: FakeSender) -> list[str]:
    return [t for t in telegram.texts() if t.startswith("Reminder:")]


# --- reminders ------------------------------------------------------------------------------


async def test_reminder_is_sent_at_its_time_exactly_once(make, clock, stores, telegram):
    companion = await make()
    await tell(companion, "/followup 30m call mum")
    clock.advance(29 * 60)
    assert (await tick(companion)).sent == 0
    clock.advance(60)
    assert (await tick(companion)).sent == 1
    for _ in range(3):
        clock.advance(60)
        await tick(companion)
    assert proactive_sent(telegram) == ["Reminder: call mum"]
    assert await all_rows(stores, "SELECT kind, status FROM deliveries WHERE kind = 'reminder'") == [
        ("reminder", "sent")
    ]
    # Stored as a normal assistant message, like any reply.
    assert await all_rows(stores, "SELECT mode, role FROM messages WHERE text = 'Reminder: call mum'") == [
        ("normal", "assistant")
    ]
    assert await decisions(stores) == [("reminder", "sent", "due")]


async def test_reminder_inside_quiet_hours_is_sent_on_time(make, clock, stores, telegram):
    companion = await make(quiet_hours="22:00-08:00", timezone="Europe/Berlin")
    at(clock, "2027-01-15 23:00", "Europe/Berlin")
    await tell(companion, "/followup 30m take the pill")
    clock.advance(30 * 60)
    assert (await tick(companion)).sent == 1
    assert proactive_sent(telegram) == ["Reminder: take the pill"]


async def test_late_reminder_says_when_it_was_due_and_is_sent_once(make, clock, stores, telegram):
    companion = await make(timezone="Europe/Berlin")
    at(clock, "2027-01-15 06:30", "Europe/Berlin")
    await tell(companion, "/timezone Europe/Berlin")
    await tell(companion, "/followup 30m call mum")  # due at 07:00 Berlin
    clock.advance(30 * 60 + 3 * HOUR)  # the gateway was down
    await tick(companion)
    await tick(companion)
    assert proactive_sent(telegram) == ["Reminder: call mum (late: due at 07:00)"]
    assert await decisions(stores) == [("reminder", "sent", "late")]


async def test_reminder_more_than_12_hours_late_is_marked_missed_and_listed(make, clock, stores, telegram):
    companion = await make()
    await tell(companion, "/followup 30m call mum")
    clock.advance(30 * 60 + 13 * HOUR)
    result = await tick(companion)
    assert (result.sent, result.missed) == (0, 1)
    assert proactive_sent(telegram) == []
    assert await decisions(stores) == [("reminder", "missed", "missed")]
    listing = await tell(companion, "/followups")
    assert "call mum (missed" in listing.text
    await tell(companion, "/followup cancel 1")
    assert "No follow-ups." in (await tell(companion, "/followups")).text


# --- nudges: budget, quiet hours, cooldown, back-off, silence ----------------------------------


async def test_budget_is_per_local_day_of_the_person(make, clock, stores, telegram):
    companion = await make(cooldown=0.0, budget=2, backoff_after=99)
    at(clock, "2027-01-15 09:00", "America/New_York")
    await tell(companion, "/timezone America/New_York")
    for n in range(4):
        await watch(companion, f"event {n}", clock.now() - 2 * HOUR)
    clock.advance(HOUR)  # not active any more
    at(clock, "2027-01-15 20:00", "America/New_York")  # 01:00 UTC the next day: still the 15th there
    for _ in range(3):
        await tick(companion)
        clock.advance(60)
    assert len(telegram.texts_to(USER)) - 1 == 2  # the /timezone answer, then two nudges
    assert ("watch", "skipped", "budget") in await decisions(stores)
    at(clock, "2027-01-15 23:59", "America/New_York")
    await tick(companion)
    assert [d for d in await decisions(stores) if d[1] == "sent"] == [("watch", "sent", "due")] * 2
    at(clock, "2027-01-16 00:01", "America/New_York")  # a new day where the person is
    await tick(companion)
    assert [d for d in await decisions(stores) if d[1] == "sent"] == [("watch", "sent", "due")] * 3


async def test_quiet_hours_across_midnight_hold_nudges_until_they_end(make, clock, stores, telegram):
    companion = await make(cooldown=0.0)
    at(clock, "2027-01-15 22:00", "Europe/Berlin")
    await tell(companion, "/timezone Europe/Berlin")
    await tell(companion, "/quiet 23:00-07:00")
    await watch(companion, "the interview", clock.now())
    sent_before = len(telegram.texts())
    for moment in ("2027-01-15 23:30", "2027-01-16 00:00", "2027-01-16 03:00", "2027-01-16 06:59"):
        at(clock, moment, "Europe/Berlin")
        await tick(companion)
    assert len(telegram.texts()) == sent_before
    assert await decisions(stores) == [("watch", "skipped", "quiet")]  # recorded once, not per tick
    at(clock, "2027-01-16 07:00", "Europe/Berlin")
    await tick(companion)
    assert len(telegram.texts()) == sent_before + 1
    assert (await decisions(stores))[-1] == ("watch", "sent", "due")


@pytest.mark.parametrize(
    ("zone", "day", "quiet_hours"),
    [
        ("Europe/Berlin", "2027-03-28", 9),  # clocks go forward at 02:00: a 23-hour day
        ("Europe/Berlin", "2027-10-31", 11),  # clocks go back at 03:00: a 25-hour day
        ("America/New_York", "2027-03-14", 9),
        ("America/New_York", "2027-11-07", 11),
    ],
)
async def test_quiet_hours_end_at_local_0800_on_the_night_of_a_dst_change(
    make, clock, stores, telegram, zone, day, quiet_hours
):
    """22:00-08:00 on the night of the change is 9 or 11 real hours, and the held nudge goes at
    08:00 on the person's clock, never an hour early or late."""
    companion = await make(cooldown=0.0, quiet_hours="22:00-08:00", timezone=zone)
    evening = datetime.fromisoformat(day).replace(tzinfo=ZoneInfo(zone)).timestamp() - 2 * HOUR  # 22:00 the day before
    clock.t = evening - HOUR
    await tell(companion, "hello")
    await watch(companion, "the concert", clock.now())
    first_sent = None
    clock.t = evening
    while clock.t < evening + 14 * HOUR:
        await tick(companion)
        if first_sent is None and [d for d in await decisions(stores) if d[1] == "sent"]:
            first_sent = clock.t
        clock.advance(5 * 60)
    assert first_sent is not None
    assert first_sent - evening == quiet_hours * HOUR
    assert datetime.fromtimestamp(first_sent, ZoneInfo(zone)).strftime("%H:%M") == "08:00"


async def test_cooldown_keeps_nudges_apart(make, clock, stores, telegram):
    companion = await make(cooldown=4 * HOUR, budget=5)
    await tell(companion, "hello")
    clock.advance(HOUR)
    await watch(companion, "first", clock.now() - 2 * HOUR)
    await watch(companion, "second", clock.now() - 2 * HOUR)
    await tick(companion)
    start = clock.now()
    while clock.now() < start + 4 * HOUR - 60:
        clock.advance(30 * 60)
        await tick(companion)
        if clock.now() < start + 4 * HOUR:
            assert [d[1] for d in await decisions(stores)].count("sent") == 1
    clock.t = start + 4 * HOUR
    await tick(companion)
    assert [d[1] for d in await decisions(stores)].count("sent") == 2
    assert ("watch", "skipped", "cooldown") in await decisions(stores)


async def test_no_nudge_while_the_person_is_active(make, clock, stores, telegram):
    companion = await make(cooldown=0.0)
    await watch_after_hello(companion, clock)
    clock.advance(29 * 60)
    await tick(companion)
    assert set(await decisions(stores)) == {("watch", "skipped", "active")}  # one row per waiting event
    clock.advance(60)
    await tick(companion)
    assert (await decisions(stores))[-1] == ("watch", "sent", "due")


async def watch_after_hello(companion, clock):
    await tell(companion, "hello")
    for n in range(4):
        await watch(companion, f"event {n}", clock.now() - 2 * HOUR)


async def test_back_off_after_two_unanswered_nudges_until_the_person_writes(make, clock, stores, telegram):
    companion = await make(cooldown=0.0, budget=10)
    await watch_after_hello(companion, clock)
    clock.advance(HOUR)
    for _ in range(4):
        await tick(companion)
        clock.advance(60)
    # Two sent; the other two events each wait with one recorded decision.
    assert [d[1:] for d in await decisions(stores)] == [("sent", "due")] * 2 + [("skipped", "backoff")] * 2
    await tell(companion, "sorry, I was busy")  # an answer resets the back-off
    clock.advance(31 * 60)
    await tick(companion)
    assert (await decisions(stores))[-1] == ("watch", "sent", "due")


async def test_silence_is_recorded_and_never_sent(make, clock, stores, telegram, provider):
    companion = await make(cooldown=0.0)
    await tell(companion, "hello")
    clock.advance(HOUR)
    item = await watch(companion, "the dentist", clock.now() - 2 * HOUR)
    sent_before = len(telegram.texts())
    provider.script = [Completion(copy.NUDGE_SILENCE)]
    result = await tick(companion)
    assert result.silent == 1
    assert len(telegram.texts()) == sent_before
    assert await decisions(stores) == [("watch", "silent", "model")]
    assert await all_rows(stores, "SELECT count(*) FROM deliveries WHERE kind = 'nudge'") == [(0,)]
    assert await all_rows(stores, "SELECT status, outcome FROM followups WHERE id = ?", (item,)) == [("done", None)]
    await tick(companion)  # settled: not asked again
    assert len([r for r in provider.requests if r.purpose == "nudge"]) == 1


@pytest.mark.engines
@pytest.mark.privacy
async def test_decisions_hold_no_message_text(make, clock, stores, telegram):
    companion = await make(cooldown=0.0)
    await tell(companion, "/followup 1m DECISION-TEXT-CANARY reminder")
    await watch(companion, "DECISION-TEXT-CANARY event", clock.now())
    clock.advance(HOUR)
    await tick(companion)
    rows = await all_rows(stores, "SELECT * FROM proactive_decisions")
    assert len(rows) == 2
    assert "CANARY" not in repr(rows)


# --- restart ------------------------------------------------------------------------------


async def test_first_tick_after_a_long_downtime_sends_at_most_one_nudge_per_person(make, clock, stores, telegram):
    companion = await make(cooldown=0.0, budget=10)
    await tell(companion, "hello")
    person, chat = await person_and_chat(stores)
    for n in range(3):
        await watch(companion, f"event {n}", clock.now() + HOUR)
    await stores.memory.add_goal(person, chat, "run 5k", None, clock.now())
    clock.advance(5 * 86400)  # down for five days: watches, a goal and an open check-in are all due
    restarted = await make(cooldown=0.0, budget=10)
    result = await tick(restarted)
    assert result.candidates == 5
    assert [d[1] for d in await decisions(stores)].count("sent") == 1


# --- private mode -------------------------------------------------------------------------


@pytest.mark.engines
@pytest.mark.privacy
async def test_reminder_waits_while_private_and_comes_after_normal(make, clock, stores, telegram, provider):
    companion = await make()
    await tell(companion, "/followup 5m stretch")
    await tell(companion, f"/private {PASSPHRASE}")
    await tell(companion, f"{CANARY} words")
    clock.advance(5 * 60)
    for _ in range(3):
        assert (await tick(companion)).sent == 0
        clock.advance(30)
    assert proactive_sent(telegram) == []
    assert await all_rows(stores, "SELECT outcome, reason, segment_id IS NOT NULL FROM proactive_decisions") == [
        ("skipped", "private", 1)
    ]
    await tell(companion, "/normal")
    await tick(companion)
    assert proactive_sent(telegram) == ["Reminder: stretch"]
    assert all(CANARY not in request_text(r) for r in provider.requests if r.purpose != "reply")


@pytest.mark.engines
@pytest.mark.privacy
async def test_no_nudge_for_a_person_in_private_mode(make, clock, stores, telegram, provider):
    companion = await make(cooldown=0.0)
    await tell(companion, "hello")
    await watch(companion, "the interview", clock.now())
    await tell(companion, f"/private {PASSPHRASE} never")
    clock.advance(2 * HOUR)
    for _ in range(3):
        result = await tick(companion)
        assert (result.candidates, result.sent) == (0, 0)
        clock.advance(HOUR)
    assert [r for r in provider.requests if r.purpose == "nudge"] == []


@pytest.mark.engines
@pytest.mark.privacy
async def test_private_conversations_are_never_candidates_even_planted_in_the_database(make, clock, stores):
    """Rows written straight into the database, past every command and guard: a follow-up, a goal
    and a person's state for a conversation with an open segment, and one for a group."""
    companion = await make()
    await tell(companion, "hello")
    await tell(companion, "hello", user="200")
    person, chat = await person_and_chat(stores)
    await stores.modes.open_segment(chat, clock.now(), None)  # private mode, bypassing the valve
    now = clock.now()
    await engines.plant(
        stores,
        "INSERT INTO followups (person_id, conversation_id, kind, text, due_at, created_at, updated_at)"
        " VALUES (?, ?, 'reminder', 'planted', ?, ?, ?)",
        (person, chat, now - 60, now, now),
    )
    await engines.plant(
        stores,
        "INSERT INTO goals (person_id, conversation_id, title, created_at, updated_at) VALUES (?, ?, 'g', ?, ?)",
        (person, chat, now - 10 * 86400, now),
    )
    await engines.plant(stores, "UPDATE proactive_people SET last_wrote_at = ?, checkin_open = 1", (now - 10 * 86400,))
    # The other person: a group conversation as the place they last wrote, and a group-made reminder.
    other, _ = await person_and_chat(stores, "200")
    group = await stores.timeline.ensure_conversation(companion_key("g1"), "group", None, now)
    await engines.plant(
        stores, "UPDATE proactive_people SET conversation_id = ? WHERE person_id = ?", (group.id, other)
    )
    await engines.plant(
        stores,
        "INSERT INTO followups (person_id, conversation_id, kind, text, due_at, created_at, updated_at)"
        " VALUES (?, ?, 'reminder', 'group', ?, ?, ?)",
        (other, group.id, now - 60, now, now),
    )
    candidates = await stores.proactive.due_candidates(
        now + 60, frozenset({"telegram"}), watch_after=0.0, goal_every=0.0, checkin_after=0.0
    )
    assert candidates == []


def companion_key(chat: str):
    from core.values.model import ConversationKey

    return ConversationKey("telegram", chat)


@pytest.mark.engines
@pytest.mark.privacy
async def test_a_nudge_is_written_from_the_masked_normal_view_and_the_normal_pad_only(
    make, clock, stores, telegram, provider
):
    companion = await make(cooldown=0.0)
    await tell(companion, "normal before")
    await tell(companion, f"/private {PASSPHRASE}")
    await tell(companion, f"{CANARY} secret words")
    person, chat = await person_and_chat(stores)
    (segment,) = await segments_of(stores, chat)
    from core.values.model import Summary

    await stores.timeline.save_summary(
        chat,
        Summary(f"{CANARY} summary", 1),
        clock.now(),
        segment_id=segment.id,
        pad_person_id=person,
        pad_facts=(f"{CANARY} fact",),
    )
    await tell(companion, "/normal")
    await tell(companion, "normal after")
    await watch(companion, "the exam", clock.now())
    clock.advance(2 * HOUR)
    await tick(companion)
    (request,) = [r for r in provider.requests if r.purpose == "nudge"]
    text = request_text(request)
    assert CANARY not in text
    assert copy.PLACEHOLDER in text and "normal before" in text and "normal after" in text


# --- the claim transaction ------------------------------------------------------------------


@pytest.mark.engines
@pytest.mark.privacy
async def test_claim_message_and_delivery_are_one_transaction(make, clock, stores, telegram, monkeypatch):
    companion = await make()
    await tell(companion, "/followup 1m water the plants")
    clock.advance(60)
    counts = "SELECT (SELECT count(*) FROM messages), (SELECT count(*) FROM deliveries), (SELECT count(*) FROM proactive_decisions)"
    before = await all_rows(stores, counts)

    def broken(*args, **kwargs):  # the delivery's statement fails after the claim and the message ran
        raise RuntimeError("disk gone")

    monkeypatch.setattr(proactive_sql, "delivery_row", broken)
    await tick(companion)
    assert await all_rows(stores, counts) == before
    assert await all_rows(stores, "SELECT status, outcome FROM followups") == [("scheduled", None)]
    monkeypatch.undo()
    await tick(companion)
    assert proactive_sent(telegram) == ["Reminder: water the plants"]


@pytest.mark.engines
@pytest.mark.privacy
async def test_a_candidate_is_claimed_once_however_often_it_is_sent(make, clock, stores, telegram):
    companion = await make()
    await tell(companion, "/followup 1m once")
    clock.advance(60)
    (candidate,) = await stores.proactive.due_candidates(
        clock.now(), frozenset({"telegram"}), watch_after=0.0, goal_every=1e9, checkin_after=1e9
    )
    decision = ProactiveDecision(candidate.prefs.person_id, "reminder", candidate.subject, "sent", "due", "d", 0.0)
    assert await stores.proactive.claim_and_send(candidate, "Reminder: once", decision, "telegram DM") is not None
    assert await stores.proactive.claim_and_send(candidate, "Reminder: once", decision, "telegram DM") is None
    assert await all_rows(stores, "SELECT count(*) FROM deliveries WHERE kind = 'reminder'") == [(1,)]


async def test_a_nudge_is_mirrored_like_any_normal_output(make, clock, stores, telegram):
    companion = await make(cooldown=0.0)
    await tell(companion, "hello")
    _, chat = await person_and_chat(stores)
    await stores.bindings.add_binding(chat, "telegram", "5550001", clock.now())
    await watch(companion, "the match", clock.now())
    clock.advance(2 * HOUR)
    await tick(companion)
    (mirrored,) = telegram.texts_to("5550001")[-1:]
    assert mirrored.startswith("[telegram DM] companion: ")


# --- commands and the report ------------------------------------------------------------------


async def test_nudges_off_disables_nudges_but_not_reminders(make, clock, stores, telegram):
    companion = await make(cooldown=0.0)
    await tell(companion, "/nudges off")
    await watch(companion, "the party", clock.now())
    await tell(companion, "/followup 1m feed the cat")
    clock.advance(2 * HOUR)
    await tick(companion)
    assert await decisions(stores) == [("reminder", "sent", "late"), ("watch", "skipped", "disabled")]
    await tell(companion, "/nudges on")
    clock.advance(HOUR)
    await tick(companion)
    assert (await decisions(stores))[-1] == ("watch", "sent", "due")


@pytest.mark.engines
@pytest.mark.privacy
async def test_manner_commands_refuse_bad_input_groups_and_private_mode(make, clock, stores):
    companion = await make()
    assert "Nothing changed" in (await tell(companion, "/quiet 25:00-07:00")).text
    assert "Nothing changed" in (await tell(companion, "/timezone Mars/Olympus")).text
    assert "Nothing changed" in (await tell(companion, "/nudges lots")).text
    assert "never go to a group" in (await tell(companion, "/nudges here", chat="-5", direct=False)).text
    await tell(companion, "/timezone Asia/Tokyo")
    await tell(companion, f"/private {PASSPHRASE}")
    refused = await tell(companion, "/timezone Europe/Berlin")
    assert refused.text == copy.PRIVATE_REFUSES.format(command="timezone")
    person, _ = await person_and_chat(stores)
    assert (await stores.proactive.proactive_prefs(person)).timezone == "Asia/Tokyo"


async def test_report_counts_decisions_by_outcome_and_reason(make, clock, stores, telegram):
    from core.turn.analytics import render_report

    companion = await make(cooldown=0.0)
    await tell(companion, "/followup 1m a")
    clock.advance(60)
    await tick(companion)
    rows = await stores.memory.report_rows()
    rows.update(await stores.proactive.report())
    assert "  reminder sent due: 1" in render_report(rows).splitlines()


@pytest.mark.engines
@pytest.mark.privacy
async def test_a_claim_refuses_a_person_who_entered_private_mode_after_the_triage_read(make, clock, stores, telegram):
    """The candidate was read in normal mode; private mode opened before the claim (the model was
    writing): the claim's own SQL refuses, and nothing is written."""
    companion = await make()
    await tell(companion, "/followup 1m stretch")
    clock.advance(60)
    (candidate,) = await stores.proactive.due_candidates(
        clock.now(), frozenset({"telegram"}), watch_after=0.0, goal_every=1e9, checkin_after=1e9
    )
    await tell(companion, f"/private {PASSPHRASE}")
    decision = ProactiveDecision(candidate.prefs.person_id, "reminder", candidate.subject, "sent", "due", "d", 0.0)
    assert await stores.proactive.claim_and_send(candidate, "Reminder: stretch", decision, "telegram DM") is None
    assert await all_rows(stores, "SELECT count(*) FROM deliveries WHERE kind = 'reminder'") == [(0,)]
    assert await all_rows(stores, "SELECT count(*) FROM messages WHERE text LIKE 'Reminder:%'") == [(0,)]
    assert await all_rows(stores, "SELECT status FROM followups") == [("scheduled",)]


async def test_a_reminder_at_a_clock_time_fires_at_that_time_in_the_persons_zone(make, clock, stores, telegram):
    companion = await make(timezone="UTC")
    at(clock, "2027-01-15 06:00", "Europe/Berlin")
    await tell(companion, "/timezone Europe/Berlin")
    answer = await tell(companion, "/followup 7:00 call mum")
    assert "2027-01-15 07:00 CET" in answer.text
    at(clock, "2027-01-15 06:59", "Europe/Berlin")
    await tick(companion)
    assert proactive_sent(telegram) == []
    at(clock, "2027-01-15 07:00", "Europe/Berlin")
    await tick(companion)
    assert proactive_sent(telegram) == ["Reminder: call mum"]


def test_a_clock_time_is_the_next_one_and_skips_a_daylight_saving_gap():
    from core.values.durations import parse_when

    zone = ZoneInfo("Europe/Berlin")
    evening = datetime(2027, 3, 27, 23, 0, tzinfo=zone).timestamp()
    assert datetime.fromtimestamp(parse_when("7:00", evening, "Europe/Berlin"), zone) == datetime(
        2027, 3, 28, 7, 0, tzinfo=zone
    )
    # 02:30 does not exist on 2027-03-28 in Berlin: whatever zoneinfo makes of it, never the past.
    assert parse_when("2:30", evening, "Europe/Berlin") > evening


async def test_a_provider_failure_leaves_the_nudge_due_for_the_next_tick(make, clock, stores, telegram, provider):
    companion = await make(cooldown=0.0)
    await tell(companion, "hello")
    clock.advance(HOUR)
    item = await watch(companion, "the race", clock.now() - 2 * HOUR)
    provider.fail_all = True
    await tick(companion)
    assert await decisions(stores) == []
    assert await all_rows(stores, "SELECT status FROM followups WHERE id = ?", (item,)) == [("scheduled",)]
    provider.fail_all = False
    clock.advance(60)
    await tick(companion)
    assert await decisions(stores) == [("watch", "sent", "due")]
