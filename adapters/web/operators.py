"""GET /livez, /readyz and /metrics: for supervisors and Prometheus, with no sign-in and nothing personal.

They answer on the service's own loop (adapters/web/service.py). /livez answers 200 while the
process and the core's event loop answer (its heartbeat came within 30 s). /readyz answers 200
when the database takes writes and every configured adapter is connected, else 503 naming each
failing part; it reads the last database probe (one small write every few seconds, made on the
core's loop) instead of writing itself, so it answers at once however busy the core is. /metrics
is the Prometheus text format of `PrometheusMetrics`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from aiohttp import web

from adapters.web.bridge import BRIDGE, CoreBridge
from adapters.web.metrics import CONTENT_TYPE, PrometheusMetrics
from adapters.web.service import SERVICE
from core.ports.metrics import NO_METRICS, Metrics

log = logging.getLogger(__name__)

PROBE_SECONDS = 5.0  # how often the database probe writes
PROBE_LIMIT = 10.0  # a probe write waiting longer than this makes the database not ready
ReadyCheck = tuple[str, Callable[[], str | None]]  # (part, ready(): None or a few words)


class DatabaseProbe:
    """Writes the probe row every `every` seconds and remembers how the last write went.

    Args:
        write: one write transaction (adapters/storage/web.py `probe_write`), given the time; run
            on the core's loop through the bridge, so its time includes the wait for that loop.
        metrics: the write's duration goes to `database_write("probe", ...)`.
        monotonic, wall: clocks (tests move them).
    """

    def __init__(
        self,
        write: Callable[[float], Awaitable[None]],
        *,
        metrics: Metrics = NO_METRICS,
        every: float = PROBE_SECONDS,
        limit: float = PROBE_LIMIT,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._write = write
        self._metrics = metrics
        self._every = every
        self._limit = limit
        self._monotonic = monotonic
        self._wall = wall
        self._failure: str | None = "not probed yet"
        self._since: float | None = None  # when the write in progress began

    async def probe(self, bridge: CoreBridge | None = None) -> None:
        """One write (on the core's loop, through `bridge`); its outcome is what `problem` reports
        until the next."""
        started = self._monotonic()
        self._since = started
        try:
            if bridge is None:
                await self._write(self._wall())
            else:
                await bridge.call(self._write, self._wall())
        except Exception as exc:  # noqa: BLE001 - any failure means not writable; the type names it
            self._failure = f"not writable ({type(exc).__name__})"
            log.warning("readiness: the database probe write failed (%s)", type(exc).__name__)
        else:
            self._failure = None
            self._metrics.database_write("probe", self._monotonic() - started)
        finally:
            self._since = None

    def problem(self) -> str | None:
        """None when the last write succeeded and none has been waiting past the limit."""
        if self._since is not None:
            waited = self._monotonic() - self._since
            if waited > self._limit:
                return f"a write has waited {waited:.0f} s"
        return self._failure

    async def run(self, bridge: CoreBridge | None = None) -> None:
        """Probe for ever, every `every` seconds (cancelled by the service's cleanup)."""
        while True:
            await asyncio.sleep(self._every)
            await self.probe(bridge)


class Operators:
    """The operator endpoints. `checks`: each configured adapter's `ready()`, by name; the database
    probe and the service itself (not once its stop began) are checked too."""

    def __init__(
        self,
        probe: DatabaseProbe,
        checks: Sequence[ReadyCheck],
        metrics: PrometheusMetrics | None,
        numbers: Sequence[tuple[str, Callable[[], int]]] = (),
        shared: Callable[[], dict[str, object]] | None = None,
    ) -> None:
        self._probe = probe
        self._checks = list(checks)
        self._metrics = metrics
        self._numbers = list(numbers)  # shown by /readyz as they are: a count, nothing else (the inbox's depth)
        # A shared database (issue 33): what this process holds (its id, how many conversations), for /readyz.
        self._shared = shared

    def install(self, app: web.Application) -> None:
        app.router.add_get("/livez", self._livez)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._render_metrics)
        app.cleanup_ctx.append(self._probing)

    async def _probing(self, app: web.Application) -> AsyncIterator[None]:
        """The first probe before the service answers, then one every few seconds until it closes."""
        await self._probe.probe(app[BRIDGE])
        task = asyncio.create_task(self._probe.run(app[BRIDGE]), name="readiness-probe")
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    def readiness(self, service_ready: Callable[[], str | None]) -> dict[str, str]:
        """Each part and its state: `ok`, or what is wrong."""
        parts = {"http": service_ready(), "database": self._probe.problem()}
        for name, ready in self._checks:
            try:
                parts[name] = ready()
            except Exception as exc:  # noqa: BLE001 - a check that fails is a part that is not ready
                parts[name] = f"check failed ({type(exc).__name__})"
        return {name: problem or "ok" for name, problem in parts.items()}

    async def _livez(self, request: web.Request) -> web.StreamResponse:
        stuck = request.app[SERVICE].alive()
        if stuck is not None:
            return web.json_response({"status": "not alive", "loop": stuck}, status=503)
        return web.json_response({"status": "alive"})

    async def _readyz(self, request: web.Request) -> web.StreamResponse:
        parts = self.readiness(request.app[SERVICE].ready)
        failing = sorted(name for name, state in parts.items() if state != "ok")
        body: dict[str, object] = {
            "status": "ready" if not failing else "not ready",
            "failing": failing,
            "parts": parts,
        }
        for name, number in self._numbers:
            body[name] = int(number())
        if self._shared is not None:
            body["shared"] = self._shared()
        return web.json_response(body, status=503 if failing else 200)

    async def _render_metrics(self, request: web.Request) -> web.StreamResponse:
        if self._metrics is None:
            raise web.HTTPNotFound()
        return web.Response(
            body=self._metrics.render(), headers={"Content-Type": CONTENT_TYPE, "Cache-Control": "no-store"}
        )
