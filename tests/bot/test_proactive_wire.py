"""Reminders and nudges through a real `companion run` subprocess, python-telegram-bot against the
fake Bot API server, the model behind the fake OpenAI-compatible server, and a one-second tick
(issue 14): a reminder arrives once, also across a SIGKILL; a nudge keeps quiet hours; private
mode gets nothing, and no model request outside private mode holds the private canary."""

from __future__ import annotations

import sqlite3
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.fake_telegram import FakeTelegramServer
from tests.helpers.telegram_gateway import USER, gateway_env, polling, say, spawn, stop, wait_until

pytestmark = pytest.mark.wire

CANARY = "canary-proactive-9d1f said only in private"
# Bursts off: a 1.5 s burst window shifted each command's moment onto a triage tick, where a
# decision read just before `/private` opened its segment (a race of the test's pacing, not a leak).
FAST = {"COMPANION_PROACTIVE_TICK_SECONDS": "1", "COMPANION_OUTBOX_TICK_SECONDS": "1", "COMPANION_BURST_SECONDS": "0"}


def rows(tmp_path: Path, sql: str, params: tuple = ()) -> list[tuple]:
    with sqlite3.connect(tmp_path / "companion.db", timeout=10) as db:
        return db.execute(sql, params).fetchall()


def write(tmp_path: Path, sql: str, params: tuple = ()) -> None:
    with sqlite3.connect(tmp_path / "companion.db", timeout=10) as db:
        db.execute(sql, params)


def reminders(telegram: FakeTelegramServer, what: str) -> list[str]:
    return [t for t in telegram.texts_to(USER) if t.startswith(f"Reminder: {what}")]


def plant_due_watch(tmp_path: Path) -> None:
    """An event that happened two hours ago, and a person who last wrote two hours ago (the
    activity rule would hold a nudge for 30 minutes otherwise)."""
    now = time.time()
    write(
        tmp_path,
        "INSERT INTO followups (person_id, conversation_id, kind, text, due_at, created_at, updated_at)"
        " SELECT person_id, id, 'watch', 'the interview', ?, ?, ? FROM conversations",
        (now - 7200, now, now),
    )
    write(tmp_path, "UPDATE proactive_people SET last_wrote_at = ?", (now - 7200,))


def test_a_reminder_arrives_once_at_its_time_and_not_again_after_a_kill(
    telegram_servers: tuple[FakeTelegramServer, FakeOpenAIServer], tmp_path: Path
) -> None:
    telegram, model = telegram_servers
    env = gateway_env(tmp_path, telegram, model, **FAST)
    gateway = spawn(env)
    try:
        assert say(telegram, gateway, "/followup 5s stretch").startswith("Follow-up #1 scheduled")
        asked = time.monotonic()
        wait_until(telegram, gateway, lambda: reminders(telegram, "stretch") != [], timeout=30)
        assert time.monotonic() - asked >= 3.5  # at its time, not at once
        time.sleep(3)  # three more ticks
        assert reminders(telegram, "stretch") == ["Reminder: stretch"]
    finally:
        gateway.kill()
        gateway.communicate()
    gateway = spawn(env)
    try:
        polling(telegram, gateway)
        time.sleep(3)
        assert reminders(telegram, "stretch") == ["Reminder: stretch"]
        assert rows(tmp_path, "SELECT kind, status FROM deliveries WHERE kind = 'reminder'") == [("reminder", "sent")]
    finally:
        code, stderr = stop(gateway)
    assert code == 0, stderr
    assert "stretch" not in stderr  # logs carry ids and sizes, never text


def test_a_nudge_arrives_outside_quiet_hours_and_waits_inside_them(
    telegram_servers: tuple[FakeTelegramServer, FakeOpenAIServer], tmp_path: Path
) -> None:
    telegram, model = telegram_servers
    now = datetime.now(UTC)
    covering = f"{(now - timedelta(hours=1)):%H:%M}-{(now + timedelta(hours=1)):%H:%M}"
    env = gateway_env(tmp_path, telegram, model, COMPANION_QUIET_HOURS=covering, **FAST)
    gateway = spawn(env)
    try:
        say(telegram, gateway, "hello")
        plant_due_watch(tmp_path)
        wait_until(telegram, gateway, lambda: rows(tmp_path, "SELECT reason FROM proactive_decisions") != [])
        time.sleep(2)
        assert rows(tmp_path, "SELECT outcome, reason FROM proactive_decisions") == [("skipped", "quiet")]
        assert rows(tmp_path, "SELECT count(*) FROM deliveries WHERE kind = 'nudge'") == [(0,)]
    finally:
        stop(gateway)
    model.reply_text("How did the interview go?")
    gateway = spawn(gateway_env(tmp_path, telegram, model, COMPANION_QUIET_HOURS="off", **FAST))
    try:
        wait_until(telegram, gateway, lambda: "How did the interview go?" in telegram.texts_to(USER))
        time.sleep(2)
        assert telegram.texts_to(USER).count("How did the interview go?") == 1
        assert rows(tmp_path, "SELECT outcome, reason FROM proactive_decisions ORDER BY id") == [
            ("skipped", "quiet"),
            ("sent", "due"),
        ]
    finally:
        code, stderr = stop(gateway)
    assert code == 0, stderr


def test_in_private_mode_nothing_arrives_and_no_model_request_outside_it_holds_the_canary(
    telegram_servers: tuple[FakeTelegramServer, FakeOpenAIServer], tmp_path: Path
) -> None:
    telegram, model = telegram_servers
    env = gateway_env(tmp_path, telegram, model, COMPANION_QUIET_HOURS="off", **FAST)
    gateway = spawn(env)
    try:
        say(telegram, gateway, "hello")
        assert say(telegram, gateway, "/followup 1h stretch").startswith("Follow-up #1 scheduled")
        assert say(telegram, gateway, "/private sesame").startswith("Private mode is on")
        say(telegram, gateway, CANARY)
        # Only now, with private mode on, do the reminder and a watch fall due (planted, so that no
        # tick on a loaded machine can find them due before private mode begins).
        write(tmp_path, "UPDATE followups SET due_at = ? WHERE kind = 'reminder'", (time.time() - 1,))
        plant_due_watch(tmp_path)
        # The reminder falls due in private mode, the watch is due already: each waits, one decision
        # each naming the segment (waited for with a deadline, since ticks run late on a loaded machine);
        # then two more ticks (1 s each) in which nothing may arrive.
        wait_until(
            telegram,
            gateway,
            lambda: rows(tmp_path, "SELECT count(*) FROM proactive_decisions WHERE reason = 'private'") == [(2,)],
        )
        time.sleep(2)
        assert reminders(telegram, "stretch") == []
        assert rows(tmp_path, "SELECT count(*) FROM deliveries WHERE kind IN ('reminder', 'nudge')") == [(0,)]
        # The reminder and the watch each wait, one decision each, naming the segment.
        assert rows(tmp_path, "SELECT DISTINCT reason, segment_id IS NOT NULL FROM proactive_decisions") == [
            ("private", 1)
        ]
        asked = len(model.raw_requests)
        say(telegram, gateway, "/normal")
        wait_until(telegram, gateway, lambda: reminders(telegram, "stretch") != [])
        write(tmp_path, "UPDATE proactive_people SET last_wrote_at = ?", (time.time() - 7200,))
        wait_until(telegram, gateway, lambda: len(model.raw_requests) > asked)  # the nudge is asked for
        time.sleep(1)
    finally:
        gateway.kill()
        gateway.communicate()
    outside = [raw for raw in model.raw_requests if b"This conversation is in private mode" not in raw]
    assert any(b"one short, unprompted message" in raw for raw in outside), "no nudge request: proves nothing"
    assert all(CANARY.encode() not in raw for raw in outside)
    assert reminders(telegram, "stretch") == ["Reminder: stretch"]  # once, after private mode ended
