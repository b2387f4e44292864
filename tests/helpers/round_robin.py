"""A round-robin front over several `companion run` processes' HTTP services, as a reverse proxy (Caddy's
`lb_policy round_robin`, nginx's upstream) puts one webhook URL in front of them: each request goes to the next
backend in turn; one whose connection is refused (a process that died) is passed over for the next, as a proxy's
passive health check does; a request cut off by a backend that died meanwhile answers 502 (Telegram delivers it
again). Run with `RoundRobinFront.run_in_thread(backends=[...])`; the fake Telegram's `deliver_to` names it."""

from __future__ import annotations

from typing import Any

import aiohttp
from aiohttp import web

from tests.helpers.serving import LoopbackServer

# What a proxy passes on: Telegram's secret header and the content's type; the Host as the request had it.
PASSED = ("Host", "Content-Type", "X-Telegram-Bot-Api-Secret-Token")


class RoundRobinFront(LoopbackServer):
    """Every request to the next of `backends` (ports on 127.0.0.1). `routed[port]`: how many each answered."""

    def __init__(self, backends: list[int]) -> None:
        self.backends = list(backends)
        self.routed: dict[int, int] = dict.fromkeys(self.backends, 0)
        self._next = 0
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        app = web.Application(client_max_size=2**20)
        app.router.add_route("*", "/{tail:.*}", self._pass)
        await self._bind(app)

    async def aclose(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _pass(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        body = await request.read()
        headers = {name: request.headers[name] for name in PASSED if name in request.headers}
        for _ in self.backends:
            port = self.backends[self._next % len(self.backends)]
            self._next += 1
            try:
                async with self._session.request(
                    request.method, f"http://127.0.0.1:{port}{request.path_qs}", data=body, headers=headers
                ) as answer:
                    content: Any = await answer.read()
                    self.routed[port] += 1
                    return web.Response(status=answer.status, body=content, content_type=answer.content_type)
            except aiohttp.ClientConnectorError:
                continue  # refused: that process is gone; the next one takes it
            except aiohttp.ClientError:
                return web.Response(status=502, text="bad gateway")
        return web.Response(status=502, text="no backend")
