"""7. Many conversations at once through one `companion run`: Telegram chats and Discord DMs
(half each) write at the same moment, round after round; every reply must arrive exactly once
and in order per conversation, and the gateway's memory after the last round must stay within
5 MB of its memory after the first (no growth per turn). A last phase sends a few messages per
conversation without waiting for the replies (queued behind each other), to check the order.
Throughout, a separate process asks the gateway's GET /readyz every 50 ms: while the conversations
are being answered, each answer must come in under 50 ms (issue 23)."""

from __future__ import annotations

import asyncio
import json
import re
import sys
import tempfile
import time
from pathlib import Path

from bench._common import median, percentile
from bench._gateway import TimedBotApi, gateway
from bench._postgres import durable_cluster, rows
from core.values.copy import MODE_UNREADABLE
from tests.helpers.fake_discord import FakeDiscordServer
from tests.helpers.fake_openai import FakeOpenAIServer

BUDGET_MB = 5.0  # decimal megabytes, as the budget is written
READYZ_BUDGET_MS = 50.0
READYZ_EVERY = 0.05
READYZ_IDLE_SECONDS = 5.0
# The prober: its own process (its timings owe nothing to this bench's busy event loop), one
# keep-alive connection, GET /readyz every READYZ_EVERY seconds until its stdin closes; prints
# [wall time, milliseconds, status] of each.
_PROBER = r"""
import http.client, json, select, sys, time
port, every = int(sys.argv[1]), float(sys.argv[2])
connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
samples = []
print("probing", flush=True)
while not (select.select([sys.stdin], [], [], 0)[0] and not sys.stdin.readline()):
    at, started = time.time(), time.perf_counter()
    try:
        connection.request("GET", "/readyz", headers={"Host": "localhost"})
        response = connection.getresponse()
        response.read()
        status = response.status
    except OSError as exc:
        status = type(exc).__name__
        connection.close()
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    samples.append([at, (time.perf_counter() - started) * 1e3, status])
    time.sleep(every)
print(json.dumps(samples), flush=True)
"""
TELEGRAM_TOKEN = "123456:BENCH-load"
TELEGRAM_FIRST = 1_000_001  # private chats: chat id = user id
DISCORD_FIRST = 2_000_001
_ASKED = re.compile(r"#([td]\d+)/(\d+)")
_TURN_MS = re.compile(r"answered with \d+ chars in (\d+) ms")


def _echo(body: dict) -> str:
    """The zero-latency model answers with the tag of the newest user message it was given."""
    for message in reversed(body.get("messages") or []):
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            match = _ASKED.search(message["content"])
            return f"echo #{match.group(1)}/{match.group(2)}" if match else "no tag"
    return "no user message"


def _db_mb(directory: Path) -> float:
    return round(sum(p.stat().st_size for p in directory.glob("companion.db*")) / 1e6, 2)


class _Load:
    def __init__(self, telegram: TimedBotApi, discord_server: FakeDiscordServer, conversations: int) -> None:
        self.telegram = telegram
        self.discord = discord_server
        half = conversations // 2
        self.telegram_chats = {f"t{i}": TELEGRAM_FIRST + i for i in range(conversations - half)}
        self.discord_users = {f"d{i}": DISCORD_FIRST + i for i in range(half)}
        self.sent_count = 0
        self._channel_tag: dict[int, str] = {}

    @property
    def allowed_users(self) -> str:
        return ",".join(
            [f"telegram:{u}" for u in self.telegram_chats.values()]
            + [f"discord:{u}" for u in self.discord_users.values()]
        )

    @property
    def tags(self) -> list[str]:
        return [*self.telegram_chats, *self.discord_users]

    def replies(self) -> int:
        return len(self.telegram.sent) + len(self.discord.sent)

    async def send(self, numbers: range) -> None:
        """Every conversation sends the messages `numbers` at once: all Telegram updates are queued, then
        the Discord messages are dispatched (each conversation's in order)."""
        discord_sends = []
        for k in numbers:
            for tag, chat in self.telegram_chats.items():
                self.telegram.send_text(chat, chat, f"#{tag}/{k} how are you?")
            discord_sends += [
                self.discord.send_dm(user, f"#{tag}/{k} how are you?") for tag, user in self.discord_users.items()
            ]
        for send in discord_sends:  # in order: one conversation's messages must leave in order
            await send
        self.sent_count += len(numbers) * len(self.tags)

    def received(self) -> dict[str, list[str]]:
        """Reply texts per conversation, in the order the fake servers received them."""
        if not self._channel_tag:
            self._channel_tag = {self.discord.dm_channel_id(u): tag for tag, u in self.discord_users.items()}
        by_tag: dict[str, list[str]] = {tag: [] for tag in self.tags}
        chat_tag = {chat: tag for tag, chat in self.telegram_chats.items()}
        for message in self.telegram.sent:
            by_tag.setdefault(chat_tag.get(message.chat_id, f"? telegram {message.chat_id}"), []).append(message.text)
        for message in self.discord.sent:
            tag = self._channel_tag.get(message.channel_id, f"? discord {message.channel_id}")
            by_tag.setdefault(tag, []).append(message.content)
        return by_tag


class _ReadyzProber:
    """GET /readyz from a process of its own, for as long as it runs."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _PROBER,
            str(self.port),
            str(READYZ_EVERY),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert self.proc.stdout is not None
        await asyncio.wait_for(self.proc.stdout.readline(), 30)

    async def stop(self) -> list[list]:
        """[wall time, ms, status] of every probe."""
        if self.proc is None or self.proc.stdin is None:
            return []
        self.proc.stdin.close()
        out, _ = await asyncio.wait_for(self.proc.communicate(), 30)
        return json.loads(out.decode() or "[]")


def _readyz(samples: list[list], windows: list[tuple[float, float]]) -> dict:
    """The probes answered while conversations were being answered (inside a round or the queued
    phase), and whether each came in under READYZ_BUDGET_MS with 200."""
    during = [(ms, status) for at, ms, status in samples if any(start <= at <= end for start, end in windows)]
    times = [ms for ms, _ in during]
    statuses: dict[str, int] = {}
    for _, status in during:
        statuses[str(status)] = statuses.get(str(status), 0) + 1
    slow = sum(ms >= READYZ_BUDGET_MS for ms in times)
    return {
        "probes": len(during),
        "median_ms": round(median(times), 2) if times else None,
        "p99_ms": round(percentile(times, 99), 2) if times else None,
        "max_ms": round(max(times), 2) if times else None,
        "over_budget": slow,
        "statuses": statuses,
        "budget_ms": READYZ_BUDGET_MS,
        "ok": bool(times) and slow == 0 and statuses == {"200": len(during)},
    }


def _check(received: dict[str, list[str]], expected_numbers: list[int]) -> dict:
    """Exactly once and in order: each conversation's replies echo exactly its numbers, ascending."""
    missing = duplicated = out_of_order = unexpected = unreadable = 0
    bad_examples: list[str] = []
    missing_by_number: dict[int, int] = {}
    for tag, texts in received.items():
        numbers = []
        for text in texts:
            match = re.fullmatch(r"echo #([td]\d+)/(\d+)", text)
            if match is None or match.group(1) != tag:
                unexpected += 1
                unreadable += text == MODE_UNREADABLE
                if len(bad_examples) < 3:
                    bad_examples.append(f"{tag}: {text[:60]!r}")
                continue
            numbers.append(int(match.group(2)))
        for number in set(expected_numbers) - set(numbers):
            missing += 1
            missing_by_number[number] = missing_by_number.get(number, 0) + 1
        duplicated += len(numbers) - len(set(numbers))
        if numbers != sorted(numbers):
            out_of_order += 1
            if len(bad_examples) < 3:
                bad_examples.append(f"{tag}: {numbers}")
    return {
        "missing": missing,
        "duplicated": duplicated,
        "conversations_out_of_order": out_of_order,
        "unexpected_replies": unexpected,
        "mode_unreadable_replies": unreadable,
        "missing_by_message_number": dict(sorted(missing_by_number.items())),
        "examples": bad_examples,
    }


async def _measure(
    conversations: int,
    rounds: int,
    burst: int,
    checkpoint_round: int,
    on_engine: dict[str, str] | None = None,
    tree: Path | None = None,
) -> dict:
    """`on_engine`: settings that put the gateway on another engine (PostgreSQL's URL and key folder);
    `tree`: `companion run` from that checkout (the tree before), with its own .venv."""
    async with (
        TimedBotApi(token=TELEGRAM_TOKEN) as telegram,
        FakeDiscordServer() as discord_server,
        FakeOpenAIServer() as model,
    ):
        model.responder = _echo
        load = _Load(telegram, discord_server, conversations)
        port = _free_port()
        prober = _ReadyzProber(port)
        windows: list[tuple[float, float]] = []  # (start, end) wall times while answering
        with tempfile.TemporaryDirectory(prefix="bench-load-") as tmp:
            child = gateway(
                Path(tmp),
                tree=tree,
                COMPANION_TELEGRAM_TOKEN=TELEGRAM_TOKEN,
                COMPANION_TELEGRAM_BASE_URL=telegram.base_url,
                COMPANION_DISCORD_TOKEN=discord_server.token,
                COMPANION_DISCORD_API_BASE=discord_server.api_base,
                COMPANION_DISCORD_GATEWAY_URL=discord_server.gateway_url,
                COMPANION_LLM_BASE_URL=model.base_url,
                COMPANION_ALLOWED_USERS=load.allowed_users,
                COMPANION_HTTP_PORT=str(port),
                # INFO only to see "gateway running": until then the start-up work (answering
                # turns the last process left open) runs beside the first turns.
                COMPANION_LOG_LEVEL="INFO",
                **(on_engine or {}),
            )
            per_round: list[dict] = []
            try:
                await child.start()
                await child.wait_until(lambda: "gateway running" in child.stderr_text(), 60, "the start-up")
                await prober.start()
                # The baseline: the same probes while the gateway idles, on the machine as it is now.
                idle_from = time.time()
                idle = [(idle_from, idle_from + READYZ_IDLE_SECONDS)]
                await asyncio.sleep(READYZ_IDLE_SECONDS)
                # Rounds: every conversation sends its next message at the same moment; the round
                # ends when every reply of it arrived. Memory is read after each round.
                for number in range(1, rounds + 1):
                    t0, started = time.perf_counter(), time.time()
                    await load.send(range(number, number + 1))
                    await child.wait_until(
                        lambda: load.replies() >= load.sent_count, 180, f"the replies of round {number}"
                    )
                    wall = time.perf_counter() - t0
                    windows.append((started, time.time()))
                    await asyncio.sleep(0.3)  # the marks after the last send; then memory is read
                    per_round.append(
                        {
                            "turns": load.sent_count,
                            "wall_s": round(wall, 3),
                            "turns_per_s": round(len(load.tags) / wall, 1),
                            "rss_mb": round(child.vm_rss() / 1e6, 2),
                            "db_mb": _db_mb(Path(tmp)),
                        }
                    )
                # Queued: each conversation sends `burst` messages without waiting for a reply.
                t0, started = time.perf_counter(), time.time()
                await load.send(range(rounds + 1, rounds + 1 + burst))
                await child.wait_until(lambda: load.replies() >= load.sent_count, 180, "the queued replies")
                burst_wall = time.perf_counter() - t0
                windows.append((started, time.time()))
                await asyncio.sleep(1.0)  # a late duplicate (the outbox dispatcher) would arrive now
                rss_end = child.vm_rss()
                received = load.received()
            finally:
                probes = await prober.stop()
                code = await child.stop()
                log_lines = child.stderr_text().splitlines()
                getupdates, parsed = len(telegram.calls_of("getUpdates")), telegram.updates_returned
    checks = _check(received, list(range(1, rounds + burst + 1)))
    first, last = per_round[checkpoint_round - 1], per_round[-1]
    telegram_turns = len(load.telegram_chats) * (rounds + burst)
    # The core logs each turn's duration (handle(), queueing for the store included) at INFO.
    turn_ms = [float(m.group(1)) for line in log_lines if (m := _TURN_MS.search(line))]
    growth = last["rss_mb"] - first["rss_mb"]
    total_turns = load.sent_count
    result = {
        "conversations": {"telegram": len(load.telegram_chats), "discord": len(load.discord_users)},
        "rounds": rounds,
        "queued_per_conversation": burst,
        "turns": total_turns,
        "replies": sum(len(v) for v in received.values()),
        **checks,
        "rss_checkpoint_turns": first["turns"],
        "rss_checkpoint_mb": first["rss_mb"],
        "rss_last_round_turns": last["turns"],
        "rss_last_round_mb": last["rss_mb"],
        "rss_growth_mb": round(growth, 2),
        # Memory a turn: the growth from the checkpoint round to the last, over the turns between.
        "rss_kb_per_turn": round(growth * 1e3 / max(last["turns"] - first["turns"], 1), 3),
        "rss_after_queued_mb": round(rss_end / 1e6, 2),
        "budget_mb": BUDGET_MB,
        "per_round": per_round,
        "rounds_turns_per_s": round(rounds * len(load.tags) / sum(r["wall_s"] for r in per_round), 1),
        "queued_turns_per_s": round(burst * len(load.tags) / burst_wall, 1),
        "model_requests": len(model.requests),
        "turn_ms_in_core": {"median": median(turn_ms), "p90": percentile(turn_ms, 90), "max": max(turn_ms, default=0)},
        "telegram_getupdates_per_turn": round(getupdates / telegram_turns, 2),
        "telegram_updates_parsed_per_turn": round(parsed / telegram_turns, 1),
        "readyz_under_load": _readyz(probes, windows),
        "readyz_idle": _readyz(probes, idle),
        "exit_code": code,
        "log_warnings": [line[:160] for line in log_lines if " WARNING " in line or " ERROR " in line][:5],
        "tracebacks": sum("Traceback" in line for line in log_lines),
    }
    delivered_ok = (
        not (
            checks["missing"]
            or checks["duplicated"]
            or checks["conversations_out_of_order"]
            or checks["unexpected_replies"]
        )
        and code == 0
    )
    result["delivered_ok"] = delivered_ok
    result["memory_ok"] = growth <= BUDGET_MB
    result["ok"] = delivered_ok and result["memory_ok"] and result["readyz_under_load"]["ok"]
    return result


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run(quick: bool = False, *, sqlite: bool = True, postgres: bool = True, tree: Path | None = None) -> dict:
    """SQLite's numbers at the top level (bench/run.py's table), PostgreSQL's (a durable scratch
    server, bench/_postgres.py) under "postgres", measured one after the other."""
    # quick: memory compared between round 1 and round 3 only, an indication, not the budget;
    # else 200 conversations, memory after round 1 (200 turns) against round 10 (2,000 turns).
    sizes = (
        {"conversations": 20, "rounds": 3, "burst": 2} if quick else {"conversations": 200, "rounds": 10, "burst": 3}
    )
    result = asyncio.run(_measure(**sizes, checkpoint_round=1, tree=tree)) if sqlite else {}
    if postgres:
        with durable_cluster() as cluster:
            if isinstance(cluster, str):
                result["postgres"] = {"skipped": cluster}
            else:
                with tempfile.TemporaryDirectory(prefix="bench-load-keys-") as keys:
                    url = cluster.url(cluster.create_database(name="bench_load"))
                    on_engine = {"COMPANION_DATABASE_URL": url, "COMPANION_KEY_DIR": keys}
                    result["postgres"] = asyncio.run(
                        _measure(**sizes, checkpoint_round=1, on_engine=on_engine, tree=tree)
                    )
                    result["postgres"]["on_postgres"] = bool(rows(url, "messages"))
    return result


USAGE = "python -m bench.load [--quick] [--sqlite-only | --postgres-only] [--before PATH]"

if __name__ == "__main__":  # a look at this one alone
    if "-h" in sys.argv or "--help" in sys.argv:
        sys.exit(f"usage: {USAGE}\n\n{__doc__}")
    before = Path(sys.argv[sys.argv.index("--before") + 1]) if "--before" in sys.argv else None
    print(
        json.dumps(
            run(
                quick="--quick" in sys.argv,
                sqlite="--postgres-only" not in sys.argv,
                postgres="--sqlite-only" not in sys.argv,
                tree=before,
            ),
            indent=1,
        )
    )
