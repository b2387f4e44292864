"""6. Telegram round trip: a user message put into a fake Bot API until the bot's sendMessage
arrives there, through `companion run` and through a bare python-telegram-bot application
(bench/bare_bot.py) that asks the same zero-latency model server with httpx; both children
run side by side in the same run and are timed in alternating blocks."""

from __future__ import annotations

import asyncio
import collections
import json
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench._common import median, ms, percentile, ratio
from bench._gateway import ChildProcess, TimedBotApi, bare_bot, gateway
from tests.helpers.fake_openai import FakeOpenAIServer

TARGET_RATIO = 1.5
CHAT = 111  # a private chat: the chat id is the user id
_HELLO = re.compile(r"hello (\d+)")


def _echo(body: dict) -> str:
    """The zero-latency model answers "echo N" to the newest "hello N" it was given."""
    for message in reversed(body.get("messages") or []):
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            match = _HELLO.search(message["content"])
            return f"echo {match.group(1)}" if match else "?"
    return "?"


COMPANION_TOKEN = "123456:BENCH-companion"
BARE_TOKEN = "654321:BENCH-bare"
_STRACE_LINE = re.compile(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$")


class _Side:
    def __init__(self, name: str, api: TimedBotApi, child: ChildProcess) -> None:
        self.name = name
        self.api = api
        self.child = child
        self.samples: list[float] = []
        self.turns = 0
        self.strays = 0

    async def round_trip(self, timeout: float = 30.0) -> float:
        """Seconds from putting "hello N" into the Bot API until the reply "echo N" reached it.
        Any other reply (a duplicate, an error line) is counted in `strays`."""
        api = self.api
        before = len(api.sent)
        self.turns += 1
        expected = f"echo {self.turns}"

        def answered() -> int | None:
            return next((i for i in range(before, len(api.sent)) if api.sent[i].text == expected), None)

        started = time.perf_counter()
        api.send_text(CHAT, CHAT, f"hello {self.turns}")
        await self.child.wait_until(lambda: answered() is not None, timeout, f"the reply {expected!r}", api.wait_for)
        index = answered()
        self.strays += index - before
        return api.sent_at[index] - started

    async def ready(self) -> None:
        await self.child.wait_until(lambda: bool(self.api.calls_of("getUpdates")), 60, "polling", self.api.wait_for)


async def _syscalls(side: _Side, turns: int) -> dict | None:
    """Syscalls of the child during `turns` round trips, by strace attached to all its threads
    (a separate pass: tracing slows the child). None without strace or ptrace permission."""
    strace = shutil.which("strace")
    if strace is None:
        return None
    with tempfile.NamedTemporaryFile(prefix="bench-strace-", suffix=".txt") as out:
        tracer = await asyncio.create_subprocess_exec(
            strace,
            "-f",
            "-c",
            "-o",
            out.name,
            "-p",
            str(side.child.pid),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            await asyncio.sleep(0.5)  # attached to every thread before the first message
            if tracer.returncode is not None:
                return None
            for _ in range(turns):
                await side.round_trip()
            await asyncio.sleep(0.2)
        finally:
            if tracer.returncode is None:
                tracer.send_signal(signal.SIGINT)  # detach and write the summary
            try:
                await asyncio.wait_for(tracer.wait(), 10)
            except TimeoutError:
                tracer.kill()
                await tracer.wait()
        counts = {}
        for line in Path(out.name).read_text().splitlines():
            match = _STRACE_LINE.match(line)
            if match and match.group(2) != "total":
                counts[match.group(2)] = int(match.group(1))
    if not counts:
        return None
    per_turn = {name: round(n / turns, 2) for name, n in sorted(counts.items(), key=lambda kv: -kv[1])}
    return {
        "turns": turns,
        "fsync_per_turn": round(sum(counts.get(n, 0) for n in ("fsync", "fdatasync")) / turns, 2),
        "syscalls_per_turn": round(sum(counts.values()) / turns, 1),
        "top": dict(list(per_turn.items())[:8]),
    }


def _calls_per_turn(api: TimedBotApi, start: int, turns: int) -> dict[str, float]:
    counted = collections.Counter(name for name, _ in api.calls[start:])
    return {name: round(n / turns, 2) for name, n in counted.most_common()}


async def _measure(turns: int, warmup: int, block: int, trace_turns: int) -> dict:
    async with (
        TimedBotApi(token=COMPANION_TOKEN) as api_c,
        TimedBotApi(token=BARE_TOKEN) as api_b,
        FakeOpenAIServer() as model,
    ):
        model.responder = _echo
        with tempfile.TemporaryDirectory(prefix="bench-roundtrip-") as tmp:
            root = Path(tmp)
            (root / "companion").mkdir()
            (root / "bare").mkdir()
            companion = _Side(
                "companion run",
                api_c,
                gateway(
                    root / "companion",
                    COMPANION_TELEGRAM_TOKEN=COMPANION_TOKEN,
                    COMPANION_TELEGRAM_BASE_URL=api_c.base_url,
                    COMPANION_LLM_BASE_URL=model.base_url,
                    COMPANION_ALLOWED_USERS=f"telegram:{CHAT}",
                ),
            )
            bare = _Side("bare bot", api_b, bare_bot(root / "bare", BARE_TOKEN, api_b.base_url, model.base_url))
            sides = (companion, bare)
            try:
                for side in sides:
                    await side.child.start()
                for side in sides:
                    await side.ready()
                # The gateway's start-up work (answering turns a previous process left open, the
                # first outbox dispatch) runs right after polling begins; let it finish first.
                await asyncio.sleep(1.0)
                # Warm-up: imports, connections, caches; and the companion's context window fills
                # (80 messages), so the timed turns see a steady conversation, not a growing one.
                for _ in range(warmup):
                    for side in sides:
                        await side.round_trip()
                marks = {side.name: (len(side.api.calls), side.api.updates_returned) for side in sides}
                requests_bytes = {side.name: [] for side in sides}
                done = 0
                started = time.perf_counter()
                while done < turns:  # alternating blocks: load from elsewhere falls on both alike
                    n = min(block, turns - done)
                    for side in sides:
                        for _ in range(n):
                            side.samples.append(await side.round_trip())
                            requests_bytes[side.name].append(len(model.raw_requests[-1]))
                    done += n
                elapsed = time.perf_counter() - started
                calls = {side.name: _calls_per_turn(side.api, marks[side.name][0], turns) for side in sides}
                parsed = {
                    side.name: round((side.api.updates_returned - marks[side.name][1]) / turns, 2) for side in sides
                }
                traced = {}
                if trace_turns:
                    for side in sides:
                        traced[side.name] = await _syscalls(side, trace_turns)
            finally:
                codes = {side.name: await side.child.stop() for side in sides}
    c, b = companion.samples, bare.samples
    result = {
        "turns": turns,
        "warmup": warmup,
        "companion_median_ms": ms(median(c)),
        "companion_p90_ms": ms(percentile(c, 90)),
        "bare_median_ms": ms(median(b)),
        "bare_p90_ms": ms(percentile(b, 90)),
        "ratio_median": round(ratio(median(c), median(b)), 3),
        "ratio_p90": round(ratio(percentile(c, 90), percentile(b, 90)), 3),
        "target_ratio": TARGET_RATIO,
        "bot_api_calls_per_turn": calls,
        "model_request_bytes": {name: round(sum(v) / len(v)) for name, v in requests_bytes.items() if v},
        "updates_parsed_per_turn": parsed,
        "stray_replies": {side.name: side.strays for side in sides},
        "syscalls": traced,
        "exit_codes": codes,
        "wall_s": round(elapsed, 2),
    }
    result["ok"] = result["ratio_median"] <= TARGET_RATIO and not any(result["stray_replies"].values())
    return result


def run(quick: bool = False) -> dict:
    if quick:
        return asyncio.run(_measure(turns=40, warmup=10, block=10, trace_turns=0))
    return asyncio.run(_measure(turns=200, warmup=40, block=20, trace_turns=50))


if __name__ == "__main__":  # a look at this one alone
    print(json.dumps(run(quick="--quick" in sys.argv), indent=1))
