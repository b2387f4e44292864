"""Shared pieces of the benchmarks: statistics, the zero-latency provider, SQL of the baselines, environment."""

from __future__ import annotations

import math
import os
import platform
import sqlite3
import sys
import time
from pathlib import Path

from core.ports.model import PartialSink
from core.values.model import Completion, CompletionRequest

ROOT = Path(__file__).resolve().parent.parent

# The bare reads and writes of one turn, as the store issues them (same index, same predicates).
# Baselines use these directly; the measured side always goes through the real store.
INSERT_MESSAGE_SQL = (
    "INSERT INTO messages (conversation_id, segment_id, account_id, mode, role, kind, text, capture, created_at)"
    " VALUES (?, NULL, ?, 'normal', ?, 'chat', ?, ?, ?)"
)
WINDOW_SQL = (
    "SELECT id, role, text FROM messages"
    " WHERE conversation_id = ? AND segment_id IS NULL AND kind = 'chat' AND mode <> 'private'"
    " AND id > ? ORDER BY id DESC LIMIT ?"
)
WINDOW_LIMIT = 80

# The store's PRAGMAs (adapters/storage/database.py), repeated for the bare baseline connections.
STORE_PRAGMAS = (
    "PRAGMA foreign_keys = ON",
    "PRAGMA journal_mode = WAL",
    "PRAGMA synchronous = FULL",
    "PRAGMA secure_delete = ON",
    "PRAGMA busy_timeout = 5000",
)


class ZeroLatencyProvider:
    """A provider that answers at once, so a turn measures the core and the store only."""

    name = "zero-latency"

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    async def complete(self, request: CompletionRequest, *, partial: PartialSink | None = None) -> Completion:
        # A streamed turn (the web chat's, with streaming on as shipped) hands a sink: "ok" is whole
        # at once, shorter than anything worth showing, so the sink is never called.
        self.calls[request.purpose] = self.calls.get(request.purpose, 0) + 1
        return Completion("ok")

    async def aclose(self) -> None:
        return None


def median(samples: list[float]) -> float:
    ordered = sorted(samples)
    n = len(ordered)
    if n == 0:
        return math.nan
    mid = n // 2
    return ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def percentile(samples: list[float], q: float) -> float:
    """Nearest-rank percentile, q in (0, 100]."""
    ordered = sorted(samples)
    if not ordered:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def ratio(value: float, baseline: float) -> float:
    return value / baseline if baseline > 0 else math.inf


def ms(seconds: float) -> float:
    return round(seconds * 1e3, 4)


class Stopwatch:
    def __enter__(self) -> Stopwatch:
        self.started = time.perf_counter()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.seconds = time.perf_counter() - self.started


def child_env(**extra: str) -> dict[str, str]:
    """The current environment without any COMPANION_* setting, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPANION_")}
    env.update(extra)
    return env


def environment() -> dict[str, object]:
    import aiosqlite

    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        usable = os.cpu_count()
    return {
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "sqlite": sqlite3.sqlite_version,
        "aiosqlite": getattr(aiosqlite, "__version__", "?"),
        "cpu_count": os.cpu_count(),
        "usable_cpus": usable,
        "platform": platform.platform(),
        "machine": platform.machine(),
    }
