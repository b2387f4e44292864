"""`companion run` killed or stopped in the middle of a private turn, then started again: the
private line never reaches normal mode, and nothing is answered twice (issue 10, real processes)."""

from __future__ import annotations

import signal
import sqlite3
import time
from pathlib import Path

import pytest

from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.fake_telegram import FakeTelegramServer
from tests.helpers.telegram_gateway import USER, gateway_env, polling, say, spawn, stop, wait_until

pytestmark = pytest.mark.wire

CANARY = "canary-7c2e said only in private"


def rows(tmp_path: Path, sql: str, params: tuple = ()) -> list[tuple]:
    with sqlite3.connect(tmp_path / "companion.db") as db:
        return db.execute(sql, params).fetchall()


def assert_canary_outside_normal_mode(tmp_path: Path, model: FakeOpenAIServer, since: int) -> None:
    normal_requests = [raw for raw in model.raw_requests[since:] if b"This conversation is in private mode" not in raw]
    assert normal_requests, "no normal request after the restart: the test proves nothing"
    assert all(CANARY.encode() not in raw for raw in normal_requests)
    assert rows(tmp_path, "SELECT count(*) FROM messages WHERE mode = 'normal' AND text LIKE ?", (f"%{CANARY}%",)) == [
        (0,)
    ]
    assert rows(tmp_path, "SELECT count(*) FROM recall_fts WHERE recall_fts MATCH ?", (f'"{CANARY.split()[0]}"',)) == [
        (0,)
    ]


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_a_stop_during_a_slow_private_turn_never_lets_the_private_line_into_normal_mode(
    telegram_servers: tuple[FakeTelegramServer, FakeOpenAIServer], tmp_path: Path, how: signal.Signals
) -> None:
    telegram, model = telegram_servers
    # A short model timeout: SIGTERM's drain (the model timeout) runs out while the model is slow.
    env = gateway_env(tmp_path, telegram, model, COMPANION_LLM_TIMEOUT="1")
    gateway = spawn(env)
    try:
        assert say(telegram, gateway, "/private sesame").startswith("Private mode is on")
        model.reply_delay(30)
        asked = len(model.raw_requests)
        telegram.send_text(USER, USER, CANARY)
        wait_until(telegram, gateway, lambda: len(model.raw_requests) > asked)  # the turn is at the model
        gateway.send_signal(how)
        gateway.communicate(timeout=30)
    finally:
        if gateway.poll() is None:
            gateway.kill()
            gateway.communicate()

    telegram.redeliver()  # whatever the stop left unconfirmed comes again
    telegram.send_text(USER, USER, f"{CANARY} (sent while it was down)")
    answered, since = len(telegram.sent), len(model.raw_requests)
    gateway = spawn(env)
    try:
        model.reply_text("fresh")
        wait_until(
            telegram,
            gateway,
            lambda: any(m.text.startswith("Private mode ended when I restarted") for m in telegram.sent[answered:]),
        )
        time.sleep(2.1)  # Telegram dates are whole seconds, rounded down: wait past the restart's second
        assert say(telegram, gateway, "hello after the restart") == "fresh"
        assert_canary_outside_normal_mode(tmp_path, model, since)
        # The private turn is stored once, inside its (closed) segment, and not answered again.
        assert rows(tmp_path, "SELECT count(*), min(mode) FROM messages WHERE text = ?", (CANARY,)) == [(1, "private")]
    finally:
        code, stderr = stop(gateway)
    assert code == 0, stderr
    assert CANARY not in stderr


def test_a_second_restart_still_keeps_a_late_message_inside_the_interval(
    telegram_servers: tuple[FakeTelegramServer, FakeOpenAIServer], tmp_path: Path
) -> None:
    telegram, model = telegram_servers
    env = gateway_env(tmp_path, telegram, model)
    gateway = spawn(env)
    try:
        assert say(telegram, gateway, "/private sesame").startswith("Private mode is on")
    finally:
        gateway.kill()
        gateway.communicate()
    telegram.send_text(USER, USER, CANARY)  # sent while down; two restarts pass before it is read
    since = len(model.raw_requests)
    for _ in range(2):
        polls = len(telegram.calls_of("getUpdates"))
        gateway = spawn(env)
        try:
            wait_until(telegram, gateway, lambda polls=polls: len(telegram.calls_of("getUpdates")) > polls)
            # Its first poll answered (at once, when nothing is queued: not after the 25 s long poll), it polls again.
            telegram.end_long_poll()
            wait_until(telegram, gateway, lambda polls=polls: len(telegram.calls_of("getUpdates")) > polls + 1)
        finally:
            gateway.kill()
            gateway.communicate()
    polls = len(telegram.calls_of("getUpdates"))
    gateway = spawn(env)
    try:
        wait_until(telegram, gateway, lambda: len(telegram.calls_of("getUpdates")) > polls)
        time.sleep(2.1)  # Telegram dates are whole seconds, rounded down: wait past the restart's second
        say(telegram, gateway, "hello again")
        assert_canary_outside_normal_mode(tmp_path, model, since)
    finally:
        stop(gateway)


def test_a_reply_written_but_never_sent_before_a_kill_goes_out_once_at_the_next_start(
    telegram_servers: tuple[FakeTelegramServer, FakeOpenAIServer], tmp_path: Path
) -> None:
    telegram, model = telegram_servers
    # No scheduled dispatch in this test: only the start-up pass can send what the kill left.
    env = gateway_env(tmp_path, telegram, model, COMPANION_OUTBOX_TICK_SECONDS="3600")
    gateway = spawn(env)
    try:
        say(telegram, gateway, "hello")
    finally:
        stop(gateway)
    # What a kill between the reply's commit and its send leaves: a pending row, never tried.
    with sqlite3.connect(tmp_path / "companion.db") as db:
        db.execute(
            "INSERT INTO deliveries (conversation_id, kind, platform, chat_id, nonce, text, next_attempt_at,"
            " created_at) SELECT id, 'reply', 'telegram', chat_id, 'n1', 'the reply the kill held back',"
            " strftime('%s', 'now'), strftime('%s', 'now') FROM conversations"
        )
    gateway = spawn(env)
    try:
        wait_until(telegram, gateway, lambda: "the reply the kill held back" in telegram.texts_to(USER))
    finally:
        stop(gateway)
    assert telegram.texts_to(USER).count("the reply the kill held back") == 1


def ledger_through(tmp_path: Path) -> int:
    """The newest update id the stored update ledger settles, with every one before it (0: none)."""
    stored = rows(tmp_path, "SELECT value FROM adapter_state WHERE name LIKE 'telegram:offset:%'")
    return int(stored[0][0].split()[0]) if stored and stored[0][0] else 0


def test_a_kill_right_after_an_answer_loses_nothing_and_answers_nothing_twice(
    telegram_servers: tuple[FakeTelegramServer, FakeOpenAIServer], tmp_path: Path
) -> None:
    telegram, model = telegram_servers
    env = gateway_env(tmp_path, telegram, model)
    gateway = spawn(env)
    try:
        model.reply_text("the first answer")
        assert say(telegram, gateway, "hello before the kill") == "the first answer"
        # Marked sent (a kill before the mark sends it again at the start: at least once, not this test's).
        wait_until(
            telegram,
            gateway,
            lambda: rows(tmp_path, "SELECT count(*) FROM deliveries WHERE status = 'pending'") == [(0,)],
        )
    finally:
        gateway.kill()  # right after the answer: the ledger is written off the turn, later
        gateway.communicate()
    # What the kill may leave: the ledger without this update, and Telegram offering it again.
    rows(tmp_path, "DELETE FROM adapter_state WHERE name LIKE 'telegram:offset:%'")
    telegram.redeliver()
    asked = len(model.raw_requests)
    gateway = spawn(env)
    try:
        model.reply_text("the second answer")
        assert say(telegram, gateway, "hello after the kill") == "the second answer"
    finally:
        code, stderr = stop(gateway)
    assert code == 0, stderr
    # The redelivered message was a no-op (the inbox holds it): not stored, asked or answered again.
    assert telegram.texts_to(USER) == ["the first answer", "the second answer"]
    assert len(model.raw_requests) == asked + 1
    assert rows(tmp_path, "SELECT count(*) FROM messages WHERE text = 'hello before the kill'") == [(1,)]
    assert ledger_through(tmp_path) == max(telegram._delivered)  # the stop wrote the ledger's last marks


def test_a_button_press_is_recorded_at_once_and_never_runs_twice_after_a_kill(
    telegram_servers: tuple[FakeTelegramServer, FakeOpenAIServer], tmp_path: Path
) -> None:
    telegram, model = telegram_servers
    env = gateway_env(tmp_path, telegram, model, COMPANION_ALLOW_PRIVATE_EXPORT="true")
    gateway = spawn(env)
    try:
        assert say(telegram, gateway, "/private sesame").startswith("Private mode is on")
        say(telegram, gateway, "/export")
        asked = telegram.sent[-1]
        assert asked.reply_markup is not None  # the confirmation button
        pressed = max(telegram._delivered) + 1  # the press's update id: every update before it was delivered
        telegram.press_button(USER, USER, asked.message_id, "companion:/export confirm")
        wait_until(telegram, gateway, lambda: len(telegram.calls_of("sendDocument")) == 1)
        # No inbox key holds a press: its update is in the ledger as soon as its answer is out.
        wait_until(telegram, gateway, lambda: ledger_through(tmp_path) >= pressed)
    finally:
        gateway.kill()
        gateway.communicate()
    telegram.redeliver()  # the press comes again, as if the kill came before its offset was confirmed
    gateway = spawn(env)
    try:
        polling(telegram, gateway)
        time.sleep(2.1)  # Telegram dates are whole seconds, rounded down: wait past the restart's second
        say(telegram, gateway, "hello after the kill")
    finally:
        code, stderr = stop(gateway)
    assert code == 0, stderr
    assert len(telegram.calls_of("sendDocument")) == 1
