"""The mode state's ports: open segments (private intervals), their ends and their expiry
(adapters.storage.modes.ModeQueries implements all)."""

from __future__ import annotations

from typing import Protocol

from core.values.model import Segment


class OpenSegmentRead(Protocol):
    """Whether a conversation is in private mode now, as stored (commands, the `/context` preview)."""

    async def open_segment_of(self, conversation_id: int) -> Segment | None: ...


class SegmentExpiry(Protocol):
    """Deleting the intervals whose expiry passed, with everything they hold."""

    async def delete_expired_segments(self, now: float) -> int: ...


class ModeStore(OpenSegmentRead, SegmentExpiry, Protocol):
    """What the valve reads and changes (core.privacy.valve.ModeValve)."""

    async def open_segment(self, conversation_id: int, now: float, expires_at: float | None) -> Segment: ...

    async def close_segment(self, segment_id: int, now: float, reason: str) -> bool: ...

    async def close_open_segments(self, conversation_id: int, now: float, reason: str) -> int: ...


class CrashModes(SegmentExpiry, Protocol):
    """Crash semantics at start-up and a restart's judgement of late events (core.turn.recovery.Recovery)."""

    async def close_crash_open_segments(
        self, platforms: frozenset[str] | None = None, now: float | None = None
    ) -> list[int]: ...

    async def close_taken_over(self, conversation_ids: list[int], now: float) -> list[int]:
        """Close as a restart does the open segments of conversations taken over from a process that died or
        stopped (a shared database); returns those closed."""
        ...

    async def restart_segment_for(self, conversation_id: int, sent_at: float) -> int | None: ...


class IntervalList(Protocol):
    """The private intervals that still exist, by their times (the owner's pages)."""

    async def private_intervals(self, conversation_id: int, now: float) -> list[Segment]:
        """The conversation's private intervals that still exist (open, or ended and not expired by
        `now`), oldest first: their times only, never a row of what they hold."""
        ...
