"""9. Proactive triage: the cost of one tick with 1,000 people (10,000 follow-ups) against 10,000
people (100,000 follow-ups), the same handful due in both, and EXPLAIN QUERY PLAN of every
candidate statement (each must start from its due index: no full scan of people or follow-ups).

python -m bench.triage [--quick]
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as `python bench/triage.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from adapters.storage.proactive import candidate_statements
from adapters.storage.stores import sqlite_stores
from bench._common import ZeroLatencyProvider, median, ms, ratio
from core.delivery.outbox import Outbox
from core.memory.context import ContextAssembler, ContextBudget, Persona
from core.proactive.manners import Manners
from core.proactive.service import ProactiveConfig, ProactiveService
from core.values.model import OutboundDelivery

TARGET_RATIO = 1.5
FOLLOWUPS_PER_PERSON = 10
DUE_PEOPLE = 20  # people with a watch due, held by quiet hours: evaluated on every tick
NOW = 1_800_000_000.0  # 2027-01-15 08:00 UTC
DAY = 86400.0


class _FixedClock:
    def now(self) -> float:
        return NOW


class _NullSender:
    name = "telegram"

    async def send_delivery(self, delivery: OutboundDelivery) -> int:
        return 1

    async def send_text(self, chat_id: str, text: str) -> str:
        return "1"


def _populate(path: Path, people: int) -> None:
    """People who each wrote an hour ago in their Telegram DM, with ten follow-ups due in the
    coming weeks and a fresh goal: nobody is due, except DUE_PEOPLE with a watch that is due."""
    db = sqlite3.connect(path)
    db.execute("PRAGMA foreign_keys = ON")
    with db:
        db.executemany("INSERT INTO people (id, created_at) VALUES (?, ?)", ((p, NOW) for p in range(1, people + 1)))
        db.executemany(
            "INSERT INTO conversations (id, platform, chat_id, kind, person_id, created_at)"
            " VALUES (?, 'telegram', ?, 'direct', ?, ?)",
            ((p, str(p), p, NOW) for p in range(1, people + 1)),
        )
        db.executemany(
            "INSERT INTO proactive_people (person_id, conversation_id, last_wrote_at, checkin_open, quiet)"
            " VALUES (?, ?, ?, 1, ?)",
            ((p, p, NOW - 3600, "07:00-09:00" if p <= DUE_PEOPLE else None) for p in range(1, people + 1)),
        )
        db.executemany(
            "INSERT INTO followups (person_id, conversation_id, kind, text, due_at, created_at, updated_at)"
            " VALUES (?, ?, ?, 'something to bring up', ?, ?, ?)",
            (
                (p, p, "reminder" if n % 2 else "watch", NOW + (n + 1) * DAY + p, NOW, NOW)
                for p in range(1, people + 1)
                for n in range(FOLLOWUPS_PER_PERSON)
            ),
        )
        db.executemany(
            "INSERT INTO followups (person_id, conversation_id, kind, text, due_at, created_at, updated_at)"
            " VALUES (?, ?, 'watch', 'the interview', ?, ?, ?)",
            ((p, p, NOW - 2 * 3600, NOW, NOW) for p in range(1, DUE_PEOPLE + 1)),
        )
        db.executemany(
            "INSERT INTO goals (person_id, conversation_id, title, created_at, updated_at) VALUES (?, ?, 'a goal', ?, ?)",
            ((p, p, NOW - DAY, NOW) for p in range(1, people + 1)),
        )
    db.close()  # no ANALYZE: the store never runs it, so the plans are those of a live database


def _plans(path: Path) -> dict[str, list[str]]:
    db = sqlite3.connect(path)
    plans = {}
    for kind, sql, params in candidate_statements(
        NOW, frozenset({"telegram"}), watch_after=3600.0, goal_every=3 * DAY, checkin_after=3 * DAY, limit=500
    ):
        plans[kind] = [row[3] for row in db.execute("EXPLAIN QUERY PLAN " + sql, params)]
    db.close()
    return plans


# The index each candidate statement's outer loop must search: what is due, and nothing else.
DUE_INDEX = {
    "reminder": "followups_due",
    "watch": "followups_due",
    "goal": "goals_checkin_due",
    "checkin": "proactive_people_checkin",
}


def _indexed(kind: str, plan: list[str]) -> bool:
    """The outer loop searches the statement's due index; nothing is scanned whole."""
    return (
        bool(plan)
        and plan[0].startswith("SEARCH")
        and f"USING INDEX {DUE_INDEX[kind]} " in plan[0]
        and not any(line.startswith("SCAN") for line in plan)
    )


async def _ticks(path: Path, repeats: int) -> tuple[list[float], int]:
    stores = sqlite_stores(path)
    await stores.database.start()
    try:
        outbox = Outbox(stores.outbox, _FixedClock())
        outbox.register(_NullSender())
        service = ProactiveService(
            stores.proactive,
            ZeroLatencyProvider(),
            _FixedClock(),
            outbox,
            ContextAssembler(stores.timeline, Persona(), ContextBudget(), _FixedClock()),
            ProactiveConfig(Manners(quiet_hours=None)),
        )
        await service.tick()  # the first tick records the quiet-hours decisions; later ones find them
        samples = []
        candidates = 0
        for _ in range(repeats):
            started = time.perf_counter()
            result = await service.tick()
            samples.append(time.perf_counter() - started)
            candidates = result.candidates
        return samples, candidates
    finally:
        await stores.database.aclose()


def run(quick: bool = False) -> dict:
    sizes = (1_000, 10_000)
    repeats = 10 if quick else 40
    by_size: dict[int, dict] = {}
    plans: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory() as folder:
        for people in sizes:
            path = Path(folder) / f"triage-{people}.db"
            asyncio.run(_start_only(path))  # the migrations
            _populate(path, people)
            samples, candidates = asyncio.run(_ticks(path, repeats))
            by_size[people] = {
                "people": people,
                "followups": people * FOLLOWUPS_PER_PERSON + DUE_PEOPLE,
                "due_candidates": candidates,
                "median_ms": ms(median(samples)),
            }
            plans = _plans(path)
    small, large = by_size[sizes[0]], by_size[sizes[1]]
    tick_ratio = ratio(large["median_ms"], small["median_ms"])
    indexed = {kind: _indexed(kind, plan) for kind, plan in plans.items()}
    return {
        "sizes": by_size,
        "ratio": round(tick_ratio, 3),
        "target_ratio": TARGET_RATIO,
        "plans": plans,
        "indexed": indexed,
        "repeats": repeats,
        "ok": tick_ratio <= TARGET_RATIO and all(indexed.values()),
    }


async def _start_only(path: Path) -> None:
    stores = sqlite_stores(path)
    await stores.database.start()
    await stores.database.aclose()


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
