"""The web chat's streamed answer across a kill (issue 24, points 3 and 5): `companion run` serving the
web chat alone with the shipped streaming (one edit a second), a fake model writing ten words a
second, and GET /events read as a browser reads it. Killed mid-answer, then started again: the page
ends with the answer once, in the bubble the stream showed, and no partial text was ever stored or
logged."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.ports import free_port
from tests.helpers.proc import companion_env, env_cwd
from tests.helpers.web import signed_in_browser, stop_gateway
from tests.helpers.web_pages import EventStream

pytestmark = pytest.mark.wire

QUESTION = "Tell me the whole story, slowly."
STORY = "Once upon a time " + " ".join(f"word{n}" for n in range(60)) + " and that was all."


def answer(body: dict[str, Any]) -> str:
    return STORY if body["messages"][-1].get("content") == QUESTION else "Noted."


def rows(folder: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(folder / "companion.db", timeout=10) as db:
        return db.execute(sql).fetchall()


def on_disk(folder: Path) -> bytes:
    return b"".join(path.read_bytes() for path in folder.glob("companion.db*"))


def log_of(log: Path) -> str:
    return log.read_text(encoding="utf-8", errors="replace")


def spawn(env: dict[str, str], log: Path) -> subprocess.Popen:
    with log.open("a") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "bot", "run"], env=env, cwd=env_cwd(env), stdout=sink, stderr=subprocess.STDOUT
        )


async def ready(base: str, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 30
    async with httpx.AsyncClient(base_url=base, timeout=2) as client:
        while True:
            assert process.poll() is None, log_of(log)
            with contextlib.suppress(httpx.TransportError):
                if (await client.get("/readyz")).status_code == 200:
                    return
            assert time.monotonic() < deadline, "companion run did not become ready"
            await asyncio.sleep(0.05)


async def until(predicate, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout} s"
        await asyncio.sleep(0.05)


async def test_a_web_answer_killed_mid_stream_is_answered_once_into_its_bubble_after_the_restart(tmp_path: Path):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "companion.log"
    with FakeOpenAIServer.run_in_thread() as model:
        model.responder = answer
        model.token_seconds = 0.1
        env = companion_env(
            tmp_path, COMPANION_HTTP_PORT=str(port), COMPANION_LLM_BASE_URL=model.base_url, COMPANION_LOG_LEVEL="DEBUG"
        )
        process = spawn(env, log)
        try:
            await ready(base, process, log)
            async with signed_in_browser(base, env) as (browser, csrf):
                async with EventStream(browser) as events:
                    await events.next("history")
                    sending = asyncio.create_task(
                        browser.post("/send", json={"text": QUESTION}, headers={"X-CSRF-Token": csrf})
                    )
                    while True:  # the answer shows while written ...
                        _, shown = await events.next("partial", timeout=30)
                        if "word5 " in shown["text"]:
                            break
                    process.send_signal(signal.SIGKILL)  # ... and the process dies mid-answer
                    process.wait(timeout=30)
                    with contextlib.suppress(httpx.HTTPError):
                        await sending
                bubble = shown["stream"]
                assert STORY.startswith(shown["text"]) and shown["text"] != STORY
                # Left: the reply's row, streaming, naming the bubble shown, holding no text.
                assert rows(tmp_path, "SELECT status, streamed_ids, text FROM deliveries") == [
                    ("streaming", bubble, None)
                ]
                assert b"word5 " not in on_disk(tmp_path)

                asked = len(model.raw_requests)
                process = spawn(env, log)
                await ready(base, process, log)
                # The browser reconnects (its session is stored), saying the last event it saw.
                async with EventStream(browser, headers={"Last-Event-ID": "3"}) as again:
                    await until(
                        lambda: rows(tmp_path, "SELECT status FROM deliveries") == [("sent",)],
                        "the answer's delivery after the restart",
                    )
                    await until(lambda: len(again.received) >= 1, "the history")
                    await asyncio.sleep(0.5)  # any event still on its way
                    shown_again = [
                        data["text"]
                        for _, kind, data in again.received
                        if kind == "live" and data["text"] == STORY and data["stream"] == [bubble]
                    ] + [
                        item["text"]
                        for _, kind, data in again.received
                        if kind == "history"
                        for item in data["items"]
                        if item.get("text") == STORY
                    ]
                    assert shown_again == [STORY]  # once: in the history, or as the final of its bubble
                    assert not [kind for _, kind, _ in again.received if kind == "partial"]  # not streamed again
        finally:
            stop_gateway(process)
    assert process.returncode == 0, log_of(log)[-3000:]
    assert len(model.raw_requests) == asked + 1  # the open turn was answered once more, once
    assert rows(tmp_path, "SELECT status, streamed_ids FROM deliveries") == [("sent", bubble)]
    assert rows(tmp_path, "SELECT count(*) FROM messages WHERE role = 'assistant'") == [(1,)]
    text = log_of(log)
    assert "sent in 1 parts" in text  # the log is written, at DEBUG
    assert "word5" not in text and "Traceback" not in text
