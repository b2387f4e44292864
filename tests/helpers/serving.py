"""The lifecycle every fake server shares: async context manager, and serving from a thread."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from typing import Any, TypeVar

S = TypeVar("S", bound="LoopbackServer")


class LoopbackServer:
    """Subclasses implement `start()` (binding 127.0.0.1, setting `port`) and `aclose()`."""

    port: int | None = None
    _runner = None

    async def _bind(self, app) -> None:
        """Serve `app` on 127.0.0.1 at a free port; set `port`. Cleans up if binding fails."""
        from aiohttp import web

        # handler_cancellation: a client that gave up (timeout) ends its delayed handler.
        runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=0.5)
        await runner.setup()
        try:
            await web.TCPSite(runner, "127.0.0.1", 0).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self.port = runner.addresses[0][1]
        self.unreachable = False

    async def go_down(self) -> None:
        """Become unreachable, as a host that went away: new connections are refused, and a
        request on a connection kept alive from before is hung up on (see `hang_up_if_down`)."""
        self.unreachable = True
        for site in list(self._runner.sites):
            await site.stop()

    async def come_back(self) -> None:
        """Listen again on the same port."""
        from aiohttp import web

        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        self.unreachable = False

    def hang_up_if_down(self, request) -> None:
        if getattr(self, "unreachable", False):
            request.transport.close()
            raise asyncio.CancelledError  # nothing may be written after the hang-up

    async def start(self) -> None:
        raise NotImplementedError

    async def aclose(self) -> None:
        raise NotImplementedError

    async def __aenter__(self: S) -> S:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    @classmethod
    @contextlib.contextmanager
    def run_in_thread(cls: type[S], **kwargs: Any) -> Iterator[S]:
        """Serve from a background thread with its own event loop, for subprocess tests."""
        server = cls(**kwargs)
        ready = threading.Event()
        failure: list[BaseException] = []
        control: dict[str, Any] = {}

        async def serve() -> None:
            stop = asyncio.Event()
            control["loop"], control["stop"] = asyncio.get_running_loop(), stop
            try:
                await server.start()
            except BaseException as exc:
                failure.append(exc)
                ready.set()
                return
            ready.set()
            try:
                await stop.wait()
            finally:
                await server.aclose()

        thread = threading.Thread(target=asyncio.run, args=(serve(),), name=cls.__name__, daemon=True)
        thread.start()
        ready.wait(timeout=10)
        if failure:
            thread.join(timeout=10)
            raise failure[0]
        if not server.port:
            raise RuntimeError(f"{cls.__name__} did not start within 10 s")
        try:
            yield server
        finally:
            control["loop"].call_soon_threadsafe(control["stop"].set)
            thread.join(timeout=10)
