"""Telegram on a shared PostgreSQL database (issue 33, point 6): turns per second and the round trip with one, two and
three `companion run` processes behind a round-robin front (tests/helpers/round_robin.py), and the time the others
take to take over a SIGKILLed process's chats.

Each process is a real `companion run` (COMPANION_SHARED_DATABASE=true, Telegram's webhook, one shared key folder)
on the fake Bot API and a model that answers at once (an echo): what is timed is the gateway, the store and the
hand-offs between processes, not a model. Each chat sends its next message once its reply came (bursts off), so a
chat's round trip is one message's: its delivery through the front, the inbox, the turn, the reply's send. The
PostgreSQL server is durable as a real one is (bench/_postgres.py). Run: `.venv/bin/python -m bench.shared_telegram`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._common import environment, median, ms, percentile
from bench._postgres import durable_cluster
from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.fake_telegram import FakeTelegramServer
from tests.helpers.postgres import PostgresCluster
from tests.helpers.round_robin import RoundRobinFront
from tests.helpers.running import Running
from tests.helpers.telegram_gateway import gateway_env
from tests.helpers.web import free_port
from tests.helpers.wire_platforms import rows

PATH = "/telegram/hook"
URL = f"https://companion.example.com{PATH}"
SECRET = "bench-shared-secret"
FIRST_CHAT = 9001


def _echo(body: dict[str, Any]) -> str:
    said = [m["content"] for m in body["messages"] if m.get("role") == "user" and isinstance(m.get("content"), str)]
    return f"echo: {said[-1].splitlines()[-1] if said else ''}"


def _converse(telegram: FakeTelegramServer, chats: list[int], messages: int, tag: str) -> list[float]:
    """Every chat's `messages`, each sent once the chat's reply to the one before came; the round trips (s)."""
    base = {chat: len(telegram.texts_to(chat)) for chat in chats}
    sent = dict.fromkeys(chats, 0)
    sent_at: dict[int, float] = {}
    trips: list[float] = []
    deadline = time.monotonic() + 600
    while any(sent[c] < messages or c in sent_at for c in chats):
        now = time.perf_counter()
        for chat in chats:
            answered = len(telegram.texts_to(chat)) - base[chat]
            if chat in sent_at and answered == sent[chat]:
                trips.append(now - sent_at.pop(chat))
            if answered == sent[chat] and sent[chat] < messages:
                telegram.send_text(chat, chat, f"{tag} {sent[chat]} of {chat}")
                sent[chat] += 1
                sent_at[chat] = time.perf_counter()
        if time.monotonic() > deadline:
            raise TimeoutError("the chats were not answered within 10 minutes")
        time.sleep(0.002)
    return trips


def _holder(url: str, chat: int) -> int | None:
    found = rows(
        url,
        "SELECT p.pid FROM chat_claims h JOIN conversations c ON c.id = h.conversation_id"
        " JOIN gateway_processes p ON p.id = h.holder WHERE c.chat_id = ?",
        (str(chat),),
    )
    return int(found[0][0]) if found else None


def _measure(cluster: PostgresCluster, processes: int, chats: int, messages: int, take_over: bool) -> dict[str, Any]:
    with (
        contextlib.ExitStack() as stack,
        FakeTelegramServer.run_in_thread() as telegram,
        FakeOpenAIServer.run_in_thread() as model,
    ):
        model.responder = _echo
        url = stack.enter_context(cluster.database())
        home = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-shared-")))
        chat_ids = [FIRST_CHAT + n for n in range(chats)]
        envs = []
        for n in range(processes):
            (home / str(n)).mkdir()
            envs.append(
                gateway_env(
                    home / str(n),
                    telegram,
                    model,
                    COMPANION_DATABASE_URL=url,
                    COMPANION_SHARED_DATABASE="true",
                    COMPANION_KEY_DIR=str(home / "keys"),
                    COMPANION_HTTP_PORT=str(free_port()),
                    COMPANION_TELEGRAM_WEBHOOK_URL=URL,
                    COMPANION_TELEGRAM_WEBHOOK_SECRET=SECRET,
                    COMPANION_ALLOWED_USERS=",".join(f"telegram:{c}" for c in chat_ids),
                    COMPANION_BURST_SECONDS="0",  # one answer per message, as the other benches
                    COMPANION_LOG_LEVEL="WARNING",
                )
            )
        gateways = []
        for env in envs:
            gateways.append(stack.enter_context(Running(env)))
            _until(lambda env=env: _ready(env), 60)  # one after the other: the first sets the webhook
        ports = [int(env["COMPANION_HTTP_PORT"]) for env in envs]
        front = stack.enter_context(RoundRobinFront.run_in_thread(backends=ports))
        telegram.deliver_to(f"http://127.0.0.1:{front.port}{PATH}")
        _converse(telegram, chat_ids, 2, "warm")  # every chat claimed, every process's caches warm
        started = time.perf_counter()
        trips = _converse(telegram, chat_ids, messages, "timed")
        wall = time.perf_counter() - started
        result: dict[str, Any] = {
            "processes": processes,
            "turns": chats * messages,
            "turns_per_second": round(chats * messages / wall, 1),
            "round_trip_ms": {"median": ms(median(trips)), "p90": ms(percentile(trips, 90))},
            "routed": dict(front.routed),
        }
        if take_over:
            pids = [g.proc.pid for g in gateways]
            held = {pid: [c for c in chat_ids if _holder(url, c) == pid] for pid in pids}
            pid = max(held, key=lambda p: len(held[p]))
            (victim,) = [g for g in gateways if g.proc.pid == pid]
            killed = time.perf_counter()
            victim.proc.send_signal(signal.SIGKILL)
            _until(lambda: all(_holder(url, c) not in (None, pid) for c in held[pid]), 60)
            taken = time.perf_counter() - killed
            answered = _converse(telegram, held[pid], 1, "after")
            result["take_over"] = {
                "chats": len(held[pid]),
                "all_taken_over_ms": ms(taken),
                "first_reply_after_kill_ms": ms(time.perf_counter() - killed),
                "round_trip_after_ms": ms(median(answered)),
            }
        return result


def _ready(env: dict[str, str]) -> bool:
    import httpx

    try:
        return httpx.get(f"http://127.0.0.1:{env['COMPANION_HTTP_PORT']}/readyz").status_code == 200
    except httpx.HTTPError:
        return False


def _until(condition: Any, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("not within the time")
        time.sleep(0.01)


def run(quick: bool = False, *, chats: int | None = None, messages: int | None = None) -> dict[str, Any]:
    chats = chats or (10 if quick else 30)
    messages = messages or (3 if quick else 10)
    with durable_cluster() as cluster:
        if isinstance(cluster, str):
            return {"skipped": cluster, "ok": False}
        results = [_measure(cluster, n, chats, messages, take_over=n == 3) for n in (1, 2, 3)]
    return {"environment": environment(), "chats": chats, "messages": messages, "runs": results, "ok": True}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10 chats x 3 messages")
    parser.add_argument("--chats", type=int)
    parser.add_argument("--messages", type=int)
    args = parser.parse_args()
    print(json.dumps(run(args.quick, chats=args.chats, messages=args.messages), indent=1))


if __name__ == "__main__":
    main()
