"""Conversation lanes: one mailbox and one worker per chat, so each conversation's events (messages,
edits, commands, button presses, a burst's end, a cut-off turn) are handled in order, one at a time,
while different conversations run concurrently.

A lane never waits on a platform: what a turn sends leaves through the outbox's own per-target
lanes (core/delivery/outbox.py), after the lane moved on. A caller that stops waiting for its
event's answer does not stop the work: the lane owns it until it is done or the stop cuts it off.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, Generic, TypeVar

from core.values.errors import CompanionError

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")

Work = Callable[[], Awaitable[Any]]


class LanesClosed(CompanionError):
    """The lanes were stopped: no event is taken any more (the next start handles what is left)."""


class Lanes(Generic[K]):
    """Runs each key's work in submission order; `submit` enqueues at once, without suspending,
    so events submitted in order run in order."""

    def __init__(self) -> None:
        self._queues: dict[K, deque[tuple[Work, asyncio.Future[Any]]]] = {}
        self._workers: dict[K, asyncio.Task[None]] = {}
        self._aliases: dict[K, K] = {}
        self._closed = False

    def submit(self, key: K, work: Callable[[], Awaitable[T]]) -> asyncio.Future[T]:
        """Queue `work` on the lane of `key`; the future gets its result (or its exception).

        Raises:
            LanesClosed: the lanes were stopped.
        """
        if self._closed:
            raise LanesClosed("the conversation lanes are stopped")
        key = self._aliases.get(key, key)
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        future.add_done_callback(_retrieved)  # work nobody waits for (a burst's end) fails quietly here
        self._queues.setdefault(key, deque()).append((work, future))
        if key not in self._workers:
            self._workers[key] = asyncio.get_running_loop().create_task(self._run(key), name=f"lane-{key}")
        return future

    async def run(self, key: K, work: Callable[[], Awaitable[T]]) -> T:
        """`submit`, then wait for the result. Cancelling the wait leaves the work to the lane."""
        return await asyncio.shield(self.submit(key, work))

    def follow(self, old: K, new: K) -> None:
        """A chat moved from `old` to `new` (a Telegram group upgraded to a supergroup): events of
        the new key join the old key's lane, so the conversation keeps one order across the move."""
        if old != new and new not in self._workers:
            self._aliases[new] = self._aliases.get(old, old)

    @property
    def busy(self) -> int:
        """How many lanes have work queued or running."""
        return len(self._workers)

    async def idle(self, grace: float) -> bool:
        """Wait up to `grace` seconds until no lane has work (new work is still taken meanwhile).
        Returns whether they all ran out of work."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(grace, 0.0)
        while self._workers and (left := deadline - loop.time()) > 0:
            await asyncio.wait(set(self._workers.values()), timeout=left)
        return not self._workers

    async def drain(self, grace: float) -> int:
        """The stop: `idle` for up to `grace` seconds (what is already inside the process finishes),
        then take no more work and cancel what is still running. Returns how many lanes were cut off."""
        await self.idle(grace)
        self._closed = True
        late = list(self._workers.values())
        for task in late:
            task.cancel()
        if late:
            await asyncio.gather(*late, return_exceptions=True)
            log.warning("%d conversations were cut off by the stop; the next start answers them", len(late))
        return len(late)

    async def _run(self, key: K) -> None:
        queue = self._queues[key]
        try:
            while queue:
                work, future = queue.popleft()
                try:
                    result = await work()
                except asyncio.CancelledError:
                    if not future.done():
                        future.cancel()
                    raise
                except Exception as exc:  # noqa: BLE001 - handed to whoever waits for this event
                    if not future.done():
                        future.set_exception(exc)
                else:
                    if not future.done():
                        future.set_result(result)
        finally:
            for _, future in queue:  # cut off by a stop: nothing more runs in this lane
                if not future.done():
                    future.cancel()
            queue.clear()
            self._queues.pop(key, None)
            self._workers.pop(key, None)


def _retrieved(future: asyncio.Future[Any]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.debug("lane work failed (%s)", type(future.exception()).__name__)
