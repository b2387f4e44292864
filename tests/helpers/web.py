"""The HTTP service in a test: served on 127.0.0.1 (a free port) over a real store, and driven with httpx."""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass

import httpx
from aiohttp import web

from adapters.storage.stores import Stores
from adapters.storage.web import WebQueries
from adapters.web.auth import SignInAttempts, WebAuth, issue_login_code
from adapters.web.hosts import AllowedHosts
from adapters.web.metrics import PrometheusMetrics
from adapters.web.operators import DatabaseProbe, Operators
from adapters.web.pages import install_landing
from adapters.web.service import WebService
from core.ports.clock import Clock
from tests.helpers.proc import run_companion

_CSRF = re.compile(r'<meta name="csrf-token" content="([^"]+)">')


@dataclass
class Served:
    service: WebService
    queries: WebQueries
    clock: Clock
    client: httpx.AsyncClient
    probe: DatabaseProbe
    metrics: PrometheusMetrics

    async def new_code(self) -> str:
        return await issue_login_code(self.queries, self.clock.now())


@contextlib.asynccontextmanager
async def served(
    stores: Stores,
    clock: Clock,
    *,
    allowed: AllowedHosts | None = None,
    checks: Sequence[tuple[str, Callable[[], str | None]]] = (),
    probe: DatabaseProbe | None = None,
    metrics: PrometheusMetrics | None = None,
    routes: Sequence[Callable[[web.Application], None]] = (),
    live_limit: float = 30.0,
) -> AsyncIterator[Served]:
    """A WebService wired as bot/bootstrap.py wires it, listening on a free loopback port."""
    queries = WebQueries(stores.database.engine)
    metrics = metrics or PrometheusMetrics()
    probe = probe or DatabaseProbe(queries.probe_write, metrics=metrics)
    operators = Operators(probe, checks, metrics)
    service = WebService(
        "127.0.0.1",
        0,
        allowed or AllowedHosts.default("127.0.0.1"),
        WebAuth(queries, clock, SignInAttempts()),
        routes=[operators.install, install_landing, *routes],
        live_limit=live_limit,
    )
    await service.start()
    try:
        async with httpx.AsyncClient(base_url=service.url, follow_redirects=False, timeout=10) as client:
            yield Served(service, queries, clock, client, probe, metrics)
    finally:
        await service.aclose()


async def login_csrf(client: httpx.AsyncClient) -> str:
    """Open the login page (it sets the login cookie) and return the CSRF token it carries."""
    page = await client.get("/login")
    assert page.status_code == 200
    return csrf_of(page.text)


def csrf_of(html: str) -> str:
    match = _CSRF.search(html)
    assert match is not None, "the page carries no CSRF token"
    return match.group(1)


async def sign_in(client: httpx.AsyncClient, code: str) -> httpx.Response:
    """What the login page's script does with the code from the link's fragment."""
    token = await login_csrf(client)
    return await client.post("/login", json={"code": code}, headers={"X-CSRF-Token": token})


@contextlib.asynccontextmanager
async def signed_in_browser(base: str, env: dict[str, str]) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    """A browser signed in to the web chat of the `companion run` at `base` (started with `env`), with
    the link `companion web-login` prints; and the chat page's CSRF token."""
    login = run_companion(["web-login"], env)
    assert login.returncode == 0, login.stderr
    async with httpx.AsyncClient(base_url=base, timeout=20) as browser:
        assert (await sign_in(browser, login.stdout.strip().split("#", 1)[1])).status_code == 200
        yield browser, csrf_of((await browser.get("/")).text)


def stop_gateway(process: subprocess.Popen) -> None:
    """Stop a `companion run` as Ctrl-C does (SIGINT); killed if it still runs 30 s later."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def sign_in_blocking(client: httpx.Client, code: str) -> httpx.Response:
    """`sign_in` for a test that drives a subprocess with a blocking client."""
    page = client.get("/login")
    assert page.status_code == 200
    return client.post("/login", json={"code": code}, headers={"X-CSRF-Token": csrf_of(page.text)})
