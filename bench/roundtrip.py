"""6. Telegram round trip: a user message put into a fake Bot API until the bot's sendMessage
arrives there, through `companion run` and through a bare python-telegram-bot application
(bench/bare_bot.py) that asks the same zero-latency model server with httpx and commits twice a
turn to the same engine; on SQLite and on PostgreSQL (a durable scratch server, when one can
start), every child side by side in the same run, timed in alternating blocks, each round in a seeded order of its own. `--before PATH`
adds `companion run` from another checkout (with its own .venv) on each engine: a change timed
beside the tree before it, in the same run."""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import random
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from bench._common import median, ms, percentile, ratio
from bench._gateway import ChildProcess, TimedBotApi, bare_bot, gateway
from bench._postgres import durable_cluster, rows
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
BEFORE_TOKEN = "234561:BENCH-before"
ENGINES = ("sqlite", "postgres")
_STRACE_LINE = re.compile(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$")


class _Side:
    def __init__(self, name: str, api: TimedBotApi, child: ChildProcess, engine: str = "sqlite") -> None:
        self.name = name
        self.engine = engine
        self.api = api
        self.child = child
        self.samples: list[float] = []
        self.cpu_seconds = 0.0  # the child's user and system time over the timed phase (every side's turns)
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


def _summary(companion: _Side, bare: _Side, before: _Side | None) -> dict:
    c, b = companion.samples, bare.samples
    result = {
        "companion_median_ms": ms(median(c)),
        "companion_p90_ms": ms(percentile(c, 90)),
        "bare_median_ms": ms(median(b)),
        "bare_p90_ms": ms(percentile(b, 90)),
        "ratio_median": round(ratio(median(c), median(b)), 3),
        "ratio_p90": round(ratio(percentile(c, 90), percentile(b, 90)), 3),
        # CPU time a turn (every thread of the child; clock ticks, so read over whole blocks): less
        # moved by other work on the machine than the round trip, which waits for the CPU too.
        "companion_cpu_ms_per_turn": ms(companion.cpu_seconds / len(c)),
        "bare_cpu_ms_per_turn": ms(bare.cpu_seconds / len(b)),
    }
    if before is not None:
        result["before_median_ms"] = ms(median(before.samples))
        result["before_ratio_median"] = round(ratio(median(before.samples), median(b)), 3)
        result["before_cpu_ms_per_turn"] = ms(before.cpu_seconds / len(before.samples))
    return result


async def _measure(
    turns: int, warmup: int, block: int, trace_turns: int, engines: tuple[str, ...], before: Path | None
) -> dict:
    skipped: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        cluster = stack.enter_context(durable_cluster()) if "postgres" in engines else None
        if isinstance(cluster, str):
            skipped["postgres"], cluster = cluster, None
        urls: dict[str, str] = {}
        if cluster is not None:
            for name in ("companion", "bare", "before"):
                urls[name] = cluster.url(cluster.create_database(name=f"bench_{name}"))
        return await _measure_on(turns, warmup, block, trace_turns, engines, before, urls, skipped)
    raise AssertionError("unreachable")  # ExitStack does not swallow


async def _measure_on(
    turns: int,
    warmup: int,
    block: int,
    trace_turns: int,
    engines: tuple[str, ...],
    before: Path | None,
    urls: dict[str, str],
    skipped: dict[str, str],
) -> dict:
    measured = [e for e in engines if e not in skipped]
    async with contextlib.AsyncExitStack() as stack:
        model = await stack.enter_async_context(FakeOpenAIServer())
        model.responder = _echo
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-roundtrip-")))
        sides: list[_Side] = []
        for engine in measured:
            kinds = [("companion run", COMPANION_TOKEN, None), ("bare bot", BARE_TOKEN, None)]
            if before is not None:
                kinds.append(("companion run (before)", BEFORE_TOKEN, before))
            for name, token, tree in kinds:
                api = await stack.enter_async_context(TimedBotApi(token=token))
                cwd = root / f"{engine}-{name.split()[0]}{'-before' if tree else ''}"
                cwd.mkdir()
                key = "bare" if name == "bare bot" else ("before" if tree else "companion")
                if name == "bare bot":
                    database = urls["bare"] if engine == "postgres" else None
                    child = bare_bot(cwd, token, api.base_url, model.base_url, database)
                else:
                    on_engine = (
                        {"COMPANION_DATABASE_URL": urls[key], "COMPANION_KEY_DIR": str(cwd / "keys")}
                        if engine == "postgres"
                        else {}
                    )
                    child = gateway(
                        cwd,
                        tree=tree,
                        name=f"{name} on {engine}",
                        COMPANION_TELEGRAM_TOKEN=token,
                        COMPANION_TELEGRAM_BASE_URL=api.base_url,
                        COMPANION_LLM_BASE_URL=model.base_url,
                        COMPANION_ALLOWED_USERS=f"telegram:{CHAT}",
                        **on_engine,
                    )
                sides.append(_Side(name, api, child, engine))
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
            marks = {id(side): (len(side.api.calls), side.api.updates_returned) for side in sides}
            request_bytes: dict[int, list[int]] = {id(side): [] for side in sides}
            done = 0
            # CPU over the whole timed phase, not over each side's own turns: the work a turn leaves
            # after its reply arrived (the mark after the send, the next poll) runs while the next
            # side is timed, and /proc counts in 10 ms ticks, too coarse for one turn of a few ms.
            cpu_at = {id(side): side.child.cpu_seconds() for side in sides}
            started = time.perf_counter()
            order = random.Random(31)  # the same orders in every run
            while done < turns:  # alternating blocks: load from elsewhere falls on every side alike
                n = min(block, turns - done)
                # Each round in an order of its own: what a turn leaves after its reply (a companion's
                # mark after the send, its next poll) runs while the next side is timed, so with one
                # fixed order the side after the bare bot (the least such work) was always favoured.
                for side in order.sample(sides, len(sides)):
                    for _ in range(n):
                        side.samples.append(await side.round_trip())
                        request_bytes[id(side)].append(len(model.raw_requests[-1]))
                done += n
            elapsed = time.perf_counter() - started
            await asyncio.sleep(0.2)  # the last turns' tails
            for side in sides:
                side.cpu_seconds = side.child.cpu_seconds() - cpu_at[id(side)]
            traced = {}
            if trace_turns:
                for side in sides:
                    traced[id(side)] = await _syscalls(side, trace_turns)
        finally:
            codes = {id(side): await side.child.stop() for side in sides}
    result: dict = {"turns": turns, "warmup": warmup, "target_ratio": TARGET_RATIO, "engines": {}}
    for engine in engines:
        if engine in skipped:
            result["engines"][engine] = {"skipped": skipped[engine]}
            continue
        on = {side.name: side for side in sides if side.engine == engine}
        summary = _summary(on["companion run"], on["bare bot"], on.get("companion run (before)"))
        if engine == "postgres":
            # A tree whose `companion run` ignores COMPANION_DATABASE_URL answers from a SQLite file:
            # its round trip says nothing of PostgreSQL.
            for key, name in (("companion", "companion run"), ("before", "companion run (before)")):
                if name in on and not rows(urls[key], "messages"):
                    summary[f"{key}_not_on_postgres"] = True
        summary.update(
            {
                "bot_api_calls_per_turn": {
                    name: _calls_per_turn(side.api, marks[id(side)][0], turns) for name, side in on.items()
                },
                "model_request_bytes": {
                    name: round(sum(v) / len(v)) for name, side in on.items() if (v := request_bytes[id(side)])
                },
                "updates_parsed_per_turn": {
                    name: round((side.api.updates_returned - marks[id(side)][1]) / turns, 2)
                    for name, side in on.items()
                },
                "stray_replies": {name: side.strays for name, side in on.items()},
                "syscalls": {name: traced[id(side)] for name, side in on.items() if id(side) in traced},
                "exit_codes": {name: codes[id(side)] for name, side in on.items()},
            }
        )
        summary["ok"] = (
            summary["ratio_median"] <= TARGET_RATIO
            and not any(summary["stray_replies"].values())
            and not summary.get("companion_not_on_postgres")
        )
        result["engines"][engine] = summary
    result["wall_s"] = round(elapsed, 2)
    # bench/run.py's table reads SQLite's numbers at the top level.
    result.update(result["engines"].get("sqlite", {}))
    measured_ok = [e["ok"] for e in result["engines"].values() if "ok" in e]
    result["ok"] = bool(measured_ok) and all(measured_ok)
    return result


def run(
    quick: bool = False,
    *,
    engines: tuple[str, ...] = ENGINES,
    before: Path | None = None,
    turns: int | None = None,
) -> dict:
    if quick:
        return asyncio.run(_measure(turns or 40, 10, 10, 0, engines, before))
    return asyncio.run(_measure(turns or 200, 40, 20, 50, engines, before))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="40 turns a side, no strace pass")
    parser.add_argument("--turns", type=int, help="timed turns a side (200; quick: 40)")
    parser.add_argument("--engines", default=",".join(ENGINES), help="sqlite,postgres (the default) or one of them")
    parser.add_argument("--before", type=Path, help="a checkout (with its .venv) timed beside this one")
    parser.add_argument("--no-strace", action="store_true", help="skip the strace pass")
    parser.add_argument("--block", type=int, default=20, help="turns a side in a row (1: every side in turn)")
    args = parser.parse_args()
    engines = tuple(e for e in args.engines.split(",") if e)
    unknown = set(engines) - set(ENGINES)
    if unknown:
        parser.error(f"unknown engines: {', '.join(sorted(unknown))}")
    if args.quick:
        result = run(True, engines=engines, before=args.before, turns=args.turns)
    else:
        trace = 0 if args.no_strace else 50
        result = asyncio.run(_measure(args.turns or 200, 40, args.block, trace, engines, args.before))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":  # a look at this one alone
    main()
