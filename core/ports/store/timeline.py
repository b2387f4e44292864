"""The timeline's ports: people and conversations, the inbox, the masked view, summaries, pads and
replies; each a slice one consumer calls (adapters.storage.timeline.TimelineQueries implements all)."""

from __future__ import annotations

from typing import Protocol

from core.values.model import (
    Account,
    ContextReads,
    Conversation,
    ConversationKey,
    DeliveryTarget,
    MirrorOf,
    OpenTurn,
    PadEntry,
    RecordedReply,
    RunRecord,
    Summary,
    TimelineItem,
)


class AccountStore(Protocol):
    """Who speaks and where (core.turn.people.People)."""

    async def ensure_account(self, platform: str, user_id: str, display_name: str | None, now: float) -> Account: ...

    async def ensure_conversation(
        self, key: ConversationKey, kind: str, person_id: int | None, now: float
    ) -> Conversation: ...


class DirectConversations(Protocol):
    """A person's one-to-one conversations (the `/context` preview, the owner's pages)."""

    async def conversations_of(self, person_id: int) -> list[Conversation]:
        """The person's direct conversations on every platform (linked accounts included), oldest first."""
        ...


class TimelineLog(Protocol):
    """Appending a message (commands, edits, recovery)."""

    async def add_message(
        self,
        conversation_id: int,
        role: str,
        text: str,
        now: float,
        *,
        segment_id: int | None = None,
        kind: str = "chat",
        account_id: int | None = None,
        run: RunRecord | None = None,
        platform_message_id: str | None = None,
    ) -> int | None:
        """Append a message; with a segment it is private and can only be 'skipped' for capture.
        Returns None when `platform_message_id` names a message stored already."""
        ...


class InboxStore(Protocol):
    """A user's chat message stored before the model is asked (core.turn.companion.Companion)."""

    async def add_inbound(
        self,
        conversation_id: int,
        text: str,
        now: float,
        *,
        segment_id: int | None,
        account_id: int | None,
        platform_message_id: str | None,
        said: str | None = None,
        assumed_normal: bool = False,
    ) -> int | None:
        """Store a user's chat message as an open turn, keyed by its platform id (the inbox).
        `said`: the person's own words when `text` holds more (quote and forward lines), the
        only part of it a mirror copies. Returns None when it is stored already (a redelivery).
        `assumed_normal`: the caller did not read the mode (normal, `segment_id` None): the write is
        refused whole while the conversation has a segment open.

        Raises:
            PrivateWriteRefused: `assumed_normal` and a segment of the conversation is open."""
        ...


class OpenTurnStore(InboxStore, TimelineLog, Protocol):
    """The turns a stop cut off, and storing what a restart keeps unread (core.turn.recovery.Recovery)."""

    async def open_turns(self, platforms: frozenset[str] | None) -> list[OpenTurn]: ...

    async def turn_is_open(self, message_id: int) -> bool: ...


class ReplyStore(Protocol):
    """Writing a reply with everything that goes with it (core.turn.responder.Responder)."""

    async def record_reply(
        self,
        conversation_id: int,
        send_text: str,
        now: float,
        *,
        stored_text: str | None = None,
        segment_id: int | None = None,
        run: RunRecord | None = None,
        answers: int | None = None,
        target: DeliveryTarget | None = None,
        mirror: MirrorOf | None = None,
        stream: int | None = None,
    ) -> RecordedReply:
        """One transaction: the assistant message, the run, the answered turns, the delivery and,
        with `mirror`, one mirror row per active binding, selected by SQL that excludes private
        messages and conversations with an open segment. With `stream` (a streaming row of the
        conversation in the same interval) that row becomes the delivery instead of a new one."""
        ...


class TimelineView(Protocol):
    """The conversation as one mode sees it."""

    async def view(
        self,
        conversation_id: int,
        *,
        visible_segment: int | None,
        after: int,
        upto: int | None = None,
        limit: int,
        newest_first: bool = True,
    ) -> list[TimelineItem]:
        """The conversation as one mode sees it: other segments as exactly one placeholder each."""
        ...


class TranscriptStore(TimelineView, Protocol):
    """A chat's history for a platform that keeps none (core.turn.transcript.Transcripts)."""

    async def conversation_at(self, key: ConversationKey) -> Conversation | None:
        """The conversation of one chat, if it began; None otherwise (nothing is created)."""
        ...


class PadReader(Protocol):
    """The normal pad (memory tools, the owner's pages)."""

    async def normal_pad(self, person_id: int) -> list[PadEntry]: ...


class ContextStore(TimelineView, Protocol):
    """What a model request is assembled from, and the summary fold (core.memory.context.ContextAssembler)."""

    async def context_reads(
        self, conversation_id: int, *, person_id: int | None, segment_id: int | None, limit: int, count_up_to: int
    ) -> ContextReads:
        """In one read (one snapshot): both summaries (the private one of `segment_id`), the normal pad of
        `person_id` and, with `segment_id`, the private pad of this conversation's intervals; the newest
        `limit` items of the view after the watermark of the summary the mode uses (the private one if it
        exists, else the normal one), and how many messages of that view lie after it (up to
        `count_up_to` per source: the view's normal messages, the segment's own)."""
        ...

    async def save_summary(
        self,
        conversation_id: int,
        summary: Summary,
        now: float,
        *,
        segment_id: int | None = None,
        pad_person_id: int | None = None,
        pad_facts: tuple[str, ...] = (),
    ) -> None: ...
