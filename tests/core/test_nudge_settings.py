"""The rest of the nudge manners (issue 14): `/cooldown` per person, the configured activity
window, back-off count and check-in intervals, and a goal or open check-in waiting out private
mode recorded as a 'private' decision. The triage is called directly, time moved by the clock."""

from __future__ import annotations

import pytest

from bot.bootstrap import build_companion
from core.delivery.outbox import Outbox
from core.proactive.manners import Manners
from core.proactive.service import ProactiveConfig
from core.turn.companion import Companion
from core.turn.config import CompanionConfig
from core.values import copy
from tests.conftest import PASSPHRASE
from tests.core.test_proactive import HOUR, USER, decisions, person_and_chat, tell, tick, watch
from tests.helpers.chat import all_rows
from tests.helpers.fakes import FakeSender

DAY = 86400.0


@pytest.fixture
def make(stores, provider, clock, passphrase_hash):
    async def make(config: ProactiveConfig | None = None, **manners) -> Companion:
        manners.setdefault("quiet_hours", None)
        outbox = Outbox(stores.outbox, clock, rand=lambda: 1.0)
        outbox.register(FakeSender("telegram"))
        companion = build_companion(
            stores,
            provider,
            CompanionConfig(
                passphrase_hash=passphrase_hash,
                allowed_accounts=frozenset({f"telegram:{USER}", "telegram:200"}),
                platforms=frozenset({"telegram"}),
                proactive=config or ProactiveConfig(Manners(**manners)),
            ),
            clock=clock,
            outbox=outbox,
        )
        await companion.start()
        return companion

    return make


async def sent(stores) -> int:
    return [d[1] for d in await decisions(stores)].count("sent")


# --- /cooldown ------------------------------------------------------------------------------


async def test_cooldown_command_shortens_the_gap_for_this_person_only(make, clock, stores):
    companion = await make(cooldown=4 * HOUR, budget=5)
    await tell(companion, "hello")
    reply = await tell(companion, "/cooldown 1h")
    assert "Cooldown: at least 1 hour between two" in reply.text
    clock.advance(HOUR)
    await watch(companion, "first", clock.now() - 2 * HOUR)
    await watch(companion, "second", clock.now() - 2 * HOUR)
    await tick(companion)
    assert await sent(stores) == 1
    clock.advance(HOUR)
    await tick(companion)
    assert await sent(stores) == 2  # the default 4 h would still hold it


async def test_cooldown_off_lets_nudges_follow_each_other_and_default_restores_the_setting(make, clock, stores):
    companion = await make(cooldown=4 * HOUR, budget=5)
    await tell(companion, "hello")
    assert "Cooldown: off" in (await tell(companion, "/cooldown off")).text
    person, _ = await person_and_chat(stores)
    assert (await stores.proactive.proactive_prefs(person)).cooldown == 0
    clock.advance(HOUR)
    for n in range(2):
        await watch(companion, f"event {n}", clock.now() - 2 * HOUR)
    await tick(companion)
    clock.advance(60)
    await tick(companion)
    assert await sent(stores) == 2
    assert "Cooldown: at least 4 hours" in (await tell(companion, "/cooldown default")).text
    assert (await stores.proactive.proactive_prefs(person)).cooldown is None


@pytest.mark.engines
async def test_cooldown_command_refuses_bad_input_and_private_mode_and_changes_nothing(make, stores):
    companion = await make()
    await tell(companion, "/cooldown 2h")
    for bad in ("/cooldown soon", "/cooldown 30s", "/cooldown 8d", "/cooldown 0m"):
        assert "Nothing changed" in (await tell(companion, bad)).text, bad
    await tell(companion, f"/private {PASSPHRASE}")
    refused = await tell(companion, "/cooldown off")
    assert refused.text == copy.PRIVATE_REFUSES.format(command="cooldown")
    person, _ = await person_and_chat(stores)
    assert (await stores.proactive.proactive_prefs(person)).cooldown == 2 * HOUR


async def test_linking_keeps_a_cooldown_set_on_either_account(make, stores, clock):
    companion = await make()
    await tell(companion, "/cooldown 90m")
    discord = await stores.timeline.ensure_account("discord", "222", None, clock.now())
    (telegram,) = await all_rows(stores, "SELECT id FROM accounts WHERE platform = 'telegram'")
    person = await stores.links.merge_accounts(discord.id, telegram[0], clock.now())  # the Discord person is kept
    assert (await stores.proactive.proactive_prefs(person)).cooldown == 90 * 60


# --- the configured manners and intervals -----------------------------------------------------


async def test_the_configured_activity_window_is_kept(make, clock, stores):
    companion = await make(active_within=5 * 60, cooldown=0.0)
    await tell(companion, "hello")
    await watch(companion, "the interview", clock.now() - 2 * HOUR)
    clock.advance(4 * 60)
    await tick(companion)
    assert await decisions(stores) == [("watch", "skipped", "active")]
    clock.advance(2 * 60)  # six minutes after their message: the default 30 would still hold it
    await tick(companion)
    assert (await decisions(stores))[-1] == ("watch", "sent", "due")


async def test_the_configured_back_off_count_is_kept(make, clock, stores):
    companion = await make(backoff_after=1, cooldown=0.0, budget=10)
    await tell(companion, "hello")
    for n in range(2):
        await watch(companion, f"event {n}", clock.now() - 2 * HOUR)
    clock.advance(HOUR)
    await tick(companion)
    clock.advance(60)
    await tick(companion)
    assert [d[1:] for d in await decisions(stores)] == [("sent", "due"), ("skipped", "backoff")]
    assert "stop after 1 go unanswered" in (await tell(companion, "/nudges")).text


async def test_the_configured_goal_check_in_interval_is_kept(make, clock, stores):
    companion = await make(ProactiveConfig(Manners(quiet_hours=None, cooldown=0.0), goal_every=2 * HOUR))
    await tell(companion, "/goal run a 10k")
    clock.advance(2 * HOUR - 60)
    await tick(companion)
    assert await decisions(stores) == []
    clock.advance(60)  # the default (three days) would not be due for days
    await tick(companion)
    assert await decisions(stores) == [("goal", "sent", "due")]


async def test_the_configured_open_check_in_interval_is_kept(make, clock, stores):
    companion = await make(ProactiveConfig(Manners(quiet_hours=None, cooldown=0.0), checkin_after=3 * HOUR))
    await tell(companion, "hello")
    clock.advance(3 * HOUR - 60)
    await tick(companion)
    assert await decisions(stores) == []
    clock.advance(60)
    await tick(companion)
    assert await decisions(stores) == [("checkin", "sent", "due")]


async def test_the_configured_event_watch_delay_is_kept(make, clock, stores):
    companion = await make(ProactiveConfig(Manners(quiet_hours=None, cooldown=0.0), watch_after=3 * HOUR))
    await tell(companion, "hello")
    clock.advance(HOUR)
    await watch(companion, "the interview", clock.now() - 2 * HOUR)  # the default (1 h) is due now
    await tick(companion)
    assert await decisions(stores) == []
    clock.advance(HOUR)
    await tick(companion)
    assert await decisions(stores) == [("watch", "sent", "due")]


# --- waiting in private mode ------------------------------------------------------------------


@pytest.mark.engines
async def test_goal_and_open_check_ins_due_in_private_mode_are_recorded_as_private_and_go_with_the_segment(
    make, clock, stores, provider
):
    companion = await make(cooldown=0.0)
    await tell(companion, "/goal run a 10k")
    await tell(companion, f"/private {PASSPHRASE} never")
    await tell(companion, "NUDGE-GOAL-CANARY said in private")
    clock.advance(4 * DAY)  # the goal and an open check-in (three days of silence) are due
    for _ in range(3):
        result = await tick(companion)
        assert (result.candidates, result.sent) == (0, 0)
        clock.advance(HOUR)
    assert await all_rows(
        stores, "SELECT kind, outcome, reason, segment_id IS NOT NULL FROM proactive_decisions ORDER BY kind"
    ) == [("checkin", "skipped", "private", 1), ("goal", "skipped", "private", 1)]
    assert [r for r in provider.requests if r.purpose == "nudge"] == []
    await tell(companion, "/forget private")  # the segment goes, and its decisions with it
    assert await all_rows(stores, "SELECT count(*) FROM proactive_decisions") == [(0,)]


@pytest.mark.engines
async def test_a_due_event_watch_is_recorded_as_private_only_once_it_is_due(make, clock, stores):
    companion = await make(cooldown=0.0)
    await tell(companion, "hello")
    await watch(companion, "the interview", clock.now())
    await tell(companion, f"/private {PASSPHRASE} never")
    clock.advance(30 * 60)  # the event happened; its watch is due an hour after it
    await tick(companion)
    assert await decisions(stores) == []
    clock.advance(31 * 60)
    await tick(companion)
    assert await decisions(stores) == [("watch", "skipped", "private")]
