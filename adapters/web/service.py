"""WebService: the aiohttp server of `companion run`, with the checks every request passes.

It runs an event loop of its own, in a thread of its own: /livez, /readyz and /metrics answer
at once however busy the core's loop is with conversations. A handler reaches the core (the
companion, the store) through `request.app[BRIDGE]` (adapters/web/bridge.py); /livez tells
whether the core's loop still answers (its heartbeat).

Every request, in this order: its Host must be one of COMPANION_HTTP_ALLOWED_HOSTS (400
otherwise) and its Origin, when it has one, must be this request's own origin: the scheme's
host and port exactly as its Host header names them, so another port of the same host is refused (403); once the stop began, a state-changing
request is refused (503: intake stopped); a state-changing request must carry its session's
CSRF token (403, `WebAuth.csrf_middleware`). Every answer carries headers that keep it to this
origin (a strict Content-Security-Policy, no framing, no Referer, no caching of pages); no
CORS header is ever sent. The access log names method, path (never the query string), status,
size and time. Routes come from installers: functions that add routes to the app (the sign-in
routes of `WebAuth`, the operator endpoints, the pages), so the web chat adds its own the same way.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import logging
import threading
import time
from collections.abc import Callable, Sequence

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from adapters.web.auth import UNSAFE_METHODS, Handler, WebAuth
from adapters.web.bridge import BRIDGE, CoreBridge
from adapters.web.hosts import AllowedHosts
from core.values.errors import CompanionError

log = logging.getLogger(__name__)
access_log = logging.getLogger("adapters.web.access")

RouteInstaller = Callable[[web.Application], None]
SERVICE: web.AppKey[WebService] = web.AppKey("companion_service", object)  # type: ignore[arg-type]
SHUTDOWN_SECONDS = 3.0  # what a request still open at the close may take
HEARTBEAT_SECONDS = 1.0  # how often the core's loop says it answers
LIVE_LIMIT = 30.0  # a core loop silent this long is not alive
CLIENT_MAX_BYTES = 1024 * 1024

SECURITY_HEADERS = {
    # Scripts, styles and requests only from this origin; no plugin, no frame, no base or form elsewhere.
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}


class WebStartError(CompanionError):
    """The service could not listen; the message is one line naming the setting."""


class WebService:
    """The HTTP service: start() listens, stop_intake() refuses state-changing requests (and makes
    /readyz say so), aclose() closes; both safe to call twice, like the chat adapters'.

    Args:
        host, port: where to listen (COMPANION_HTTP_HOST, COMPANION_HTTP_PORT; 0: any free port).
        allowed: the Host names answered.
        auth: sessions, CSRF and the sign-in routes.
        routes: installers that add routes (and cleanup contexts, run on the service's loop) to the app.
        live_limit, monotonic: /livez fails once the core's loop has not answered for this long.
    """

    name = "http"

    def __init__(
        self,
        host: str,
        port: int,
        allowed: AllowedHosts,
        auth: WebAuth,
        routes: Sequence[RouteInstaller] = (),
        *,
        live_limit: float = LIVE_LIMIT,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.host = host
        self.port = port
        self.allowed = allowed
        self.auth = auth
        self.bridge = CoreBridge()
        self._routes = list(routes)
        self.stopping = False
        self._live_limit = live_limit
        self._monotonic = monotonic
        self.beat = monotonic()  # when the core's loop last answered
        self._heartbeat: asyncio.Task[None] | None = None
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None  # of the service's loop

    def build_app(self) -> web.Application:
        """The application with its checks and every installer's routes (tests serve it themselves)."""
        app = web.Application(
            middlewares=[self._host_check, self._intake, self.auth.csrf_middleware],
            client_max_size=CLIENT_MAX_BYTES,
        )
        app.on_response_prepare.append(_secure)  # every answer, streamed and error ones too
        app[SERVICE] = self
        app[BRIDGE] = self.bridge
        self.auth.install(app)
        for install in self._routes:
            install(app)
        return app

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self) -> None:
        """Listen, on the service's own thread and loop; the running loop is the core's. Raises
        WebStartError (one line) when the address cannot be taken."""
        if self._thread is not None:
            return
        self.stopping = False
        self.bridge.core_loop = asyncio.get_running_loop()
        self.beat = self._monotonic()
        self._heartbeat = asyncio.create_task(self._beat(), name="http-heartbeat")
        started: concurrent.futures.Future[None] = concurrent.futures.Future()
        thread = threading.Thread(target=self._serve, args=(started,), name="companion-http", daemon=True)
        thread.start()
        try:
            await asyncio.wrap_future(started)
        except BaseException:
            await asyncio.to_thread(thread.join)
            await self._stop_heartbeat()
            raise
        self._thread = thread
        log.info("http: listening on %s", self.url)

    async def stop_intake(self) -> None:
        """The first step of a stop: state-changing requests are refused, /readyz says 503."""
        self.stopping = True

    async def aclose(self) -> None:
        """Stop listening and close what is open (bounded), then end the thread; safe to call twice."""
        self.stopping = True
        thread, self._thread = self._thread, None
        if thread is not None:
            loop, stop = self.bridge.service_loop, self._stop
            if loop is not None and stop is not None and not loop.is_closed():
                loop.call_soon_threadsafe(stop.set)
            await asyncio.to_thread(thread.join)
            log.info("http: stopped")
        await self._stop_heartbeat()

    def ready(self) -> str | None:
        return "stopping" if self.stopping else None

    def alive(self) -> str | None:
        """For /livez: None while the core's loop answers its heartbeat; else since when it does not."""
        waited = self._monotonic() - self.beat
        return f"the event loop has not answered for {waited:.0f} s" if waited > self._live_limit else None

    # --- the service's thread ----------------------------------------------------------------------

    def _serve(self, started: concurrent.futures.Future[None]) -> None:
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(self._run(started))
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
            if not started.done():
                started.set_exception(WebStartError(f"COMPANION_HTTP_PORT: the service at {self.url} ended"))

    async def _run(self, started: concurrent.futures.Future[None]) -> None:
        self.bridge.service_loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        runner = web.AppRunner(
            self.build_app(),
            handle_signals=False,
            access_log_class=AccessLog,
            access_log=access_log,
            shutdown_timeout=SHUTDOWN_SECONDS,
        )
        try:
            await runner.setup()
            await web.TCPSite(runner, self.host, self.port).start()
        except OSError as exc:
            await runner.cleanup()
            variable = (
                "COMPANION_HTTP_HOST"
                if exc.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT)
                else "COMPANION_HTTP_PORT"
            )
            error = f"{variable}: cannot listen on {self.url} ({exc.strerror or type(exc).__name__})"
            started.set_exception(WebStartError(error))
            return
        except BaseException as exc:  # noqa: BLE001 - handed to the core's loop, where start() raises it
            await runner.cleanup()
            started.set_exception(exc)
            return
        if self.port == 0:
            self.port = runner.addresses[0][1]
        started.set_result(None)
        try:
            await self._stop.wait()
        finally:
            await runner.cleanup()

    async def _beat(self) -> None:
        """On the core's loop: say every HEARTBEAT_SECONDS that it answers."""
        while True:
            self.beat = self._monotonic()
            await asyncio.sleep(HEARTBEAT_SECONDS)

    async def _stop_heartbeat(self) -> None:
        task, self._heartbeat = self._heartbeat, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    # --- the checks every request passes ---------------------------------------------------------

    @web.middleware
    async def _host_check(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if not self.allowed.allows_host(request.headers.get("Host")):
            log.info("refused %s %s: a Host header not in COMPANION_HTTP_ALLOWED_HOSTS", request.method, request.path)
            return web.Response(status=400, text="Unknown host: add it to COMPANION_HTTP_ALLOWED_HOSTS.\n")
        origin = request.headers.get("Origin")
        if origin is not None and not self.allowed.allows_origin(origin, request.headers.get("Host")):
            log.info("refused %s %s: another origin", request.method, request.path)
            return web.Response(status=403, text="Requests from other origins are refused.\n")
        return await handler(request)

    @web.middleware
    async def _intake(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if self.stopping and request.method in UNSAFE_METHODS:
            return web.json_response({"error": "the companion is stopping; try again in a moment"}, status=503)
        return await handler(request)


async def _secure(request: web.Request, response: web.StreamResponse) -> None:
    """Just before an answer's headers go out: what keeps it to this origin, and no CORS."""
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    response.headers.setdefault("Cache-Control", "no-store")
    response.headers["Server"] = "companion"  # not the library and its version
    for name in [h for h in response.headers if h.lower().startswith("access-control-")]:
        del response.headers[name]  # no CORS, whatever a handler set


class AccessLog(AbstractAccessLogger):
    """One INFO line per request: method, path, status, size and time. Never the query string
    (where a mistyped link could carry a secret), a header, a cookie, or the client's address."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        self.logger.info(
            "%s %s %d %d bytes %.1f ms",
            request.method,
            request.rel_url.path,
            response.status,
            response.body_length,
            time * 1e3,
        )

    @property
    def enabled(self) -> bool:
        return self.logger.isEnabledFor(logging.INFO)
