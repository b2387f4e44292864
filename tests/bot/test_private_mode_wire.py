"""The canary is checked on the wire: what a real OpenAI-compatible server received."""

from __future__ import annotations

import json
import signal
import time

import pytest

from core.privacy.secrets import hash_passphrase
from core.values import copy
from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.proc import companion_env, run_companion, spawn_companion

pytestmark = pytest.mark.wire

PASS = "wire-sesame"
CANARY = "CANARY-7f3a9e21-private"


@pytest.fixture(scope="module")
def pass_hash() -> str:
    return hash_passphrase(PASS)


def wire_text(raw: bytes) -> str:
    return raw.decode("utf-8")


def messages_of(raw: bytes) -> list[dict]:
    return json.loads(raw)["messages"]


def replies_only(raws: list[bytes]) -> list[bytes]:
    """Reply requests: without the capture pass `companion chat` makes at the end of input."""
    return [raw for raw in raws if copy.CAPTURE_INSTRUCTION not in json.loads(raw)["messages"][0]["content"]]


def test_a_private_canary_never_reaches_a_normal_request_on_the_wire(tmp_path, pass_hash):
    with FakeOpenAIServer.run_in_thread() as server:
        # The generated transition line: its request must carry nothing of the interval either.
        env = companion_env(
            tmp_path,
            COMPANION_LLM_BASE_URL=server.base_url,
            COMPANION_PRIVATE_PASSPHRASE_HASH=pass_hash,
            COMPANION_TRANSITION="generated",
        )
        script = f"hello before\n/private {PASS} 1h\nmy secret is {CANARY}\n/normal\nhello after\n"
        result = run_companion(["chat"], env, stdin=script)
        raws = list(server.raw_requests)
    assert result.returncode == 0, result.stderr
    assert CANARY not in result.stderr
    # The private turn did reach the model (private mode is a live thread) ...
    assert any(CANARY in wire_text(raw) for raw in raws)
    # ... but nothing from the transition request on holds it.
    transition_index = next(i for i, raw in enumerate(raws) if copy.TRANSITION_INSTRUCTION in wire_text(raw))
    after = raws[transition_index:]
    assert all(CANARY not in wire_text(raw) for raw in after)
    assert all(PASS not in wire_text(raw) for raw in raws)
    last = messages_of(replies_only(after)[-1])
    contents = [m["content"] for m in last]
    assert contents.count(copy.PLACEHOLDER) == 1
    assert "hello before" in contents and contents[-1] == "hello after"


def test_after_sigkill_in_private_mode_the_restart_is_normal_and_the_canary_stays_out(tmp_path, pass_hash):
    with FakeOpenAIServer.run_in_thread() as server:
        env = companion_env(
            tmp_path,
            COMPANION_LLM_BASE_URL=server.base_url,
            COMPANION_PRIVATE_PASSPHRASE_HASH=pass_hash,
            COMPANION_PRIVATE_IDLE_MINUTES="0",
        )
        process = spawn_companion(["chat"], env)
        try:
            process.stdin.write(f"hello before the crash\n/private {PASS} 7d\nconfiding {CANARY}\n")
            process.stdin.flush()
            deadline = time.monotonic() + 30
            while not any(CANARY in wire_text(raw) for raw in server.raw_requests):
                assert time.monotonic() < deadline, "the private turn never reached the model"
                time.sleep(0.05)
            time.sleep(0.2)  # let the reply be stored, too: the crash happens mid-interval either way
            process.send_signal(signal.SIGKILL)
            process.wait(10)
        finally:
            if process.poll() is None:
                process.kill()
            for stream in (process.stdin, process.stdout, process.stderr):
                stream.close()
        count = len(server.raw_requests)
        result = run_companion(["chat"], env, stdin="/mode\nhello after the restart\n")
        raws = list(server.raw_requests)[count:]
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"{copy.RESTART_ENDED_PRIVATE}\n\nYou are in normal mode.")
    assert all(CANARY not in wire_text(raw) for raw in raws)  # the capture pass included
    raws = replies_only(raws)
    assert len(raws) == 1
    contents = [m["content"] for m in messages_of(raws[0])]
    assert contents.count(copy.PLACEHOLDER) == 1
    assert "hello before the crash" in contents and contents[-1] == "hello after the restart"
    assert copy.PRIVATE_SYSTEM_LINE not in wire_text(raws[0])


LASTING_TOOLS = {
    "remember",
    "recall",
    "forget",
    "list_goals",
    "set_goal",
    "update_goal",
    "schedule_followup",
    "watch_event",
    "list_followups",
    "pause_followup",
}


def test_the_tool_set_on_the_wire_has_no_lasting_tools_in_private_mode(tmp_path, pass_hash):
    import sqlite3

    with FakeOpenAIServer.run_in_thread() as server:
        env = companion_env(
            tmp_path, COMPANION_LLM_BASE_URL=server.base_url, COMPANION_PRIVATE_PASSPHRASE_HASH=pass_hash
        )
        script = (
            f"/remember my sister is Ana\nhello\n/private {PASS}\nnote {CANARY}\n/remember {CANARY}\n"
            f"/normal\n/recall {CANARY}\n/recall Ana\n/memory\n"
        )
        result = run_companion(["chat"], env, stdin=script)
        bodies = [json.loads(raw) for raw in server.raw_requests]
        report = run_companion(["report"], env)
    assert result.returncode == 0, result.stderr
    normal = next(b for b in bodies if any(m.get("content") == "hello" for m in b["messages"]))
    private = next(b for b in bodies if any(CANARY in (m.get("content") or "") for m in b["messages"]))
    assert {t["function"]["name"] for t in normal.get("tools", [])} >= LASTING_TOOLS
    assert LASTING_TOOLS.isdisjoint({t["function"]["name"] for t in private.get("tools", [])})
    assert "Private mode writes nothing that outlives it" in result.stdout
    assert "my sister is Ana" in result.stdout  # recalled and listed
    assert result.stdout.count(CANARY) == 0  # not recalled, not in /memory
    assert CANARY not in report.stdout and report.returncode == 0
    with sqlite3.connect(tmp_path / "companion.db") as db:
        for table in ("pad_entries", "notes", "agent_events", "agent_runs", "recall_fts"):
            rows = db.execute(f"SELECT * FROM {table}").fetchall()
            assert CANARY not in repr(rows), table
