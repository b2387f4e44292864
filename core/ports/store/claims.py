"""The port of chat claims on a shared database (issue 33, COMPANION_SHARED_DATABASE): which process answers a
conversation now. adapters.storage.claims.ClaimQueries implements it; a process alone on its database has none.

The contract, for every consumer (the turn's entry, start-up recovery, an inbox that takes rows "only of chats I
hold or can claim"): call `claim(conversation_id)` before a conversation's event is handled; handle it only when
a Claim comes back, and when that Claim says `taken_over`, run the conversation's crash recovery first
(core/turn/recovery.py `Recovery.taken_over`). The store's fence refuses this process's writes into a
conversation once another process holds it (ClaimLost).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Claim:
    """This process holds `conversation_id` under `fence` (incremented at each take-over). `taken_over`: it was
    held by a process that died or stopped, whose crash recovery of it is owed now."""

    conversation_id: int
    fence: int
    taken_over: bool


class ChatClaims(Protocol):
    """Claims of conversations by the live processes of one shared database."""

    async def claim(self, conversation_id: int) -> Claim | None:
        """Hold the conversation: already held by this process, claimed for the first time, or taken over from
        a holder that is dead (or gone).

        Returns:
            The claim, or None when another live process holds it (the event is not handled here).
        """
        ...

    async def take_over_dead(self, platforms: frozenset[str] | None = None) -> list[Claim]:
        """Take over every claim whose holder is dead or gone (at start, then on a schedule), of conversations on
        `platforms` (what this process receives events of; None: all): each comes back `taken_over`, its crash
        recovery owed. A conversation of a platform this process does not serve is left to one that does."""
        ...

    async def held_elsewhere(self, platform: str) -> int:
        """How many conversations of `platform` a live process other than this one holds (a process whose
        connection to the platform this one took, still stopping)."""
        ...

    def holds(self, conversation_id: int) -> bool:
        """Whether this process claimed the conversation since it started (no round trip)."""
        ...
