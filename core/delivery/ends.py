"""Sends of a private interval's deliveries, each no longer than its interval lives.

The store picks no delivery of an interval that has ended; this bounds the send that was picked
before: a platform's adapter may hold a send for seconds (Telegram's retries of a 502, discord.py's
own retries of a 5xx). A send of a private interval's delivery is cut off at the interval's expiry
(`OutboundDelivery.ends_at`), and cancelled when the interval ends otherwise (`IntervalSends.end`,
told by the valve through the outbox). A send picked before an end that came while it waited its
turn does not start.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from core.ports.chat import BaseSender
from core.ports.clock import Clock
from core.values.model import OutboundDelivery


class IntervalOver(Exception):
    """A private interval's delivery was not sent (or its send was cut off): the interval ended, by
    its expiry (`expired`) or otherwise."""

    def __init__(self, *, expired: bool) -> None:
        super().__init__("expired" if expired else "ended")
        self.expired = expired


class IntervalSends:
    """The sends of private intervals' deliveries running now, by conversation, and how many ends
    each conversation has seen."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._running: dict[int, set[_Send]] = {}
        self._ends: dict[int, int] = {}

    def ends(self, conversation_id: int) -> int:
        """How many ends of the conversation's intervals this process was told of: taken when a
        delivery is picked, and compared before its send starts."""
        return self._ends.get(conversation_id, 0)

    def end(self, conversation_id: int) -> None:
        """An interval of the conversation ended: every send of its intervals running now is cancelled."""
        self._ends[conversation_id] = self.ends(conversation_id) + 1
        for send in self._running.get(conversation_id, set()):
            send.end()

    async def send(self, sender: BaseSender, delivery: OutboundDelivery, ends: int | None) -> int:
        """`sender.send_delivery(delivery)`; for a private interval's delivery, only while the interval
        is open: not after its expiry (a send running then, its own retries included, is cancelled),
        and cancelled when the interval ends otherwise (`end`). `ends`: `ends()` of its conversation
        when the delivery was picked (None: not looked at).

        Raises:
            IntervalOver: the interval ended before or during the send.
        """
        if delivery.segment_id is None:
            return await sender.send_delivery(delivery)
        send = _Send()
        running = self._running.setdefault(delivery.conversation_id, set())
        running.add(send)  # before the look below: an end from now on cancels it
        try:
            left = None if delivery.ends_at is None else delivery.ends_at - self._clock.now()
            if left is not None and left <= 0:
                raise IntervalOver(expired=True)
            if ends is not None and self.ends(delivery.conversation_id) != ends:
                raise IntervalOver(expired=False)
            task = send.start(sender.send_delivery(delivery))
            try:
                done, _ = await asyncio.wait({task}, timeout=left)
            except asyncio.CancelledError:
                task.cancel()
                raise
            if not done:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                raise IntervalOver(expired=True)
            if send.ended and task.cancelled():
                raise IntervalOver(expired=False)
            return task.result()
        finally:
            running.discard(send)
            if not running:
                self._running.pop(delivery.conversation_id, None)


class _Send:
    """One send of a private interval's delivery, cancelled if the interval ends while it runs."""

    def __init__(self) -> None:
        self.ended = False
        self._task: asyncio.Future[int] | None = None

    def start(self, send: Awaitable[int]) -> asyncio.Future[int]:
        self._task = asyncio.ensure_future(send)
        return self._task

    def end(self) -> None:
        self.ended = True
        if self._task is not None:
            self._task.cancel()
