"""Structural analytics of normal turns: runs and events with ids, kinds, timings, sizes; never text.

A private turn gets no RunRecorder at all: there is no analytics context for it, so
no code path can write an event row for it.
"""

from __future__ import annotations

import logging
import statistics

from core.ports import Clock

log = logging.getLogger(__name__)


class RunRecorder:
    """Collects a normal turn's events in memory and writes them with the run in one
    transaction when the turn ends (one commit, not one per event)."""

    def __init__(self, store, clock: Clock, conversation_id: int) -> None:
        self._store = store
        self._clock = clock
        self._conversation_id = conversation_id
        self._started_at = clock.now()
        self._events: list[tuple] = []

    @classmethod
    def start(cls, store, clock: Clock, conversation_id: int) -> RunRecorder:
        return cls(store, clock, conversation_id)

    def event(self, kind: str, name: str, status: str, *, duration_ms: float | None = None,
              size_in: int | None = None, size_out: int | None = None) -> None:
        self._events.append((kind, name, status, duration_ms, size_in, size_out, self._clock.now()))

    async def finish(self, status: str) -> None:
        self.event("terminal", "turn", status)
        try:
            await self._store.save_run(self._conversation_id, self._started_at, self._clock.now(), status,
                                       self._events)
        except Exception as exc:  # noqa: BLE001 - analytics never breaks a turn
            log.warning("analytics run could not be written (%s)", type(exc).__name__)


def render_report(rows: dict) -> str:
    """The structural report `companion report` prints."""
    lines = [f"turns: {rows['turns']} ({rows['ok']} answered, {rows['failed']} failed)"]
    lines.append("tool calls:" if rows["tools"] else "tool calls: none")
    lines += [f"  {name}: {count} ({failed} failed)" for name, count, failed in rows["tools"]]
    lines.append("errors by kind:" if rows["errors"] else "errors: none")
    lines += [f"  {name}: {count}" for name, count in rows["errors"]]
    latencies = rows["latencies"]
    if latencies:
        def pct(p: float) -> float:
            if len(latencies) == 1:
                return latencies[0]
            return statistics.quantiles(latencies, n=100, method="inclusive")[int(p) - 1]

        lines.append(f"provider latency ms: p50 {pct(50):.0f}, p90 {pct(90):.0f}, p99 {pct(99):.0f} "
                     f"(n={len(latencies)})")
    else:
        lines.append("provider latency: no calls yet")
    return "\n".join(lines)
