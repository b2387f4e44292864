"""Ports the core depends on; adapters implement them, tests pass fakes of the same shape. A chat
platform's three parts are in core/ports/chat.py, re-exported here."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol

from core.ports.chat import AdapterStateStore as AdapterStateStore
from core.ports.chat import BaseIntake as BaseIntake
from core.ports.chat import BaseSender as BaseSender
from core.ports.chat import BaseStreamer as BaseStreamer
from core.ports.chat import ChatCore as ChatCore
from core.ports.chat import ChatSender as ChatSender
from core.ports.chat import Platform as Platform
from core.values.model import (
    Account,
    Binding,
    ChatMove,
    Completion,
    CompletionRequest,
    Conversation,
    ConversationKey,
    DeliveryTarget,
    EditableMessage,
    FollowUp,
    Goal,
    MirrorOf,
    Note,
    OpenTurn,
    OutboundDelivery,
    PadEntry,
    Partial,
    PendingCapture,
    PendingLinkCode,
    ProactiveCandidate,
    ProactiveDecision,
    ProactivePrefs,
    ProactiveSent,
    QuotedMessage,
    RecallHit,
    RecordedReply,
    RunRecord,
    Segment,
    StreamedReply,
    Summary,
    TimelineItem,
)

# Where a streamed completion goes while the model writes it (core/turn/streaming.py): awaited with
# each new state of the answer. It never waits on a platform.
PartialSink = Callable[[Partial], Awaitable[None]]


class BaseProvider(Protocol):
    """A language model behind a chat-completions interface."""

    name: str

    async def complete(self, request: CompletionRequest, *, partial: PartialSink | None = None) -> Completion:
        """Return one completion for `request`.

        Args:
            partial: where the answer goes while the model writes it (its text so far, and whether
                a tool call began), when the server streams; a provider that cannot stream never
                calls it. The returned completion is the whole answer either way.
        Raises:
            core.values.errors.ProviderError: any failure, already translated by the adapter.
        """
        ...

    async def request_body(self, request: CompletionRequest, *, streamed: bool = False) -> bytes | None:
        """What `complete(request)` (with a `partial` sink when `streamed`) would send for it now,
        built by the same code and sending nothing (the `/context` page shows it: what normal mode sees).

        Returns:
            The exact bytes of the request body `complete` would send now (each retry sends the
            same), given what the provider has learnt of its server so far (tools or images it
            refused are left out); None when nothing would leave the process (the offline
            responder reads the request in memory).
        """
        ...

    async def aclose(self) -> None:
        """Release connections; safe to call twice."""
        ...


class Transcriber(Protocol):
    """Speech to text (an OpenAI-compatible `/audio/transcriptions` server)."""

    name: str

    async def transcribe(self, audio: bytes, *, filename: str, mime_type: str) -> str:
        """Return the words spoken in `audio` (held in memory only; nothing stores it).

        Raises:
            core.values.errors.TranscriptionFailed: any failure, already translated by the adapter.
        """
        ...

    async def aclose(self) -> None:
        """Release connections; safe to call twice."""
        ...


class OutboxStore(Protocol):
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

    async def record_streamed(self, delivery_id: int, message_ids: tuple[str, ...]) -> None:
        """Remember the platform ids of the messages a reply streamed into (durable: after a crash,
        the reply's final send edits them)."""
        ...

    async def left_stream(self, conversation_id: int, before: float) -> int | None:
        """The streaming row a process that stopped before `before` left in the conversation."""
        ...

    async def cut_off_streams(self, before: float, text: str, now: float) -> list[tuple[int, int]]:
        """Settle the streaming rows left before `before` that no answer took over: those that
        showed a message become pending deliveries of `text` (their messages are edited into it);
        the others are deleted. Returns (conversation, delivery) of the pending ones."""
        ...


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch."""
        ...


class SystemClock:
    def now(self) -> float:
        return time.time()


class Metrics(Protocol):
    """What an operator may count (GET /metrics). Every label is a kind from a small fixed set:
    never an id of a chat, a person or a message, and never the mode. Only paths that exist for
    every update alike (intake) or only for normal turns (the run record, deliveries outside a
    segment, proactive decisions that are not 'private') call these, so a private turn moves no
    counter that a normal one would not move as well."""

    def update_received(self, platform: str) -> None:
        """An inbound event reached the core (any mode: intake cannot tell, and must not)."""
        ...

    def turn_finished(self, outcome: str) -> None:
        """A normal turn ended: `ok` or `error`."""
        ...

    def model_request(
        self, outcome: str, seconds: float, prompt_tokens: int | None, completion_tokens: int | None
    ) -> None:
        """A normal turn's model request ended (`ok`, `cut_off` or `error`) after `seconds`."""
        ...

    def delivery_settled(self, kind: str, state: str) -> None:
        """A delivery outside any segment was `sent`, `retried` or `failed`; `kind` reply, mirror, reminder or nudge."""
        ...

    def send_error(self, reason: str) -> None:
        """A send of a delivery outside any segment failed; `reason` is the failure's kind."""
        ...

    def nudge_decision(self, kind: str, outcome: str) -> None:
        """A proactive decision was recorded (`sent`, `silent`, `skipped`, `missed`); never one of private mode."""
        ...

    def database_write(self, what: str, seconds: float) -> None:
        """A write transaction took `seconds`: `reply` (a normal turn's reply, run and delivery) or `probe`."""
        ...


class NoMetrics:
    """Counts nothing: `companion chat`, the tests, and a gateway without the HTTP service."""

    def update_received(self, platform: str) -> None:
        pass

    def turn_finished(self, outcome: str) -> None:
        pass

    def model_request(
        self, outcome: str, seconds: float, prompt_tokens: int | None, completion_tokens: int | None
    ) -> None:
        pass

    def delivery_settled(self, kind: str, state: str) -> None:
        pass

    def send_error(self, reason: str) -> None:
        pass

    def nudge_decision(self, kind: str, outcome: str) -> None:
        pass

    def database_write(self, what: str, seconds: float) -> None:
        pass


NO_METRICS = NoMetrics()


class TimelineStore(Protocol):
    """People, conversations, the timeline and its views, summaries and pads."""

    async def ensure_account(self, platform: str, user_id: str, display_name: str | None, now: float) -> Account: ...

    async def ensure_conversation(
        self, key: ConversationKey, kind: str, person_id: int | None, now: float
    ) -> Conversation: ...

    async def conversation_at(self, key: ConversationKey) -> Conversation | None:
        """The conversation of one chat, if it began; None otherwise (nothing is created)."""
        ...

    async def conversations_of(self, person_id: int) -> list[Conversation]:
        """The person's direct conversations on every platform (linked accounts included), oldest first."""
        ...

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
    ) -> int | None:
        """Store a user's chat message as an open turn, keyed by its platform id (the inbox).
        `said`: the person's own words when `text` holds more (quote and forward lines), the
        only part of it a mirror copies. Returns None when it is stored already (a redelivery)."""
        ...

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

    async def open_turns(self, platforms: frozenset[str] | None) -> list[OpenTurn]: ...

    async def turn_is_open(self, message_id: int) -> bool: ...

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

    async def has_items_before(
        self, conversation_id: int, *, visible_segment: int | None, after: int, before: int, at_least: int
    ) -> bool: ...

    async def normal_summary(self, conversation_id: int) -> Summary | None: ...

    async def private_summary(self, segment_id: int) -> Summary | None: ...

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

    async def normal_pad(self, person_id: int) -> list[PadEntry]: ...

    async def private_pad(self, person_id: int, conversation_id: int | None = None) -> list[PadEntry]: ...


class ModeStore(Protocol):
    """The mode state (open segments) and the valve's attempt log."""

    async def open_segment(self, conversation_id: int, now: float, expires_at: float | None) -> Segment: ...

    async def open_segment_of(self, conversation_id: int) -> Segment | None: ...

    async def close_segment(self, segment_id: int, now: float, reason: str) -> bool: ...

    async def close_open_segments(self, conversation_id: int, now: float, reason: str) -> int: ...

    async def close_crash_open_segments(
        self, platforms: frozenset[str] | None = None, now: float | None = None
    ) -> list[int]: ...

    async def restart_segment_for(self, conversation_id: int, sent_at: float) -> int | None: ...

    async def delete_expired_segments(self, now: float) -> int: ...

    async def private_intervals(self, conversation_id: int, now: float) -> list[Segment]:
        """The conversation's private intervals that still exist (open, or ended and not expired by
        `now`), oldest first: their times only, never a row of what they hold."""
        ...

    async def failed_attempts_since(self, account_id: int, since: float) -> list[float]: ...

    async def record_failed_attempt(self, account_id: int, now: float, keep_after: float) -> None: ...

    async def clear_failed_attempts(self, account_id: int) -> None: ...


class MemoryStore(Protocol):
    """Normal-mode memory. Every lasting write (adding, changing or forgetting memory, goals
    and follow-ups; a run; a tool operation outside a segment) raises PrivateWriteRefused
    while the originating conversation (`origin`) has an open segment, and changes nothing;
    a False or 0 result means only that there was nothing to change."""

    async def remember(self, person_id: int, origin: int, text: str, now: float) -> int: ...

    async def forget_pad_entry(self, person_id: int, origin: int, entry_id: int) -> int: ...

    async def forget_pad_matching(self, person_id: int, origin: int, text: str) -> int: ...

    async def recall(self, person_id: int, match: str, limit: int = 8) -> list[RecallHit]: ...

    async def add_goal(self, person_id: int, origin: int, title: str, due_at: float | None, now: float) -> int: ...

    async def goals(self, person_id: int, *, include_closed: bool = False) -> list[Goal]: ...

    async def update_goal(
        self,
        person_id: int,
        origin: int,
        goal_id: int,
        now: float,
        *,
        status: str | None = None,
        title: str | None = None,
    ) -> bool: ...

    async def add_followup(
        self, person_id: int, origin: int, kind: str, text: str, due_at: float | None, now: float
    ) -> int: ...

    async def followups(self, person_id: int) -> list[FollowUp]: ...

    async def set_followup_status(
        self, person_id: int, origin: int, followup_id: int, status: str, now: float
    ) -> bool: ...

    async def record_tool_operation(
        self,
        conversation_id: int,
        segment_id: int | None,
        tool: str,
        status: str,
        args_bytes: int,
        result_bytes: int,
        now: float,
    ) -> None: ...

    async def pending_capture(self, limit: int) -> list[PendingCapture]: ...

    async def save_capture(
        self, person_id: int, day: str, note: str, facts: tuple[str, ...], message_ids: list[int], now: float
    ) -> int: ...

    async def notes(self, person_id: int, limit: int = 20) -> list[Note]:
        """The person's newest daily notes, newest first (made from normal messages only)."""
        ...

    async def forget_note(self, person_id: int, origin: int, note_id: int) -> int:
        """Delete one of the person's daily notes (and its recall entry); 0: no such note."""
        ...

    async def skip_capture(self, message_ids: list[int]) -> None: ...

    async def save_run(self, run: RunRecord) -> None: ...


class LifetimeStore(Protocol):
    """Forgetting, export and confirmed crossings."""

    async def delete_segments_of(self, conversation_id: int, now: float) -> int: ...

    async def delete_expired_artifacts(self, now: float) -> int: ...

    def export_items(self, conversation_id: int, *, visible_segment: int | None) -> AsyncIterator[TimelineItem]: ...

    async def segment_items(self, segment_id: int) -> list[TimelineItem]: ...

    async def request_crossing(self, segment_id: int, destination: str, now: float, confirm_by: float) -> int: ...

    async def confirm_crossing(
        self,
        segment_id: int,
        conversation_id: int,
        filename: str,
        content: str,
        now: float,
        expires_at: float | None,
    ) -> int | None: ...


class BindingStore(Protocol):
    """Mirrors: bindings of a conversation's normal output to other chats. A binding holds no text."""

    async def add_binding(self, conversation_id: int, platform: str, chat_id: str, now: float) -> Binding:
        """Bind (or bind again) the conversation to a chat.

        Raises:
            core.values.errors.PrivateWriteRefused: the conversation has an open segment; the write's
                own SQL refused it, whoever called.
        """
        ...

    async def bindings_of(self, conversation_id: int) -> list[Binding]: ...

    async def remove_binding(self, conversation_id: int, binding_id: int) -> Binding | None:
        """Remove one binding of the conversation with its pending copies; None: no such binding."""
        ...


class ProactiveStore(Protocol):
    """Reminders and nudges: what is due (never for a conversation with an open segment, by the
    SQL), the claim that writes a message with its delivery, the decision record (no text) and
    each person's manners."""

    async def due_candidates(
        self,
        now: float,
        platforms: frozenset[str],
        *,
        watch_after: float,
        goal_every: float,
        checkin_after: float,
        limit: int = 500,
    ) -> list[ProactiveCandidate]:
        """What is due now for people reachable on `platforms`, oldest first per kind. The SQL
        excludes every person with an open segment in any conversation, groups, and any
        conversation that is not direct."""
        ...

    async def waiting_in_private(
        self,
        now: float,
        *,
        watch_after: float = 3600.0,
        goal_every: float = 3 * 86400.0,
        checkin_after: float = 3 * 86400.0,
        limit: int = 500,
    ) -> list[tuple[int, int, str, int]]:
        """(person, open segment, kind, item id) of what is due now (follow-ups, goal check-ins,
        open check-ins) whose person is in private mode: ids only, for the 'private' decision
        (they wait). Reads no message, pad or any row of the segment."""
        ...

    async def nudges_sent_on(self, person_id: int, local_day: str) -> int: ...

    async def latest_decisions(self, person_id: int, limit: int = 20) -> list[ProactiveDecision]:
        """The person's newest decisions, newest first: kinds, outcomes and reasons (no text), never
        one of private mode (those name their segment, and go with it)."""
        ...

    async def record_decision(self, decision: ProactiveDecision) -> bool:
        """Record a decision; a skip repeating the subject's latest decision is not recorded
        again. Returns whether a row was written."""
        ...

    async def claim_and_send(
        self,
        candidate: ProactiveCandidate,
        text: str,
        decision: ProactiveDecision,
        mirror_label: str,
    ) -> ProactiveSent | None:
        """One transaction: claim the candidate (it must still be due and its person must have no
        open segment), store `text` as a normal assistant message in the candidate's
        conversation, write its delivery (kind reminder or nudge) and mirror rows, the person's
        nudge state and `decision`. Returns None (nothing written) when it was claimed already
        or the person is in private mode now."""
        ...

    async def settle_without_message(self, candidate: ProactiveCandidate, decision: ProactiveDecision) -> bool:
        """Claim the candidate with no message (silence, or a missed reminder) and record
        `decision`, in one transaction. Returns False when it was claimed already."""
        ...

    async def proactive_prefs(self, person_id: int) -> ProactivePrefs: ...

    async def set_proactive_pref(
        self, person_id: int, origin: int, name: str, value: float | str | None
    ) -> ProactivePrefs:
        """Change one manner (`name`: budget, quiet, timezone, pinned_conversation_id or cooldown; None:
        back to the default) and return them all.

        Raises:
            core.values.errors.PrivateWriteRefused: the conversation `origin` has an open segment.
        """
        ...


class LinkStore(Protocol):
    """Linked accounts: pending one-time codes (hashes only), their lockout log, and merging two
    people into one in one transaction (pad, notes, recall, goals, follow-ups, manners; nothing
    lost, nothing duplicated). Linking and unlinking raise PrivateWriteRefused, changing nothing,
    while any conversation of the people concerned has an open segment."""

    async def save_link_code(self, account_id: int, code_hash: str, now: float, expires_at: float) -> None: ...

    async def pending_link_codes(self, now: float) -> list[PendingLinkCode]: ...

    async def redeem_link_code(self, code_id: int, account_id: int, now: float) -> int | None:
        """Use up the code and merge the person of `account_id` into that of the code's account.

        Returns:
            The person now holding both accounts; None when the code was used or expired.
        Raises:
            core.values.errors.PrivateWriteRefused: either person is in private mode somewhere.
        """
        ...

    async def merge_accounts(self, into_account_id: int, account_id: int, now: float) -> int: ...

    async def failed_link_attempts_since(self, account_id: int, since: float) -> list[float]: ...

    async def record_failed_link_attempt(self, account_id: int, now: float, keep_after: float) -> None: ...

    async def clear_failed_link_attempts(self, account_id: int) -> None: ...

    async def accounts_of(self, person_id: int) -> list[Account]: ...

    async def memory_origins(self, person_id: int) -> dict[str, Account]:
        """Which account each normal memory (`pad:ID`), goal (`goal:ID`) and follow-up
        (`followup:ID`) of the person was said from: the account of the direct conversation it
        came from. Ids only; what is not known (a group, a capture from two chats) is absent."""
        ...

    async def unlink_account(self, person_id: int, platform: str, now: float) -> Account | None:
        """Separate the person's account on `platform` into a new person with no memory.

        Returns:
            The account with its new person; None when there is no such account or it is the only one.
        Raises:
            core.values.errors.PrivateWriteRefused: a conversation of the person is in private mode.
        """
        ...


class ChatStore(Protocol):
    """Chats a platform moved to a new id (a Telegram group upgraded to a supergroup)."""

    async def move_chat(self, platform: str, old_chat_id: str, new_chat_id: str, now: float) -> ChatMove:
        """In one transaction: the conversation of the old chat takes the new id (merging in one
        begun under the new id already: the older conversation keeps its id and history), and the
        bindings and pending deliveries naming the old chat name the new one. Only group
        conversations that never had a private segment move; anything else is refused unchanged.

        Returns:
            What changed (nothing, when the move happened already).
        """
        ...


class QuoteStore(Protocol):
    """Quotes and edits (issue 15): each read names the mode it reads for, inside its SQL."""

    async def quoted_message(
        self, conversation_id: int, platform_message_id: str, *, visible_segment: int | None
    ) -> QuotedMessage | None:
        """The stored message with this platform id, its text only when the mode that lives in
        `visible_segment` (None: normal mode) may read it. None: no such message is stored."""
        ...

    async def visible_texts(
        self, conversation_id: int, role: str, *, visible_segment: int | None, limit: int
    ) -> list[str]:
        """The newest `limit` chat texts of `role` that this mode may read, newest first."""
        ...

    async def conversation_of_chat(self, platform: str, chat_id: str) -> int | None:
        """The conversation of a chat, if there is one (where a forwarded message came from)."""
        ...

    async def private_interval_at(
        self, conversation_id: int, sent_at: float, *, visible_segment: int | None, margin: float
    ) -> bool:
        """Whether a message sent at `sent_at` (platform time, give or take `margin` seconds) may
        belong to a private interval of the conversation that the mode living in `visible_segment`
        (None: normal mode) may not read. Says nothing else of the interval."""
        ...

    async def editable_message(
        self, conversation_id: int, platform_message_id: str, now: float
    ) -> EditableMessage | None:
        """The user chat message an edit names, unless it is gone or its interval expired."""
        ...

    async def edit_message(
        self, message_id: int, segment_id: int | None, text: str, now: float, *, said: str | None = None
    ) -> bool:
        """Replace a user chat message's text in its own mode and segment (and the recall index).
        False: it is gone, or its interval expired meanwhile; nothing changed."""
        ...

    async def answered_since(self, conversation_id: int, message_id: int, since: float) -> bool:
        """Whether `message_id` is the conversation's newest user message and was answered at `since` or later."""
        ...


class BaseStore(
    TimelineStore,
    ModeStore,
    MemoryStore,
    LifetimeStore,
    BindingStore,
    AdapterStateStore,
    ProactiveStore,
    LinkStore,
    ChatStore,
    QuoteStore,
    Protocol,
):
    """Everything the core asks of storage; adapters.storage.sqlite.SqliteStore implements it."""
