"""`companion report` shows the outbox: deliveries by kind and state, the oldest pending age, bindings."""

from __future__ import annotations

import sqlite3
import time

import pytest

from tests.helpers.proc import companion_env, run_companion

pytestmark = pytest.mark.wire


def test_the_report_shows_deliveries_by_kind_and_state_and_the_oldest_pending_age_without_text(tmp_path):
    env = companion_env(tmp_path)
    assert run_companion(["report"], env).returncode == 0  # creates and migrates the database
    now = time.time()
    with sqlite3.connect(tmp_path / "companion.db") as db:
        db.execute("PRAGMA foreign_keys = ON")
        db.execute(
            "INSERT INTO conversations (id, platform, chat_id, kind, created_at) VALUES (1, 'telegram', '7', 'direct', 0)"
        )
        db.execute(
            "INSERT INTO bindings (id, conversation_id, platform, chat_id, created_at) VALUES (1, 1, 'discord', '9', 0)"
        )
        for kind, status, text, created, binding in (
            ("reply", "sent", None, now - 50, None),
            ("mirror", "pending", "SECRET-LOOKING TEXT", now - 120, 1),
            ("mirror", "pending", "more text", now - 30, 1),
            ("mirror", "failed", None, now - 10, 1),
        ):
            db.execute(
                "INSERT INTO deliveries (conversation_id, binding_id, kind, platform, chat_id, nonce, text, status,"
                " next_attempt_at, created_at) VALUES (1, ?, ?, 'discord', '9', 'n', ?, ?, 0, ?)",
                (binding, kind, text, status, created),
            )
    result = run_companion(["report"], env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "  mirror failed: 1" in lines and "  mirror pending: 2" in lines and "  reply sent: 1" in lines
    (age,) = [line for line in lines if line.startswith("oldest pending delivery:")]
    assert 119 <= int(age.split()[3]) <= 180
    assert "mirror bindings: 1 active" in lines
    assert "TEXT" not in result.stdout + result.stderr
