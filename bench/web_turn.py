"""10. A web chat turn against a terminal turn, in the same process, with a zero-latency model.

One companion on one store serves both: the web chat through the real HTTP service and its pages
(`WebService` on its own thread, the pages bot/bootstrap.py installs, the web chat attached to the
core's entry as a platform), and the terminal's turns straight through `Companion.handle()` (what the
terminal chat calls for each line). A web turn is timed where a browser would see it: an HTTP
client on a thread and event loop of its own (as a browser is another process) POSTs the message to
/send with its session cookie and CSRF token, and the turn ends when the answer arrives on the
page's open GET /events stream. Both kinds alternate in blocks, so load from elsewhere falls on both.
"""

from __future__ import annotations

import asyncio
import json
import re
import tempfile
import threading
import time
from collections.abc import Coroutine
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

import aiohttp

from adapters.storage.stores import sqlite_stores
from adapters.storage.web import WebQueries
from adapters.web.auth import WebAuth, issue_login_code
from adapters.web.hosts import AllowedHosts
from adapters.web.pages import install_site
from adapters.web.service import WebService
from bench._common import ZeroLatencyProvider, median, ms, percentile, ratio
from bot.bootstrap import build_companion, core_entry, web_chat, web_core
from core.delivery.outbox import Outbox
from core.ports.clock import SystemClock
from core.turn.config import CompanionConfig
from core.values.edge import EdgeSettings
from core.values.model import InboundMessage

TARGET_RATIO = 1.5
TERMINAL = InboundMessage("terminal", "terminal", "owner", "hello", is_direct=True)
_CSRF = re.compile(r'<meta name="csrf-token" content="([^"]+)">')
T = TypeVar("T")


class _Browser:
    """An HTTP client on a thread and event loop of its own (aiohttp's, whose parser is C: closer to
    a browser's own cost than a pure-Python client): signs in, keeps the chat page's event stream
    open, and sends messages as the page's script does."""

    def __init__(self, base: str) -> None:
        self._base = base
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="bench-browser", daemon=True)
        self._session: aiohttp.ClientSession | None = None
        self._answers: asyncio.Queue[str] | None = None
        self._stream: asyncio.Task[None] | None = None
        self._csrf = ""

    def run(self, coroutine: Coroutine[Any, Any, T]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    def start(self) -> None:
        self._thread.start()

    async def sign_in(self, code: str) -> None:
        session = self._session = aiohttp.ClientSession(base_url=self._base, cookie_jar=aiohttp.CookieJar(unsafe=True))
        async with session.get("/login") as login:
            token = _CSRF.search(await login.text())
        assert token is not None
        async with session.post("/login", json={"code": code}, headers={"X-CSRF-Token": token.group(1)}) as signed:
            assert signed.status == 200, await signed.text()
        async with session.get("/") as page:
            token = _CSRF.search(await page.text())
        assert token is not None
        self._csrf = token.group(1)
        self._answers = asyncio.Queue()
        opened = asyncio.Event()
        self._stream = asyncio.create_task(self._read_events(opened))
        await opened.wait()

    async def _read_events(self, opened: asyncio.Event) -> None:
        assert self._session is not None
        assert self._answers is not None
        async with self._session.get("/events", timeout=aiohttp.ClientTimeout(total=None)) as response:
            kind = ""
            async for raw in response.content:
                line = raw.decode().rstrip("\n")
                if line.startswith("event: "):
                    kind = line[7:]
                elif line.startswith("data: "):
                    if kind == "history":
                        opened.set()
                    elif kind == "live":
                        await self._answers.put(json.loads(line[6:])["text"])

    async def turns(self, count: int) -> list[float]:
        """`count` messages, each timed from its POST until its answer is on the event stream."""
        assert self._session is not None
        assert self._answers is not None
        samples = []
        headers = {"X-CSRF-Token": self._csrf}
        for _ in range(count):
            started = time.perf_counter()
            async with self._session.post("/send", json={"text": "hello"}, headers=headers) as sent:
                assert sent.status == 200, await sent.text()
                await sent.read()
            answer = await self._answers.get()
            samples.append(time.perf_counter() - started)
            assert answer == "ok", answer
        return samples

    async def _close(self) -> None:
        if self._stream is not None:
            self._stream.cancel()
            await asyncio.gather(self._stream, return_exceptions=True)
        if self._session is not None:
            await self._session.close()

    def close(self) -> None:
        if self._thread.is_alive():
            self.run(self._close()).result(timeout=10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        self._loop.close()


async def _measure(turns: int, warmup: int, block: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-web-") as tmp:
        stores = sqlite_stores(Path(tmp) / "bench.db")
        await stores.database.start()
        provider = ZeroLatencyProvider()
        web = frozenset({"web"})
        outbox = Outbox(stores.outbox, SystemClock(), platforms=web)
        companion = build_companion(stores, provider, CompanionConfig(platforms=web), outbox=outbox)
        await companion.start()
        entry = core_entry(companion)
        chat = web_chat(companion, entry, EdgeSettings())
        await chat.intake.start()
        entry.attach(chat)
        queries = WebQueries(stores.database.engine)
        service = WebService(
            "127.0.0.1",
            0,
            AllowedHosts.default("127.0.0.1"),
            WebAuth(queries, SystemClock()),
            routes=[install_site(web_core(companion, chat.intake))],
        )
        await service.start()
        browser = _Browser(service.url)
        browser.start()
        try:
            await asyncio.wrap_future(browser.run(browser.sign_in(await issue_login_code(queries, time.time()))))

            async def terminal_turns(count: int) -> list[float]:
                samples = []
                for _ in range(count):
                    started = time.perf_counter()
                    reply = await companion.handle(TERMINAL)
                    samples.append(time.perf_counter() - started)
                    assert reply is not None
                    assert reply.text == "ok", reply
                return samples

            await asyncio.wrap_future(browser.run(browser.turns(warmup)))
            await terminal_turns(warmup)
            samples: dict[str, list[float]] = {"web": [], "terminal": []}
            done = 0
            started = time.perf_counter()
            while done < turns:
                n = min(block, turns - done)
                samples["web"] += await asyncio.wrap_future(browser.run(browser.turns(n)))
                samples["terminal"] += await terminal_turns(n)
                done += n
            elapsed = time.perf_counter() - started
        finally:
            browser.close()
            await service.aclose()
            entry.detach(chat)
            await chat.intake.aclose()
            await companion.drain()
            await stores.database.aclose()
    web_med, term_med = median(samples["web"]), median(samples["terminal"])
    web_p95, term_p95 = percentile(samples["web"], 95), percentile(samples["terminal"], 95)
    result = {
        "turns": turns,
        "warmup": warmup,
        "web_median_ms": ms(web_med),
        "web_p95_ms": ms(web_p95),
        "terminal_median_ms": ms(term_med),
        "terminal_p95_ms": ms(term_p95),
        "ratio_median": round(ratio(web_med, term_med), 3),
        "ratio_p95": round(ratio(web_p95, term_p95), 3),
        "target_ratio": TARGET_RATIO,
        "provider_calls": dict(provider.calls),
        "wall_s": round(elapsed, 3),
    }
    result["ok"] = result["ratio_median"] <= TARGET_RATIO
    return result


def run(quick: bool = False) -> dict:
    if quick:
        return asyncio.run(_measure(turns=60, warmup=10, block=20))
    return asyncio.run(_measure(turns=300, warmup=30, block=50))


if __name__ == "__main__":
    print(json.dumps(run(quick=False), indent=2))
