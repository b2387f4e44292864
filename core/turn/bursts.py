"""Bursts: quick messages of one conversation answered together, in one turn.

Each message is stored as an open turn when it arrives (the inbox), then held here; once the
conversation has been quiet for the window, the newest held turn is answered, which answers
every open turn before it (the store marks them in the reply's transaction). A crash while a
burst waits therefore loses nothing: the messages are open turns, and start-up answers them
(`Companion.answer_open_turns`). The companion flushes a held burst before a command or a
message in another mode, so a burst never spans either.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from core.values.retry import Sleep

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Held(Generic[T]):
    generation: int
    item: T
    count: int  # messages in the burst so far


class BurstWindow(Generic[T]):
    """Holds each conversation's newest unanswered message and calls `on_quiet(conversation,
    generation)` once `seconds` passed without another; `take(conversation, generation)` then
    hands it over unless a newer message came meanwhile. `seconds` 0 disables holding."""

    def __init__(
        self,
        seconds: float,
        on_quiet: Callable[[int, int], Awaitable[None]],
        *,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.seconds = max(seconds, 0.0)
        self._on_quiet = on_quiet
        self._sleep = sleep
        self._held: dict[int, Held[T]] = {}
        self._timers: set[asyncio.Task[None]] = set()
        self._answering: set[asyncio.Task[None]] = set()  # timers past their window, answering
        self._generations = itertools.count(1)

    @property
    def enabled(self) -> bool:
        return self.seconds > 0

    def hold(self, conversation_id: int, item: T) -> None:
        """Hold `item` as the newest message of its conversation and start the quiet window again."""
        earlier = self._held.get(conversation_id)
        generation = next(self._generations)
        self._held[conversation_id] = Held(generation, item, (earlier.count if earlier else 0) + 1)
        # An earlier timer is not cancelled: it wakes, finds a newer generation, and does nothing.
        task = asyncio.get_running_loop().create_task(self._wait(conversation_id, generation))
        self._timers.add(task)
        task.add_done_callback(self._ended)

    def peek(self, conversation_id: int) -> Held[T] | None:
        return self._held.get(conversation_id)

    def take(self, conversation_id: int, generation: int | None = None) -> Held[T] | None:
        """The held burst of a conversation, removed; with `generation`, only if it is still that one."""
        held = self._held.get(conversation_id)
        if held is None or (generation is not None and held.generation != generation):
            return None
        del self._held[conversation_id]
        return held

    async def aclose(self, grace: float = 30.0) -> None:
        """Stop waiting. What is still held stays stored as open turns: the next start answers
        them. A burst already being answered may finish (for at most `grace` seconds), so that a
        reply sent is also marked sent and not sent again after the restart."""
        answering = set(self._answering)
        waiting = [task for task in self._timers if task not in answering]
        for task in waiting:
            task.cancel()
        if answering:
            _, late = await asyncio.wait(answering, timeout=grace)
            for task in late:
                task.cancel()
        timers = list(self._timers)
        if timers:
            await asyncio.gather(*timers, return_exceptions=True)
        self._held.clear()

    async def _wait(self, conversation_id: int, generation: int) -> None:
        await self._sleep(self.seconds)
        if self._held.get(conversation_id) is None or self._held[conversation_id].generation != generation:
            return  # a newer message restarted the window, or a command flushed the burst
        task = asyncio.current_task()
        if task is not None:
            self._answering.add(task)
        try:
            await self._on_quiet(conversation_id, generation)
        finally:
            if task is not None:
                self._answering.discard(task)

    def _ended(self, task: asyncio.Task[None]) -> None:
        self._timers.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("answering a burst failed (%s)", type(task.exception()).__name__)
