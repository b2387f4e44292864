"""The mode of one turn as a typed value: normal, or private inside its open segment."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from core.values.model import Mode, Segment


@dataclass(frozen=True, slots=True)
class NormalState:
    """A turn in normal mode. `notice` tells the person that automation just ended private mode."""

    notice: str | None = None
    # The mode could not be read (store error or timeout): normal mode, and the message that
    # asked is not used at all, since it may have been meant for an open private interval.
    unreadable: bool = False
    # Not read but assumed (the gate's fast path for a message of a conversation last read normal):
    # the write that stores the message is refused whole when a segment is open (in SQL, in the same
    # trip), and the event is then given the mode read as usual. Nothing is written in it before that.
    assumed: bool = False

    mode: ClassVar[Mode] = Mode.NORMAL
    is_private: ClassVar[bool] = False
    segment_id: ClassVar[None] = None


@dataclass(frozen=True, slots=True)
class PrivateState:
    """A turn in private mode, inside its open segment: the type proves a private turn has one."""

    segment: Segment

    mode: ClassVar[Mode] = Mode.PRIVATE
    is_private: ClassVar[bool] = True
    notice: ClassVar[None] = None
    unreadable: ClassVar[bool] = False
    assumed: ClassVar[bool] = False

    @property
    def segment_id(self) -> int:
        return self.segment.id


ModeState = NormalState | PrivateState

NORMAL = NormalState()
UNREADABLE = NormalState(unreadable=True)
ASSUMED_NORMAL = NormalState(assumed=True)


def with_notice(state: ModeState, text: str) -> str:
    """`text`, after the notice that automation just ended private mode, if there is one."""
    return f"{state.notice}\n\n{text}" if state.notice else text
