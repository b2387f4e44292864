"""2. Context assembly against history length: 1e3, 1e5 and 1e6 stored messages in one conversation,
with private segments (masking) and with and without a normal summary; baseline: the bare window
query at the smallest size, in the same run. Every SQL statement an assembly issues is captured and
explained (EXPLAIN QUERY PLAN and SQLite VM steps per size), so a query that grows is named exactly."""

from __future__ import annotations

import asyncio
import sqlite3
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from adapters.storage.stores import open_stores, sqlite_stores
from bench._common import WINDOW_LIMIT, WINDOW_SQL, ZeroLatencyProvider, median, ms, ratio
from bench.turn import HELLO
from bot.bootstrap import build_companion
from core.memory.context import ContextAssembler, ContextBudget, Persona
from core.ports.clock import SystemClock
from core.values.model import ConversationKey
from core.values.modes import NORMAL, ModeState, PrivateState
from tests.helpers import engines
from tests.helpers.chat import segments_of

TARGET_FLAT = 1.5  # median at the largest size / median at the smallest
SEGMENT_MESSAGES = 10
SUMMARY_LAG = 200  # the normal summary's watermark lies this many ids before the newest message
CASES = (
    "normal, summary near the end",
    "normal, no summary",
    "private view, no summary",
    "whole turn (`handle()`), summary near the end",
)
TURN_CASE = CASES[3]
WITH_SUMMARY = (CASES[0], TURN_CASE)


@dataclass(frozen=True, slots=True)
class _Fill:
    messages: int
    segments: int
    seconds: float


def _fill(path: Path, n: int) -> _Fill:
    """Schema from the store's migrations, then `n` messages in one transaction with plain sqlite3."""

    async def schema() -> None:
        async with open_stores(path):
            pass

    asyncio.run(schema())
    started = time.perf_counter()
    con = sqlite3.connect(path, isolation_level=None)
    # A bulk load only: the store sets its own PRAGMAs (WAL, FULL, ...) when it reopens the file.
    con.execute("PRAGMA journal_mode = DELETE")
    con.execute("PRAGMA synchronous = OFF")
    base = time.time() - n - 3600
    # Four segments spread through the history and one inside the newest window.
    starts = [int(n * f) for f in (0.2, 0.4, 0.6, 0.8)] + [n - 40]
    segment_of: dict[int, int] = {}
    con.execute("BEGIN")
    con.execute("INSERT INTO people (id, display_name, created_at) VALUES (1, 'owner', ?)", (base,))
    con.execute(
        "INSERT INTO accounts (id, person_id, platform, platform_user_id, created_at)"
        " VALUES (1, 1, 'terminal', 'owner', ?)",
        (base,),
    )
    con.execute(
        "INSERT INTO conversations (id, platform, chat_id, kind, person_id, created_at)"
        " VALUES (1, 'terminal', 'terminal', 'direct', 1, ?)",
        (base,),
    )
    for sid, start in enumerate(starts, 1):
        con.execute(
            "INSERT INTO segments (id, conversation_id, anchor_message_id, started_at, last_activity_at,"
            " ended_at, end_reason, expires_at) VALUES (?, 1, ?, ?, ?, ?, 'normal', NULL)",
            (sid, start - 1, base + start, base + start + SEGMENT_MESSAGES, base + start + SEGMENT_MESSAGES + 1),
        )
        for i in range(start, start + SEGMENT_MESSAGES):
            segment_of[i] = sid
    filler = "lorem ipsum dolor sit amet, consectetur adipiscing elit"

    def rows():
        for i in range(1, n + 1):
            role = "user" if i % 2 else "assistant"
            sid = segment_of.get(i)
            if sid is not None:
                yield (
                    i,
                    1,
                    sid,
                    1 if role == "user" else None,
                    "private",
                    role,
                    "chat",
                    f"private s{sid} {i}: {filler}",
                    "skipped",
                    base + i,
                )
            elif i % 97 == 0:
                yield (i, 1, None, 1, "normal", "user", "command", "/mode", "skipped", base + i)
            else:
                yield (
                    i,
                    1,
                    None,
                    1 if role == "user" else None,
                    "normal",
                    role,
                    "chat",
                    f"message {i}: {filler}",
                    "done",
                    base + i,
                )

    con.executemany(
        "INSERT INTO messages (id, conversation_id, segment_id, account_id, mode, role, kind, text, capture,"
        " created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        rows(),
    )
    con.executemany(
        "INSERT INTO pad_entries (person_id, segment_id, mode, text, created_at) VALUES (1, NULL, 'normal', ?, ?)",
        [("Likes long walks", base), ("Lives in Lisbon", base), ("Has a cat called Miso", base)],
    )
    con.execute("COMMIT")
    con.close()
    return _Fill(n, len(starts), time.perf_counter() - started)


class _Capture:
    """Records every statement the store's connection executes while on."""

    def __init__(self, db) -> None:
        self.on = False
        self.statements: list[tuple[str, object]] = []
        original = db.execute

        def execute(sql, parameters=None):
            if self.on:
                self.statements.append((sql, parameters))
            return original(sql, parameters)

        db.execute = execute  # instance attribute: the bench observes, the store is unchanged


def _explain(con: sqlite3.Connection, sql: str, params) -> list[str]:
    return [row[3] for row in con.execute("EXPLAIN QUERY PLAN " + sql, params or ())]


def _vm_steps(con: sqlite3.Connection, sql: str, params) -> int:
    steps = 0

    def tick() -> int:
        nonlocal steps
        steps += 1
        return 0

    con.set_progress_handler(tick, 1)
    try:
        con.execute(sql, params or ()).fetchall()
    finally:
        con.set_progress_handler(None, 1)
    return steps


def _time_statement(con: sqlite3.Connection, sql: str, params, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        con.execute(sql, params or ()).fetchall()
        samples.append(time.perf_counter() - t0)
    return median(samples)


class _Subject:
    """One database size, open through the real store, with its assembler and a companion."""

    def __init__(self, path: Path, n: int) -> None:
        self.path, self.n = path, n
        self.stores = sqlite_stores(path)

    async def start(self) -> None:
        await self.stores.database.start()
        self.capture = _Capture(self.stores.database.connection)
        self.conversation = await self.stores.timeline.ensure_conversation(
            ConversationKey("terminal", "terminal"), "direct", 1, time.time()
        )
        self.segments = await segments_of(self.stores, self.conversation.id)
        (self.newest,) = await engines.first(
            self.stores, "SELECT coalesce(max(id), 0) FROM messages WHERE conversation_id = ?", (self.conversation.id,)
        )
        self.assembler = ContextAssembler(self.stores.timeline, Persona(), ContextBudget(), SystemClock())
        self.companion = build_companion(self.stores, ZeroLatencyProvider())
        await self.companion.start()
        self.out: dict = {"messages": self.n, "newest_id": self.newest, "cases": {}}

    def state(self, case: str) -> ModeState:
        return PrivateState(self.segments[-1]) if case == CASES[2] else NORMAL

    async def prepare(self, case: str) -> None:
        await self.stores.database.connection.execute("DELETE FROM summaries")
        if case in WITH_SUMMARY:
            await self.stores.database.connection.execute(
                "INSERT INTO summaries (conversation_id, segment_id, mode, text, watermark, updated_at)"
                " VALUES (?, NULL, 'normal', ?, ?, ?)",
                (
                    self.conversation.id,
                    "The person talked about walks, Lisbon and a cat. " * 6,
                    self.newest - SUMMARY_LAG,
                    time.time(),
                ),
            )

    async def assemble(self, case: str):
        if case == TURN_CASE:
            return await self.companion.handle(HELLO)
        return await self.assembler.assemble(self.conversation, self.state(case))

    async def record(self, case: str, samples: list[float]) -> None:
        await self.companion.drain()  # background folds finish first: they are not this turn's statements
        self.capture.statements.clear()
        self.capture.on = True
        context = await self.assemble(case)
        self.capture.on = False
        await self.companion.drain()
        if case == TURN_CASE:
            self.out["cases"][case] = {
                "median_ms": ms(median(samples)),
                "samples": len(samples),
                "statements": list(self.capture.statements),
            }
            return
        self.out["cases"][case] = {
            "median_ms": ms(median(samples)),
            "samples": len(samples),
            "watermark": context.summary.watermark,
            "window_items": len(context.window),
            "placeholders": sum(1 for item in context.window if item.is_placeholder),
            "needs_fold": context.needs_fold,
            # Sanity, not a timing: a window must never hold text of a segment it does not live in.
            "foreign_private_items": _foreign_private(context.window, self.state(case)),
            "statements": list(self.capture.statements),
        }

    async def aclose(self) -> None:
        await self.companion.drain()
        await self.stores.database.aclose()

    async def window_sql(self) -> None:
        async with self.stores.database.connection.execute(WINDOW_SQL, (self.conversation.id, 0, WINDOW_LIMIT)) as cur:
            await cur.fetchall()


def _foreign_private(window, state: ModeState) -> int:
    own = f"private s{state.segment.id} " if state.is_private else None
    return sum(
        1
        for item in window
        if item.text and item.text.startswith("private s") and not (own and item.text.startswith(own))
    )


async def _measure(subjects: list[_Subject], repeat: int, warmup: int, block: int, case_budget_s: float) -> None:
    """All sizes open at once; timing rounds rotate over the sizes in small blocks, so load from
    elsewhere on the machine falls on every size alike and the ratio between sizes stays
    meaningful. A case stops at `repeat` samples per size, or after `case_budget_s` once every
    size has at least a few blocks (a query that grows makes the largest size slow)."""
    for subject in subjects:
        await subject.start()
    try:
        smallest = subjects[0]
        window = []
        for i in range(warmup + repeat):
            t0 = time.perf_counter()
            await smallest.window_sql()
            if i >= warmup:
                window.append(time.perf_counter() - t0)
        smallest.out["baseline_window_sql_ms"] = ms(median(window))
        for case in CASES:
            for subject in subjects:
                await subject.prepare(case)
                for _ in range(warmup):
                    await subject.assemble(case)
            samples: dict[int, list[float]] = {s.n: [] for s in subjects}
            started = time.perf_counter()
            round_ = 0
            while min(len(v) for v in samples.values()) < repeat:
                if time.perf_counter() - started > case_budget_s and round_ >= 4:
                    break
                shift = round_ % len(subjects)
                for subject in subjects[shift:] + subjects[:shift]:
                    for _ in range(block):
                        t0 = time.perf_counter()
                        await subject.assemble(case)
                        samples[subject.n].append(time.perf_counter() - t0)
                round_ += 1
            for subject in subjects:
                await subject.record(case, samples[subject.n])
    finally:
        for subject in subjects:
            await subject.aclose()


def _explain_statements(subject: _Subject) -> None:
    """Each query (SELECT) statement, on a plain read-only connection: plan, VM steps and time.
    Keyed by its text and occurrence, so the same statement is compared across sizes."""
    con = sqlite3.connect(f"file:{subject.path}?mode=ro", uri=True)
    try:
        for case in subject.out["cases"].values():
            details: dict[str, dict] = {}
            seen: dict[str, int] = {}
            for sql, params in case.pop("statements"):
                text = " ".join(sql.split())
                if text.split(None, 1)[0].upper() not in ("SELECT", "WITH"):
                    continue
                seen[text] = seen.get(text, 0) + 1
                details[f"{seen[text]}|{text}"] = {
                    "sql": text,
                    "params": params if isinstance(params, dict) else list(params or ()),
                    "plan": _explain(con, sql, params),
                    "vm_steps": _vm_steps(con, sql, params),
                    "median_ms": ms(_time_statement(con, sql, params, 30)),
                }
            case["statements"] = details
    finally:
        con.close()


def _suspect_plan(plan: list[str]) -> bool:
    return any(line.startswith("SCAN") or "TEMP B-TREE" in line for line in plan)


def _analyse(sizes: list[dict]) -> dict:
    smallest, largest = sizes[0], sizes[-1]
    baseline = smallest["baseline_window_sql_ms"]
    cases = {}
    for case in CASES:
        small, large = smallest["cases"][case], largest["cases"][case]
        growth = ratio(large["median_ms"], small["median_ms"])
        statements = []
        for index, (key, last) in enumerate(large["statements"].items()):
            first = small["statements"].get(key)
            if first is None:
                continue
            steps_ratio = ratio(last["vm_steps"], first["vm_steps"])
            grows = steps_ratio > TARGET_FLAT and last["vm_steps"] - first["vm_steps"] > 500
            by_size = [z["cases"][case]["statements"].get(key) for z in sizes]
            statements.append(
                {
                    "index": index,
                    "sql": last["sql"],
                    "vm_steps_by_size": {
                        str(z["messages"]): s["vm_steps"] for z, s in zip(sizes, by_size, strict=False) if s
                    },
                    "median_ms_by_size": {
                        str(z["messages"]): s["median_ms"] for z, s in zip(sizes, by_size, strict=False) if s
                    },
                    "plan": last["plan"],
                    "grows_with_history": grows,
                    "suspect_plan": _suspect_plan(last["plan"]),
                }
            )
        cases[case] = {
            "median_ms_by_size": {str(z["messages"]): z["cases"][case]["median_ms"] for z in sizes},
            "ratio_largest_smallest": round(growth, 3),
            "ratio_smallest_to_baseline": round(ratio(small["median_ms"], baseline), 3),
            "flat": growth <= TARGET_FLAT and not any(s["grows_with_history"] for s in statements),
            "statements_growing": [s for s in statements if s["grows_with_history"]],
            "statements": statements,
        }
    return cases


def run(quick: bool = False) -> dict:
    sizes = [1_000, 10_000] if quick else [1_000, 100_000, 1_000_000]
    repeat, warmup, block, case_budget_s = (60, 5, 5, 1.5) if quick else (200, 10, 5, 8.0)
    fills = []
    with tempfile.TemporaryDirectory(prefix="bench-assembly-") as tmp:
        subjects = []
        for n in sizes:
            path = Path(tmp) / f"history-{n}.db"
            fill = _fill(path, n)
            fills.append(
                {
                    "messages": n,
                    "fill_s": round(fill.seconds, 2),
                    "segments": fill.segments,
                    "db_mib": round(path.stat().st_size / 2**20, 1),
                }
            )
            subjects.append(_Subject(path, n))
        asyncio.run(_measure(subjects, repeat, warmup, block, case_budget_s))
        for subject in subjects:
            _explain_statements(subject)
    measured = [s.out for s in subjects]
    cases = _analyse(measured)
    return {
        "sizes": sizes,
        "repeat": repeat,
        "fills": fills,
        "baseline_window_sql_ms": measured[0]["baseline_window_sql_ms"],
        "target_ratio": TARGET_FLAT,
        "cases": cases,
        "per_size": [
            {k: v for k, v in m.items() if k != "cases"}
            | {"cases": {c: {k: v for k, v in d.items() if k != "statements"} for c, d in m["cases"].items()}}
            for m in measured
        ],
        "foreign_private_items": sum(d.get("foreign_private_items", 0) for m in measured for d in m["cases"].values()),
        "ok": all(c["flat"] for c in cases.values()),
    }
