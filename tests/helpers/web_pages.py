"""The web chat's pages in a test: the real core, store, outbox and the web chat (tests/helpers/web_chat.py)
behind a real WebService on 127.0.0.1 with the pages bot/bootstrap.py installs, a signed-in httpx
client, and a reader of the server-sent events."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx

from adapters.storage.web import WebQueries
from adapters.web.auth import SignInAttempts, WebAuth, issue_login_code
from adapters.web.hosts import AllowedHosts
from adapters.web.pages import install_site
from adapters.web.service import WebService
from bot.bootstrap import web_core
from tests.helpers.web import csrf_of, sign_in
from tests.helpers.web_chat import WebSide, web_side


@dataclass
class SiteSide:
    web: WebSide
    service: WebService
    client: httpx.AsyncClient
    csrf: str

    async def post(self, path: str, data: dict[str, Any] | None = None, **kwargs: Any) -> httpx.Response:
        """A form POST with the session's CSRF token, as a page's form sends it."""
        return await self.client.post(path, data={"csrf_token": self.csrf, **(data or {})}, **kwargs)

    async def send(self, text: str) -> dict[str, Any]:
        """What the chat page's script does with a message; the answer arrives as an event."""
        answer = await self.client.post("/send", json={"text": text}, headers={"X-CSRF-Token": self.csrf})
        assert answer.status_code == 200, answer.text
        return answer.json()


@contextlib.asynccontextmanager
async def site_served(stores, provider, clock, **config) -> AsyncIterator[SiteSide]:
    """The pages served on a free loopback port, and a client signed in as the owner."""
    async with web_side(stores, provider, clock, **config) as web:
        queries = WebQueries(stores.database.engine)
        service = WebService(
            "127.0.0.1",
            0,
            AllowedHosts.default("127.0.0.1"),
            WebAuth(queries, clock, SignInAttempts()),
            routes=[install_site(web_core(web.companion, web.chat))],
        )
        await service.start()
        try:
            async with httpx.AsyncClient(base_url=service.url, timeout=20) as client:
                assert (await sign_in(client, await issue_login_code(queries, clock.now()))).status_code == 200
                chat = await client.get("/")
                assert chat.status_code == 200
                yield SiteSide(web, service, client, csrf_of(chat.text))
        finally:
            await service.aclose()


class EventStream:
    """GET /events read in the background: `next()` gives each server-sent event as (kind, data);
    `received` keeps every one with the loop's time it arrived at. `headers`: sent with the GET
    (a reconnecting browser's Last-Event-ID)."""

    def __init__(self, client: httpx.AsyncClient, headers: dict[str, str] | None = None) -> None:
        self._client = client
        self._headers = headers or {}
        self.received: list[tuple[float, str, Any]] = []
        self.events: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self.status: int | None = None
        self._task: asyncio.Task[None] | None = None
        self._opened = asyncio.Event()

    async def __aenter__(self) -> EventStream:
        self._task = asyncio.create_task(self._read())
        async with asyncio.timeout(10):
            await self._opened.wait()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def next(self, kind: str | None = None, timeout: float = 10.0) -> tuple[str, Any]:
        """The next event (of `kind`, skipping others); the test fails after `timeout` seconds."""
        async with asyncio.timeout(timeout):
            while True:
                event = await self.events.get()
                if kind is None or event[0] == kind:
                    return event

    async def ended(self, timeout: float = 10.0) -> None:
        """Until the server ended the stream."""
        assert self._task is not None
        async with asyncio.timeout(timeout):
            await asyncio.shield(self._task)

    async def _read(self) -> None:
        try:
            async with self._client.stream("GET", "/events", timeout=None, headers=self._headers) as response:
                self.status = response.status_code
                self._opened.set()
                kind, data = "message", []
                async for line in response.aiter_lines():
                    if line.startswith("event: "):
                        kind = line[7:]
                    elif line.startswith("data: "):
                        data.append(line[6:])
                    elif not line and data:
                        event = (kind, json.loads("\n".join(data)))
                        self.received.append((asyncio.get_running_loop().time(), *event))
                        await self.events.put(event)
                        kind, data = "message", []
        finally:
            self._opened.set()
