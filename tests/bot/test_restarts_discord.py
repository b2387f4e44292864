"""`companion run` on Discord stopped in the middle of a turn, then started again: the cut-off
turn is answered once after the restart (issue 10, real processes)."""

from __future__ import annotations

import signal
import sqlite3
import time

import pytest

from tests.bot.test_gateway_discord import FRIEND, discord_env, stop
from tests.helpers.proc import spawn_companion

pytestmark = pytest.mark.wire


def test_a_discord_turn_in_flight_at_sigterm_is_answered_once_after_the_restart(
    tmp_path, discord_servers, passphrase_hash
):
    discord_server, model = discord_servers
    call = discord_server.call
    # The stop lets turns finish for COMPANION_STOP_GRACE (1 s here); this turn outlasts it: the
    # first model call returns a tool call after 1.5 s, the second one hangs.
    env = discord_env(
        tmp_path, discord_server, model, passphrase_hash, COMPANION_STOP_GRACE="1", COMPANION_LLM_TIMEOUT="20"
    )
    model.reply_tool_call("current_time", delay=1.5)
    model.reply_delay(30)
    proc = spawn_companion(["run"], env)
    try:
        call(discord_server.wait_for_ready(timeout=30), timeout=40)
        call(discord_server.send_dm(FRIEND, "did you get my letter?"))
        call(discord_server.wait_until(lambda: len(model.requests) >= 1, 20, "the model request"))
    finally:
        _, stderr = stop(proc)
    assert proc.returncode == 0, stderr
    assert discord_server.sent == []  # cut off: stored, not answered
    with sqlite3.connect(tmp_path / "companion.db") as db:
        assert db.execute("SELECT turn FROM messages WHERE text = 'did you get my letter?'").fetchall() == [("open",)]

    model.forget_script()
    model.reply_text("Yes, I got your letter.")
    asked = len(model.requests)
    proc = spawn_companion(["run"], env)
    try:
        call(discord_server.wait_for_sent(1, timeout=30), timeout=40)
        call(discord_server.settle(0.5))
    finally:
        _, stderr = stop(proc)
    assert [m.content for m in discord_server.sent] == ["Yes, I got your letter."]
    assert len(model.requests) == asked + 1
    assert model.requests[-1]["messages"][-1]["content"] == "did you get my letter?"
    assert proc.returncode == 0, stderr

    # A third start has nothing left to answer.
    proc = spawn_companion(["run"], env)
    try:
        call(discord_server.wait_for_ready(timeout=30), timeout=40)
        call(discord_server.settle(0.5))
    finally:
        stop(proc)
    assert len(discord_server.sent) == 1


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_a_stop_during_a_slow_private_discord_turn_keeps_the_private_line_out_of_normal_mode(
    tmp_path, discord_servers, passphrase_hash, how
):
    from tests.bot.test_gateway_discord import CANARY
    from tests.conftest import PASSPHRASE

    discord_server, model = discord_servers
    call = discord_server.call
    # A short model timeout: SIGTERM's drain (the model timeout) runs out while the model is slow.
    env = discord_env(tmp_path, discord_server, model, passphrase_hash, COMPANION_LLM_TIMEOUT="1")
    proc = spawn_companion(["run"], env)
    try:
        call(discord_server.wait_for_ready(timeout=30), timeout=40)
        call(discord_server.send_dm(FRIEND, f"/private {PASSPHRASE}"))
        call(discord_server.wait_for_sent(1, timeout=20))
        model.reply_delay(30)
        call(discord_server.send_dm(FRIEND, CANARY))
        call(discord_server.wait_until(lambda: len(model.requests) >= 1, 20, "the model request"))
    finally:
        proc.send_signal(how)
        try:
            proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()

    model.forget_script()
    since, identified = len(model.raw_requests), len(discord_server.identifies)
    proc = spawn_companion(["run"], env)
    try:
        call(
            discord_server.wait_until(
                lambda: (
                    len(discord_server.identifies) > identified
                    and any(s.ready and not s.ws.closed for s in discord_server.sessions)
                ),
                30,
                "the new session",
            ),
            timeout=40,
        )
        time.sleep(1.0)  # a message stamped within half a second of the restart counts as before it
        call(discord_server.send_dm(FRIEND, "hello after the restart"))
        call(discord_server.wait_until(lambda: len(model.raw_requests) > since, 20, "a normal request"))
        call(discord_server.settle(0.5))
    finally:
        stop(proc)
    assert all(CANARY.encode() not in raw for raw in model.raw_requests[since:])
    assert model.requests[-1]["messages"][-1]["content"] == "hello after the restart"
    with sqlite3.connect(tmp_path / "companion.db") as db:
        assert db.execute("SELECT mode FROM messages WHERE text = ?", (CANARY,)).fetchall() == [("private",)]
        assert db.execute("SELECT count(*) FROM recall_fts WHERE recall_fts MATCH 'canary'").fetchall() == [(0,)]
