"""The outbox's ports: delivery rows read and marked, and the messages a reply streamed into
(adapters.storage.outbox.OutboxQueries implements both)."""

from __future__ import annotations

from typing import Protocol

from core.values.model import DeliveryTarget, OutboundDelivery, StreamedReply


class StreamMarks(Protocol):
    """What a reply shown while written remembers (core.delivery.streams.StreamShow)."""

    async def record_streamed(self, delivery_id: int, message_ids: tuple[str, ...]) -> None:
        """Remember the platform ids of the messages a reply streamed into (durable: after a crash,
        the reply's final send edits them)."""
        ...


class OutboxStore(StreamMarks, Protocol):
    """Delivery rows: read what is pending, mark what happened. Rows are written by the
    timeline's `record_reply`, in the transaction of what they carry. A lane is one
    conversation's deliveries to one (platform, chat): they go out in order."""

    async def lane_of(self, delivery_id: int) -> tuple[str, str] | None: ...

    async def pending_of(self, conversation_id: int, upto: int, now: float) -> list[OutboundDelivery]:
        """The pending deliveries of the lane of `upto` (its conversation, platform and chat) up to
        it, oldest first; never one whose interval has ended (closed, expired by `now`, deleted)."""
        ...

    async def due(
        self, platforms: frozenset[str], now: float, untried_after: float = 0.0, limit: int = 200
    ) -> list[tuple[int, int]]:
        """(conversation, newest due delivery id) of each lane with a pending delivery due `now`;
        never one whose interval has ended (closed, expired by `now`, deleted)."""
        ...

    async def mark_sent(self, delivery_id: int, parts_sent: int, now: float) -> None: ...

    async def mark_retry(self, delivery_id: int, parts_sent: int, error: str, next_attempt_at: float) -> None: ...

    async def mark_failed(self, delivery_id: int, parts_sent: int, error: str, now: float) -> None: ...

    async def append_text(self, delivery_id: int, suffix: str) -> None: ...

    async def give_up_mirror(
        self, delivery_id: int, parts_sent: int, error: str, now: float, notice: str
    ) -> int | None:
        """Settle a mirror refused for good, disable its binding and, the first time only, queue
        `notice` to the source conversation. Returns the notice's delivery id, or None."""
        ...

    async def prune_settled(self, before: float) -> int: ...

    async def open_stream(
        self, conversation_id: int, target: DeliveryTarget, now: float, *, segment_id: int | None
    ) -> StreamedReply:
        """Write the delivery row of a reply about to be shown while the model writes it: status
        'streaming', no text (partial text is stored nowhere), in the interval `segment_id`, carrying
        that interval's expiry (`StreamedReply.ends_at`).

        Raises:
            core.values.errors.IntervalEnded: that interval is no longer open at `now`.
        """
        ...

    async def may_stream(self, delivery_id: int, now: float) -> bool:
        """Whether a streaming row may be shown now: it is still streaming (its reply is not written
        yet), its interval (if any) is open at `now`, and no earlier delivery of its lane waits to be
        sent (its messages would come first)."""
        ...

    async def retract(
        self, delivery_id: int, conversation_id: int, target: DeliveryTarget, shown: tuple[str, ...], now: float
    ) -> OutboundDelivery | None:
        """A private answer's row whose interval ended (by `now`) while it was shown (`shown`: the
        messages posted) or sent: it becomes their retraction, the constant line that edits them once
        and belongs to no interval. Nothing changes while its interval is open.

        Returns:
            The retraction to send, or None (nothing was shown, or the row is settled).
        """
        ...

    async def retractions(self, conversation_id: int | None = None) -> list[tuple[int, int]]:
        """(conversation, delivery) of each retraction waiting to be sent (of one conversation, or all)."""
        ...

    async def left_stream(self, conversation_id: int, before: float) -> int | None:
        """The streaming row a process that stopped before `before` left in the conversation."""
        ...

    async def cut_off_streams(self, before: float, text: str, now: float) -> list[tuple[int, int]]:
        """Settle the streaming rows left before `before` that no answer took over: those that
        showed a message become pending deliveries of `text` (their messages are edited into it);
        the others are deleted. Returns (conversation, delivery) of the pending ones."""
        ...
