"""Wait for a condition with a deadline: a test never waits a fixed time for something to (not) happen."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


async def wait_for(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "the condition") -> None:
    """Return once `predicate()` holds; fail the test if it does not within `timeout` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():  # polled: plain attributes of fakes and tasks have no event to await
        if loop.time() >= deadline:
            raise AssertionError(f"{what} did not hold within {timeout} s")
        await asyncio.sleep(0.01)


async def wait_for_stored(read: Callable[[], Awaitable[object]], timeout: float = 10.0, what: str = "the row") -> None:
    """Return once `await read()` is not None (a row written off the turn, e.g. the update ledger); fail the
    test if it is not within `timeout` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while await read() is None:
        if loop.time() >= deadline:
            raise AssertionError(f"{what} was not stored within {timeout} s")
        await asyncio.sleep(0.01)
