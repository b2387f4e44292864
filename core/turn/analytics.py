"""Structural analytics of normal turns: runs and events with ids, kinds, timings, sizes; never text.

A private turn gets no RunRecorder at all: there is no analytics context for it, so
no code path can write an event row for it, nor count it in the operator's metrics
(the recorder is the only way a turn reaches `Metrics`).
"""

from __future__ import annotations

from typing import Any

from core.ports.clock import Clock
from core.ports.metrics import NO_METRICS, Metrics
from core.values.model import Event, RunRecord


class RunRecorder:
    """Collects a normal turn's events in memory; the store writes them with the run in the
    same transaction as the turn's reply (one commit, not one per event). What the operator's
    metrics count of a turn (its outcome, its model requests and their tokens, its reply's write)
    goes through here too."""

    def __init__(self, clock: Clock, conversation_id: int, metrics: Metrics = NO_METRICS) -> None:
        self._clock = clock
        self._conversation_id = conversation_id
        self._started_at = clock.now()
        self._events: list[Event] = []
        self.metrics = metrics

    def event(
        self,
        kind: str,
        name: str,
        status: str,
        *,
        duration_ms: float | None = None,
        size_in: int | None = None,
        size_out: int | None = None,
        server: str | None = None,
    ) -> None:
        """`server`: a served tool's server (its call is reported by server, tool, duration and outcome)."""
        self._events.append((kind, name, status, duration_ms, size_in, size_out, self._clock.now(), server))

    def model_request(
        self,
        name: str,
        status: str,
        seconds: float,
        *,
        size_in: int | None = None,
        size_out: int | None = None,
        prompt_tokens: int | None = None,
        completion_tokens: int | None = None,
    ) -> None:
        """One model request of the turn: an event, and the metrics' latency and tokens."""
        self.event("provider_call", name, status, duration_ms=seconds * 1e3, size_in=size_in, size_out=size_out)
        self.metrics.model_request(status, seconds, prompt_tokens, completion_tokens)

    def finish(self, status: str) -> RunRecord:
        self.event("terminal", "turn", status)
        self.metrics.turn_finished(status)
        return RunRecord(self._conversation_id, self._started_at, self._clock.now(), status, tuple(self._events))


def render_report(rows: dict[str, Any]) -> str:
    """The structural report `companion report` prints."""
    lines = [f"turns: {rows['turns']} ({rows['ok']} answered, {rows['failed']} failed)"]
    lines.append("tool calls:" if rows["tools"] else "tool calls: none")
    lines += [f"  {name}: {count} ({failed} failed)" for name, count, failed in rows["tools"]]
    lines += _served_lines(rows.get("served", []))
    lines.append(f"replies cut off at max_tokens: {rows['cut_off']}")
    lines.append("errors by kind:" if rows["errors"] else "errors: none")
    lines += [f"  {name}: {count}" for name, count in rows["errors"]]
    latencies: list[float] = rows["latencies"]
    if latencies:
        import statistics  # here: only a report needs it, not an idle gateway

        def pct(p: float) -> float:
            if len(latencies) == 1:
                return latencies[0]
            return statistics.quantiles(latencies, n=100, method="inclusive")[int(p) - 1]

        lines.append(
            f"provider latency ms: p50 {pct(50):.0f}, p90 {pct(90):.0f}, p99 {pct(99):.0f} (n={len(latencies)})"
        )
    else:
        lines.append("provider latency: no calls yet")
    if "deliveries" in rows:
        lines += _outbox_lines(rows)
    if "decisions" in rows:
        lines.append("proactive decisions (kind outcome reason):" if rows["decisions"] else "proactive decisions: none")
        lines += [f"  {kind} {outcome} {reason}: {count}" for kind, outcome, reason, count in rows["decisions"]]
    return "\n".join(lines)


def _served_lines(served: list[tuple[str, str, str, int, float | None, float | None]]) -> list[str]:
    """Served tools' calls (normal turns only): by server and tool, each outcome with its count and the
    server's mean and longest time."""
    if not served:
        return []
    lines = ["served tool calls (server tool: outcome count, mean and longest ms):"]
    by_tool: dict[tuple[str, str], list[str]] = {}
    for server, name, status, count, mean_ms, max_ms in served:
        by_tool.setdefault((server, name), []).append(f"{status} {count}, {mean_ms or 0:.0f}/{max_ms or 0:.0f} ms")
    lines += [f"  {server} {name}: {'; '.join(outcomes)}" for (server, name), outcomes in sorted(by_tool.items())]
    return lines


def _outbox_lines(rows: dict[str, Any]) -> list[str]:
    """Deliveries by kind and state, the oldest pending one's age, bindings by state."""
    lines = ["deliveries by kind and state:" if rows["deliveries"] else "deliveries: none"]
    lines += [f"  {kind} {status}: {count}" for kind, status, count in rows["deliveries"]]
    if rows.get("streamed"):  # counted among the replies sent above, once each
        lines.append(f"  of the replies sent, shown while written (streamed): {rows['streamed']}")
    age = rows["oldest_pending_age"]
    lines.append("oldest pending delivery: none" if age is None else f"oldest pending delivery: {age:.0f} s old")
    bindings = ", ".join(f"{count} {state}" for state, count in rows["bindings"]) or "none"
    lines.append(f"mirror bindings: {bindings}")
    return lines
