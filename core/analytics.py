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
    def __init__(self, store, clock: Clock, run_id: int) -> None:
        self._store = store
        self._clock = clock
        self.run_id = run_id

    @classmethod
    async def start(cls, store, clock: Clock, conversation_id: int) -> RunRecorder | None:
        try:
            return cls(store, clock, await store.start_run(conversation_id, clock.now()))
        except Exception as exc:  # noqa: BLE001 - analytics never breaks a turn
            log.warning("analytics run could not start (%s)", type(exc).__name__)
            return None

    async def event(self, kind: str, name: str, status: str, *, duration_ms: float | None = None,
                    size_in: int | None = None, size_out: int | None = None) -> None:
        try:
            await self._store.add_event(self.run_id, kind, name, status, self._clock.now(),
                                        duration_ms=duration_ms, size_in=size_in, size_out=size_out)
        except Exception as exc:  # noqa: BLE001
            log.warning("analytics event could not be written (%s)", type(exc).__name__)

    async def finish(self, status: str) -> None:
        await self.event("terminal", "turn", status)
        try:
            await self._store.end_run(self.run_id, status, self._clock.now())
        except Exception as exc:  # noqa: BLE001
            log.warning("analytics run could not end (%s)", type(exc).__name__)


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
