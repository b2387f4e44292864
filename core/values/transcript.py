"""A chat's history and mode as a platform that keeps no history of its own draws them (the web chat);
core/turn/transcript.py reads them."""

from __future__ import annotations

from dataclasses import dataclass

from core.values.model import Mode, TimelineItem


@dataclass(frozen=True, slots=True)
class ChatMode:
    """A chat's mode now. In private mode, `segment_id` is its open interval and `ends_at` when
    private mode ends by itself at the latest (its expiry, or the idle timeout counted from the
    last message; None: neither applies)."""

    mode: Mode = Mode.NORMAL
    segment_id: int | None = None
    ends_at: float | None = None

    @property
    def is_private(self) -> bool:
        return self.mode is Mode.PRIVATE


@dataclass(frozen=True, slots=True)
class Transcript:
    """A conversation's newest items, oldest first, as `mode` reads them (a placeholder per masked
    interval); `conversation_id` is None when the chat never began."""

    conversation_id: int | None
    mode: Mode
    items: tuple[TimelineItem, ...]
    state: ChatMode = ChatMode()

    @property
    def message_ids(self) -> frozenset[int]:
        """The stored messages it shows (placeholders are not messages)."""
        return frozenset(item.position for item in self.items if not item.is_placeholder)
