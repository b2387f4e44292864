"""What the owner's web pages read and change: normal memory and settings, mirrors, the latest nudge
decisions, and the private intervals that still exist. Every change is a chat command.

Reads are normal mode's, whatever mode a conversation is in now: the normal pad (never a private
pad), daily notes, goals, follow-ups, bindings (which hold no text), nudge settings, the decisions
that are not private mode's (kinds, outcomes and reasons), and of each private interval its times
alone. A change runs the chat command that makes it (`/forget 3`, `/goal done 2`, `/unmirror 1`,
`/nudges off`, `/forget private` ...) in its conversation's lane, in the mode the valve decides
there, through `CommandRunner.answer`: refused in private mode when it would outlive the interval,
then the store's own guard. So a page changes exactly what typing that command could, no more.
Person-wide changes (memory, notes, goals, follow-ups, nudges) run in the owner's web chat, as if
typed there; removing a mirror and `/forget private` run in the conversation they belong to. The
answer goes back to the page only: nothing of it is stored, and no chat receives it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from core.commands.call import Command
from core.commands.registry import command_info
from core.ports.clock import Clock
from core.ports.store.bindings import BindingList
from core.ports.store.memory import MemoryStore
from core.ports.store.modes import IntervalList
from core.ports.store.proactive import DecisionLog, PrefsReader
from core.ports.store.timeline import DirectConversations, PadReader
from core.privacy.valve import ModeValve
from core.proactive.manners import Manners, budget_of, cooldown_of, zone_of
from core.turn.commanding import CommandRunner
from core.turn.lanes import Lanes
from core.turn.people import People
from core.turn.responder import LaneKey
from core.values.model import (
    Account,
    Binding,
    Conversation,
    ConversationKey,
    FollowUp,
    Goal,
    InboundMessage,
    Note,
    PadEntry,
    ProactiveDecision,
    Turn,
)
from core.values.modes import with_notice

log = logging.getLogger(__name__)

# The commands a page may run: each changes (or removes) one thing the pages list.
PAGE_COMMANDS = frozenset({"forget", "goal", "followup", "unmirror", "nudges", "quiet", "cooldown", "timezone"})
NOTES_SHOWN = 50
DECISIONS_SHOWN = 20


class NotTheOwners(LookupError):
    """The page named a conversation that is not one of the owner's (or no longer exists)."""


@dataclass(frozen=True, slots=True)
class NudgeSettings:
    """The owner's nudge settings in effect (their own, else the configured defaults)."""

    budget: int  # nudges a day; 0: off
    quiet: str  # 'HH:MM-HH:MM' or 'off'
    timezone: str
    cooldown: float  # seconds between two nudges; 0: none
    pinned: bool  # `/nudges here`: they go to one chat, not the one last written in


@dataclass(frozen=True, slots=True)
class Mirrors:
    conversation: Conversation
    bindings: tuple[Binding, ...]


@dataclass(frozen=True, slots=True)
class OwnerMemory:
    """What the memory page shows; `timezone` is the one its times are read in."""

    pad: tuple[PadEntry, ...]
    notes: tuple[Note, ...]
    goals: tuple[Goal, ...]
    followups: tuple[FollowUp, ...]
    mirrors: tuple[Mirrors, ...]
    nudges: NudgeSettings
    decisions: tuple[ProactiveDecision, ...]
    timezone: str


@dataclass(frozen=True, slots=True)
class Interval:
    """A private interval by its times alone. `private_until`: while it is open, when private mode
    ends by itself at the latest; `deleted_at`: its expiry (None: never)."""

    id: int
    started_at: float
    is_open: bool
    private_until: float | None
    deleted_at: float | None


@dataclass(frozen=True, slots=True)
class ConversationIntervals:
    conversation: Conversation
    intervals: tuple[Interval, ...]


@dataclass(frozen=True, slots=True)
class OwnerReads:
    """What the owner's pages read of the store, each slice by name (bot/bootstrap.py passes each
    its query class): normal mode's reads only."""

    conversations: DirectConversations
    intervals: IntervalList  # their times only
    memory: MemoryStore  # notes, goals, follow-ups (every change is a command's)
    pads: PadReader  # the normal pad, never a private one
    prefs: PrefsReader
    decisions: DecisionLog  # never one of private mode
    bindings: BindingList


class OwnerControls:
    """The owner's pages' reads and changes; bot/bootstrap.py `owner_controls` builds it.

    Args:
        home, home_user: the owner's web chat (platform, chat) and its account's user id.
    """

    def __init__(
        self,
        reads: OwnerReads,
        clock: Clock,
        valve: ModeValve,
        people: People,
        lanes: Lanes[LaneKey],
        commands: CommandRunner,
        manners: Manners,
        *,
        home: ConversationKey,
        home_user: str,
    ) -> None:
        self._reads = reads
        self._clock = clock
        self._valve = valve
        self._people = people
        self._lanes = lanes
        self._commands = commands
        self._manners = manners
        self._home = InboundMessage(home.platform, home.chat_id, home_user, "", is_direct=True)

    async def home(self) -> tuple[Account, Conversation]:
        """The owner's web chat: its account and conversation (begun now if it never was)."""
        return await self._people.resolve(self._home)

    async def conversations(self) -> list[Conversation]:
        """The owner's one-to-one conversations on every platform, oldest first."""
        account, _ = await self.home()
        return await self._reads.conversations.conversations_of(account.person_id)

    async def timezone(self) -> str:
        account, _ = await self.home()
        prefs = await self._reads.prefs.proactive_prefs(account.person_id)
        return zone_of(prefs, self._manners).key

    async def memory(self) -> OwnerMemory:
        """Normal memory and settings, as normal mode reads them."""
        account, _ = await self.home()
        person, reads = account.person_id, self._reads
        prefs = await reads.prefs.proactive_prefs(person)
        conversations = await reads.conversations.conversations_of(person)
        mirrors = [Mirrors(c, tuple(await reads.bindings.bindings_of(c.id))) for c in conversations]
        return OwnerMemory(
            pad=tuple(await reads.pads.normal_pad(person)),
            notes=tuple(await reads.memory.notes(person, NOTES_SHOWN)),
            goals=tuple(await reads.memory.goals(person)),
            followups=tuple(await reads.memory.followups(person)),
            mirrors=tuple(m for m in mirrors if m.bindings),
            nudges=NudgeSettings(
                budget=budget_of(prefs, self._manners),
                quiet=prefs.quiet if prefs.quiet is not None else (self._manners.quiet_hours or "off"),
                timezone=zone_of(prefs, self._manners).key,
                cooldown=cooldown_of(prefs, self._manners),
                pinned=prefs.pinned_conversation_id is not None,
            ),
            decisions=tuple(await reads.decisions.latest_decisions(person, DECISIONS_SHOWN)),
            timezone=zone_of(prefs, self._manners).key,
        )

    async def intervals(self) -> list[ConversationIntervals]:
        """Each of the owner's conversations that has private intervals still existing, with their
        times: read, never settled (a page must not end private mode by looking at it)."""
        now = self._clock.now()
        found = []
        for conversation in await self.conversations():
            segments = await self._reads.intervals.private_intervals(conversation.id, now)
            if segments:
                intervals = tuple(
                    Interval(
                        s.id,
                        s.started_at,
                        s.ended_at is None,
                        self._valve.ends_at(s) if s.ended_at is None else None,
                        s.expires_at,
                    )
                    for s in segments
                )
                found.append(ConversationIntervals(conversation, intervals))
        return found

    async def run(self, name: str, args: str, conversation_id: int | None = None) -> str:
        """Run the chat command `/name args` for the owner and return its answer.

        Args:
            name: one of PAGE_COMMANDS.
            args: its arguments, as typed after the name.
            conversation_id: the conversation it runs in (one of the owner's); None: their web chat.
        Raises:
            ValueError: `name` is not a command a page may run.
            NotTheOwners: `conversation_id` is not one of the owner's conversations.
        """
        info = command_info(name)
        if name not in PAGE_COMMANDS or info is None:
            raise ValueError(f"/{name} is not run from a page")
        account, conversation = await self.home()
        if conversation_id is not None and conversation_id != conversation.id:
            owned = {c.id: c for c in await self._reads.conversations.conversations_of(account.person_id)}
            if conversation_id not in owned:
                raise NotTheOwners(f"conversation {conversation_id} is not the owner's")
            conversation = owned[conversation_id]
        key: LaneKey = (conversation.platform, conversation.chat_id)
        return await self._lanes.run(key, lambda: self._run(account, conversation, info, args))

    async def _run(self, account: Account, conversation: Conversation, info: Command, args: str) -> str:
        # The mode as the gate decides it for a typed command: the valve's, in the lane.
        state = await self._valve.settle(conversation)
        message = InboundMessage(
            conversation.platform,
            conversation.chat_id,
            account.platform_user_id,
            f"/{info.name} {args}".strip(),
            is_direct=conversation.is_direct,
        )
        reply = await self._commands.answer(Turn(message, account, conversation), info, args, state)
        log.info("conversation %s: /%s run from a page", conversation.id, info.name)
        return with_notice(state, reply.text)
