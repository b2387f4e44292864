"""Bursts: quick messages of one conversation answered together, in one turn.

Each message is stored as an open turn when it arrives (the inbox), then held here; once the
conversation has been quiet for the window, `on_quiet` hands the burst's end to the conversation's
lane as one more event, and the newest held turn is answered there, which answers every open turn
before it (the store marks them in the reply's transaction). A crash while a burst waits therefore
loses nothing: the messages are open turns, and start-up answers them. The lane flushes a held
burst before a command or a message in another mode, so a burst never spans either; a stop
answers what is held (within the stop grace) instead of waiting out the window.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from core.values.model import Turn
from core.values.modes import ModeState
from core.values.retry import Sleep

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Held(Generic[T]):
    generation: int
    item: T
    count: int  # messages in the burst so far


@dataclass(frozen=True, slots=True)
class HeldTurn:
    """The newest stored message of a burst, with the mode it was stored in."""

    turn: Turn
    state: ModeState
    message_id: int


class BurstWindow(Generic[T]):
    """Holds each conversation's newest unanswered message and calls `on_quiet(conversation,
    generation)` once `seconds` passed without another; `take(conversation, generation)` then
    hands it over unless a newer message came meanwhile. `seconds` 0 disables holding."""

    def __init__(
        self,
        seconds: float,
        on_quiet: Callable[[int, int], None],
        *,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.seconds = max(seconds, 0.0)
        self._on_quiet = on_quiet
        self._sleep = sleep
        self._held: dict[int, Held[T]] = {}
        self._timers: set[asyncio.Task[None]] = set()
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

    async def stop(self) -> list[tuple[int, int]]:
        """Stop the windows: no timer fires any more. Returns (conversation, generation) of every
        burst still held, for the stop to answer now; what it cannot answer stays stored as open
        turns, which the next start answers."""
        timers = list(self._timers)
        for task in timers:
            task.cancel()
        if timers:
            await asyncio.gather(*timers, return_exceptions=True)
        return [(conversation_id, held.generation) for conversation_id, held in self._held.items()]

    async def _wait(self, conversation_id: int, generation: int) -> None:
        await self._sleep(self.seconds)
        held = self._held.get(conversation_id)
        if held is not None and held.generation == generation:
            self._on_quiet(conversation_id, generation)

    def _ended(self, task: asyncio.Task[None]) -> None:
        self._timers.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("a burst's window failed (%s)", type(task.exception()).__name__)
