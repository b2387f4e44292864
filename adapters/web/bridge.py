"""CoreBridge: how the HTTP service's thread reaches the core's event loop, and back.

The service answers on an event loop of its own, in its own thread, so that /livez, /readyz and
/metrics answer at once however many conversations the core's loop is busy with. Whatever
belongs to the core's loop (the companion, the store and its connections, their locks) is
reached through `call`, which runs a coroutine function there and awaits its result here;
`notify` runs a plain function on the service's loop from the core's (to wake a stream).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, TypeVar

from aiohttp import web

P = ParamSpec("P")
T = TypeVar("T")


class CoreBridge:
    """Bound to the core's loop by `WebService.start`, and to the service's loop once it runs."""

    def __init__(self) -> None:
        self.core_loop: asyncio.AbstractEventLoop | None = None
        self.service_loop: asyncio.AbstractEventLoop | None = None

    async def call(self, function: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run `function(*args, **kwargs)` on the core's loop and await its result on this one.
        Cancelling the wait cancels the call."""
        core = self.core_loop
        if core is None or core is asyncio.get_running_loop():
            return await function(*args, **kwargs)

        async def run() -> T:
            return await function(*args, **kwargs)

        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(run(), core))

    def notify(self, function: Callable[..., Any], *args: Any) -> None:
        """Run `function(*args)` soon on the service's loop (from any thread)."""
        loop = self.service_loop
        if loop is None or loop.is_closed():
            return
        loop.call_soon_threadsafe(function, *args)


# app[BRIDGE]: the service's bridge to the core, for every handler.
BRIDGE: web.AppKey[CoreBridge] = web.AppKey("companion_bridge", CoreBridge)
