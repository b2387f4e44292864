"""1. Per-turn core overhead: `Companion.handle()` on the real store with a zero-latency provider,
against the bare SQLite reads and writes one turn needs, in the same run."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import inspect
import tempfile
import time
from pathlib import Path

import aiosqlite

from adapters.storage.engine import Counters
from adapters.storage.stores import open_stores, sqlite_stores
from bench._common import (
    INSERT_MESSAGE_SQL,
    STORE_PRAGMAS,
    WINDOW_LIMIT,
    WINDOW_SQL,
    ZeroLatencyProvider,
    median,
    ms,
    percentile,
    ratio,
)
from bench._postgres import durable_cluster
from bot.bootstrap import build_companion, core_entry
from core.delivery.outbox import Outbox
from core.ports.clock import SystemClock
from core.turn.config import CompanionConfig
from core.values.model import InboundMessage
from tests.helpers.fakes import FakeChatSender

TARGET_RATIO = 3.0
HELLO = InboundMessage("terminal", "terminal", "owner", "hello", is_direct=True)


class _CoreTurns:
    """The measured side: the real pipeline, store on a temp file."""

    def __init__(self, path: Path) -> None:
        self.stores = sqlite_stores(path)
        self.provider = ZeroLatencyProvider()
        self.companion = build_companion(self.stores, self.provider)

    async def start(self) -> None:
        await self.stores.database.start()
        await self.companion.start()

    async def turn(self) -> None:
        reply = await self.companion.handle(HELLO)
        assert reply is not None, "no reply"
        assert reply.text == "ok", reply

    async def profile(self, turns: int) -> dict:
        """Where a turn's time goes: the store methods it calls, and its trips, statements and commits.
        A separate pass after the timed one: the wrappers cost a little themselves."""
        spent: dict[str, float] = collections.defaultdict(float)
        calls: collections.Counter[str] = collections.Counter()
        # Each query class's methods, wrapped on the instance the consumers were given.
        patched = []
        for field in dataclasses.fields(self.stores):
            queries = getattr(self.stores, field.name)
            if field.name == "database":
                continue
            for name in dir(queries):
                method = getattr(queries, name, None)
                if name.startswith("_") or not inspect.iscoroutinefunction(method):
                    continue
                patched.append((queries, name))

                async def timed(*args, __name=name, __method=method, **kwargs):
                    t0 = time.perf_counter()
                    try:
                        return await __method(*args, **kwargs)
                    finally:
                        spent[__name] += time.perf_counter() - t0
                        calls[__name] += 1

                setattr(queries, name, timed)
        counters = self.stores.database.engine.counters
        try:
            await self.companion.drain()
            spent.clear(), calls.clear()
            before = dataclasses.replace(counters)
            for _ in range(turns):
                await self.turn()
            await self.companion.drain()
            done = dataclasses.replace(counters)
        finally:
            for queries, name in patched:
                delattr(queries, name)
        return {
            "store_calls_per_turn": {
                name: {"calls": round(calls[name] / turns, 2), "ms": ms(spent[name] / turns)}
                for name in sorted(spent, key=spent.get, reverse=True)
            },
            **per_turn(before, done, turns),
        }

    async def aclose(self) -> None:
        await self.companion.drain()
        await self.stores.database.aclose()


def per_turn(before: Counters, after: Counters, turns: int) -> dict[str, float]:
    """The engine's counters (adapters/storage/engine.py) over `turns` turns, per turn: trips to SQLite's
    threads, statements, commits and the fsynced ones among them."""
    return {
        name: round((getattr(after, name) - getattr(before, name)) / turns, 2)
        for name in ("trips", "statements", "commits", "fsynced_commits")
    }


async def telegram_turns(path: Path, turns: int, *, url: str | None = None) -> dict[str, float]:
    """A Telegram-shaped turn: the core's entry, the outbox and a fake sender (the answer handed over,
    sent and marked), shipped settings but the burst window (off, or each turn waits 1.5 s). The
    update ledger is not in it: the intake writes it off the turns (at most every 0.5 s). `url`: on
    that PostgreSQL database instead of the SQLite file `path` (its key folder beside `path`)."""
    async with open_stores(path, url=url, key_dir=path.parent / f"{path.stem}-keys") as stores:
        outbox = Outbox(stores.outbox, SystemClock(), pacing=None)
        config = CompanionConfig(allowed_accounts=frozenset({"telegram:7"}))
        companion = build_companion(stores, ZeroLatencyProvider(), config, outbox=outbox)
        await companion.start()
        entry = core_entry(companion)
        companion.parts.handoff.attach(FakeChatSender("telegram"))

        async def turn(n: int) -> None:
            await entry.receive(InboundMessage("telegram", "7", "7", f"hello {n}", is_direct=True, message_id=str(n)))
            await outbox.settle(10.0)  # sent and marked

        for n in range(5):  # warm: the account, the conversation, the caches
            await turn(n)
        await companion.drain()
        before = dataclasses.replace(stores.database.engine.counters)
        for n in range(5, 5 + turns):
            await turn(n)
        after = dataclasses.replace(stores.database.engine.counters)
        await companion.drain()
    return per_turn(before, after, turns)


async def _telegram_turns_on_postgres(path: Path, turns: int) -> dict:
    """`telegram_turns` on a durable scratch PostgreSQL (bench/_postgres.py), or why it did not start."""
    with durable_cluster() as cluster:
        if isinstance(cluster, str):
            return {"skipped": cluster}
        return await telegram_turns(path, turns, url=cluster.url(cluster.create_database(name="bench_turn")))


class _BareTurns:
    """The baseline: insert the user message, read the window, insert the reply; each write its
    own BEGIN IMMEDIATE transaction, on the same schema with the same PRAGMAs."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.db: aiosqlite.Connection | None = None

    async def start(self) -> None:
        async with open_stores(self.path):  # the schema, from the same migrations
            pass
        db = self.db = await aiosqlite.connect(self.path, isolation_level=None)
        for pragma in STORE_PRAGMAS:
            await db.execute(pragma)
        await db.execute("INSERT INTO people (id, display_name, created_at) VALUES (1, 'owner', 0)")
        await db.execute(
            "INSERT INTO accounts (id, person_id, platform, platform_user_id, created_at)"
            " VALUES (1, 1, 'terminal', 'owner', 0)"
        )
        await db.execute(
            "INSERT INTO conversations (id, platform, chat_id, kind, person_id, created_at)"
            " VALUES (1, 'terminal', 'terminal', 'direct', 1, 0)"
        )

    async def _insert(self, role: str, text: str) -> None:
        assert self.db is not None
        await self.db.execute("BEGIN IMMEDIATE")
        await self.db.execute(
            INSERT_MESSAGE_SQL, (1, 1 if role == "user" else None, role, text, "pending", time.time())
        )
        await self.db.execute("COMMIT")

    async def turn(self) -> None:
        assert self.db is not None
        await self._insert("user", "hello")
        async with self.db.execute(WINDOW_SQL, (1, 0, WINDOW_LIMIT)) as cur:
            await cur.fetchall()
        await self._insert("assistant", "ok")

    async def aclose(self) -> None:
        db, self.db = self.db, None
        if db is not None:
            await db.close()


async def _measure(turns: int, warmup: int, block: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-turn-") as tmp:
        core = _CoreTurns(Path(tmp) / "core.db")
        bare = _BareTurns(Path(tmp) / "bare.db")
        await core.start()
        await bare.start()
        try:
            for _ in range(warmup):
                await core.turn()
                await bare.turn()
            samples: dict[str, list[float]] = {"core": [], "bare": []}
            # Alternate blocks so drift (page cache, CPU frequency, neighbours) hits both sides alike.
            done = 0
            started = time.perf_counter()
            while done < turns:
                n = min(block, turns - done)
                for name, side in (("core", core), ("bare", bare)):
                    for _ in range(n):
                        t0 = time.perf_counter()
                        await side.turn()
                        samples[name].append(time.perf_counter() - t0)
                done += n
            await core.companion.drain()  # wait for background folds before the totals
            elapsed = time.perf_counter() - started
            profile = await core.profile(50)
            telegram = await telegram_turns(Path(tmp) / "telegram.db", 50)
            telegram_postgres = await _telegram_turns_on_postgres(Path(tmp) / "telegram-pg.db", 50)
        finally:
            await core.aclose()
            await bare.aclose()
    core_med, bare_med = median(samples["core"]), median(samples["bare"])
    core_p95, bare_p95 = percentile(samples["core"], 95), percentile(samples["bare"], 95)
    result = {
        "turns": turns,
        "warmup": warmup,
        "core_median_ms": ms(core_med),
        "core_p95_ms": ms(core_p95),
        "core_mean_ms": ms(sum(samples["core"]) / len(samples["core"])),
        "baseline_median_ms": ms(bare_med),
        "baseline_p95_ms": ms(bare_p95),
        "baseline_mean_ms": ms(sum(samples["bare"]) / len(samples["bare"])),
        "ratio_median": round(ratio(core_med, bare_med), 3),
        "ratio_p95": round(ratio(core_p95, bare_p95), 3),
        "target_ratio": TARGET_RATIO,
        "provider_calls": dict(core.provider.calls),  # 'summary' calls are the background folds
        "wall_s": round(elapsed, 3),
        # The baseline's statements per turn: BEGIN, INSERT, COMMIT, SELECT, BEGIN, INSERT, COMMIT.
        "baseline_statements_per_turn": 7,
        "profile": profile,
        "telegram_turn": telegram,
        "telegram_turn_postgres": telegram_postgres,
    }
    result["ok"] = result["ratio_median"] < TARGET_RATIO
    return result


def run(quick: bool = False) -> dict:
    if quick:
        return asyncio.run(_measure(turns=60, warmup=10, block=20))
    return asyncio.run(_measure(turns=300, warmup=30, block=50))
