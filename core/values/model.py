"""Platform-neutral values that cross between adapters and the core."""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any


class Mode(enum.StrEnum):
    NORMAL = "normal"
    PRIVATE = "private"


@dataclass(frozen=True, slots=True)
class ConversationKey:
    """Identifies one chat on one platform (a DM, a group, a channel, the terminal)."""

    platform: str
    chat_id: str


@dataclass(frozen=True, slots=True)
class InboundMessage:
    """A message an adapter decided the companion should answer.

    `is_direct` is True only for a one-to-one chat between the user and the bot;
    private mode is possible only there.
    """

    platform: str
    chat_id: str
    user_id: str
    text: str
    is_direct: bool
    message_id: str | None = None  # the platform's id: the inbox key (None: no dedupe, e.g. terminal)
    user_name: str | None = None
    # The platform's timestamp (Telegram `date`, Discord snowflake time); an edit's is when it was edited.
    sent_at: float | None = None
    thread_id: str | None = None  # a forum topic or thread the reply belongs in
    media: tuple[Media, ...] = ()  # photos, voice notes, stickers ...; `text` is then their caption
    # Quotes, forwards, edits (issue 15); core/turn/quotes.py turns them into the stored text.
    reply_to_message_id: str | None = None  # the platform id of the message this one replies to
    quoted_text: str | None = None  # what the platform says that message (or the quoted part) holds
    quoted_from_companion: bool = False  # the replied-to message is one of the companion's own
    forwarded_from: str | None = None  # who a forwarded message comes from, as the platform names them
    # Where a forward may come from among the companion's own chats (issue 22): the chat of this
    # platform its message may have been in (Discord: its channel; Telegram: the person's DM with
    # the bot, when the origin is the person, the bot or hidden), its id there where the platform
    # says (Discord), and when it was first sent (Telegram's origin date, Discord's snowflake time).
    # core/turn/quotes.py reads it as the mode may: a private interval's message is the placeholder.
    forwarded_chat_id: str | None = None
    forwarded_message_id: str | None = None
    forwarded_at: float | None = None
    edited: bool = False  # a new version of the message `message_id` names
    # What only the edge knows of an event, kept in memory (never stored): the interaction an answer
    # must go to (a Discord slash command or button press: its id); `text` is a pressed button's raw
    # data, which the core's entry reads as the command it carries; read from the platform's history
    # after a restart (a stranger's message caught up this way gets no refusal).
    route: str | None = None
    pressed: bool = False
    caught_up: bool = False

    @property
    def key(self) -> ConversationKey:
        return ConversationKey(self.platform, self.chat_id)

    @property
    def account(self) -> str:
        return f"{self.platform}:{self.user_id}"


# Fetches a media item's bytes (size-capped by the adapter). Raises core.values.errors.MediaUnavailable.
MediaLoader = Callable[[], Awaitable[bytes]]


@dataclass(frozen=True, slots=True)
class Media:
    """One photo, voice note, sticker, document, location ... of an inbound message (core.turn.media).

    It holds no bytes: `load` fetches them, in memory, only when the core reads the item (an
    image for a vision model, a voice note for transcription); nothing stores them.
    """

    kind: str  # photo | voice | audio | video | video_note | animation | sticker | document | location | ...
    mime_type: str | None = None
    size: int | None = None  # bytes, as the platform declares them
    filename: str | None = None
    load: MediaLoader | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class ImageInput:
    """An image for one model request, in memory only: never stored, logged or recorded but by size."""

    mime_type: str
    data: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class Attachment:
    """A file the adapter should send with the reply (an export, for instance)."""

    filename: str
    data: bytes
    mime_type: str = "text/plain"


@dataclass(frozen=True, slots=True)
class Confirmation:
    """A question the person may answer with one button: pressing it is the same as typing
    `command` (which keeps working). Adapters draw it as the platform's button."""

    label: str  # the button's words
    command: str  # what a press sends, as typed: "/export confirm" (never a secret-carrying command)


@dataclass(slots=True)
class Reply:
    """What the core hands back for one inbound message.

    `delete_inbound`: the inbound message carried a secret; the adapter deletes it
    from the platform chat where it can, and otherwise appends `DELETE_SECRET_NOTE`.
    """

    text: str
    delete_inbound: bool = False
    attachments: list[Attachment] = field(default_factory=list)
    # The outbox row carrying `text`, when the platform sends through the outbox: the
    # adapter hands it to the outbox (send, then mark) instead of sending `text` itself.
    delivery_id: int | None = None
    conversation_id: int | None = None
    confirm: Confirmation | None = None  # a button under the reply (core.values.edge.button_data)
    # That row as written, when nothing earlier waited in its lane: the outbox sends it without reading it again.
    delivery: OutboundDelivery | None = None


@dataclass(frozen=True, slots=True)
class DeliveryTarget:
    """Where an outbound message goes: a chat, optionally as a reply to a platform message."""

    platform: str
    chat_id: str
    reply_to: str | None = None
    thread_id: str | None = None
    # The interaction the message answers (Discord), in memory only: the hand-off gives it to the
    # first send of a row; a retry or the next start sends to the chat (never stored).
    route: str | None = None


@dataclass(frozen=True, slots=True)
class OutboundDelivery:
    """One outbox row to send: `text` from part `parts_sent` on (earlier parts went out)."""

    id: int
    conversation_id: int
    kind: str  # reply | mirror | reminder | nudge
    target: DeliveryTarget
    nonce: str
    text: str
    parts_sent: int
    attempts: int
    # A reply inside a private thread (its row names the segment): the operator's metrics count it nowhere.
    in_segment: bool = False
    # The stored message it carries (in `conversation_id`); None for what is not stored (a command's answer).
    message_id: int | None = None
    # A reply shown while the model wrote it: the platform ids of the messages it streamed into, in
    # order. Its send edits them into the final text (continuing in new messages past them).
    streamed: tuple[str, ...] = ()
    # The private interval it belongs to (None: normal mode, or a retraction) and that interval's
    # expiry (None: none set): a send of it must not post anything at or after `ends_at`.
    segment_id: int | None = None
    ends_at: float | None = None
    # The constant line (copy.INTERVAL_ENDED_SHOWN) that replaces, once, the messages a private
    # answer showed before its interval ended; it belongs to no interval and is counted nowhere.
    retracts: bool = False
    # A button under its last part, given by the hand-off to the first send of the row only (in
    # memory: a retry or the next start sends it without; the typed command still works).
    confirm: Confirmation | None = None


@dataclass(frozen=True, slots=True)
class StreamedReply:
    """The delivery row of a reply shown while the model writes it (status 'streaming' until the
    reply is written): where it goes, and the nonce its messages are sent with."""

    delivery_id: int
    conversation_id: int
    target: DeliveryTarget
    nonce: str
    # The expiry of its private interval (None: normal mode, or no expiry): nothing of it is posted
    # or edited at or after this moment.
    ends_at: float | None = None


@dataclass(frozen=True, slots=True)
class MirrorOf:
    """Asks `record_reply` to copy the exchange (the user message `user_message_id` and the reply
    stored with it) to the conversation's active bindings, headed `[label]`; None: a reminder or
    nudge, copied alone. The store's SQL decides whether there is anything to copy: never for a
    private message or conversation."""

    user_message_id: int | None
    label: str  # the source's name, as `telegram DM`


@dataclass(frozen=True, slots=True)
class RecordedReply:
    """What `record_reply` wrote: the assistant message, its delivery, and its mirror rows."""

    message_id: int | None
    delivery_id: int | None
    mirror_ids: tuple[int, ...] = ()
    # The delivery as written, when it is a normal reply and no earlier pending row of its lane (its
    # conversation, platform and chat) waited, read in the same transaction; None otherwise.
    delivery: OutboundDelivery | None = None


@dataclass(frozen=True, slots=True)
class Binding:
    """A conversation's normal output copied to another chat; `reason` is a failure's kind."""

    id: int
    conversation_id: int
    platform: str
    chat_id: str
    state: str  # active | disabled
    reason: str | None
    created_at: float

    @property
    def target(self) -> str:
        return f"{self.platform}:{self.chat_id}"


# --- the model side -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text exactly as the model produced it


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One message of a provider request, in the OpenAI chat shape."""

    role: str  # system | user | assistant | tool
    content: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    images: tuple[ImageInput, ...] = ()  # a user message's images, for a vision model (this request only)


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True)
class CompletionRequest:
    """Everything the provider is given. `purpose` is reply, summary or transition."""

    messages: tuple[ChatMessage, ...]
    tools: tuple[ToolSpec, ...] = ()
    purpose: str = "reply"
    temperature: float | None = None
    max_tokens: int | None = None
    # The name of one of `tools` the model must call (tool_choice forced); None: the model chooses.
    force_tool: str | None = None
    # A private turn's request (decided from the mode at the turn's gate and carried): what the
    # provider and the context budget learn from it never shapes a normal request. Never sent.
    private: bool = False


@dataclass(frozen=True, slots=True)
class Partial:
    """What one streamed model answer holds so far: its text, and whether it began a tool call
    (`calling`; the call's name and arguments never leave the provider while it streams)."""

    text: str
    calling: bool = False


@dataclass(frozen=True, slots=True)
class Completion:
    """One model answer. `truncated`: the model stopped at `max_tokens` (finish_reason "length")."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    truncated: bool = False


# --- stored records ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Conversation:
    id: int
    platform: str
    chat_id: str
    kind: str  # direct | group
    person_id: int | None

    @property
    def is_direct(self) -> bool:
        return self.kind == "direct"


@dataclass(frozen=True, slots=True)
class Account:
    id: int
    person_id: int
    platform: str
    platform_user_id: str


@dataclass(frozen=True, slots=True)
class PendingLinkCode:
    """A `/link` code waiting to be used: whose it is and its slow hash (never the code)."""

    id: int
    account_id: int
    code_hash: str


@dataclass(frozen=True, slots=True)
class Segment:
    """One private interval of a conversation; `ended_at is None` means it is open."""

    id: int
    conversation_id: int
    anchor_message_id: int
    started_at: float
    last_activity_at: float
    ended_at: float | None
    end_reason: str | None
    expires_at: float | None


@dataclass(frozen=True, slots=True)
class TimelineItem:
    """One entry of a conversation view: a message, or the placeholder of a masked segment.

    For a placeholder, `text` is None, `role` is None and `masked_segment_id` names
    the segment; `position` is the segment's anchor, so it sorts right after the
    message that preceded the interval.
    """

    position: int
    role: str | None
    text: str | None
    masked_segment_id: int | None = None

    @property
    def is_placeholder(self) -> bool:
        return self.masked_segment_id is not None


@dataclass(frozen=True, slots=True)
class Summary:
    text: str
    watermark: int  # id of the newest message the summary covers


@dataclass(frozen=True, slots=True)
class PadEntry:
    id: int
    mode: Mode
    text: str
    segment_id: int | None


@dataclass(frozen=True, slots=True)
class ContextReads:
    """Everything a turn's context reads, read at once (one snapshot): both summaries of the mode, the
    pads it may read, the newest items of its view after the summary it uses, and how many messages of
    that view lie after that summary's watermark (counted up to `counted_up_to` per source, enough to
    tell whether a fold is due)."""

    normal_summary: Summary | None
    private_summary: Summary | None
    normal_pad: list[PadEntry]
    private_pad: list[PadEntry]
    items: list[TimelineItem]
    messages_after: int


@dataclass(frozen=True, slots=True)
class RecallHit:
    source: str  # message | note | pad
    ref: int
    text: str
    rank: float


@dataclass(frozen=True, slots=True)
class Goal:
    id: int
    title: str
    status: str
    due_at: float | None


@dataclass(frozen=True, slots=True)
class Note:
    """A daily note the capture job distilled from normal messages (`day`: YYYY-MM-DD)."""

    id: int
    day: str
    text: str


@dataclass(frozen=True, slots=True)
class FollowUp:
    id: int
    kind: str  # reminder | watch
    text: str
    due_at: float | None
    status: str


@dataclass(frozen=True, slots=True)
class PendingCapture:
    """A normal message waiting for the capture job."""

    message_id: int
    person_id: int
    role: str
    text: str
    created_at: float


@dataclass(frozen=True, slots=True)
class OpenTurn:
    """A normal user message whose turn never wrote its reply (the process died mid-turn)."""

    message_id: int
    conversation: Conversation
    account_id: int | None
    created_at: float
    platform_message_id: str | None = None


# --- proactive messages -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProactivePrefs:
    """A person's manners for proactive messages. None: the configured default. Holds no text."""

    person_id: int
    budget: int | None = None  # nudges per local day; 0: `/nudges off`
    quiet: str | None = None  # 'HH:MM-HH:MM' or 'off'
    timezone: str | None = None  # an IANA name
    pinned_conversation_id: int | None = None  # `/nudges here`
    last_wrote_at: float | None = None  # their last normal message in a direct conversation
    last_nudge_at: float | None = None
    unanswered: int = 0  # nudges since they last wrote
    cooldown: float | None = None  # seconds between two nudges; 0: `/cooldown off`


@dataclass(frozen=True, slots=True)
class ProactiveCandidate:
    """Something due for one person: a reminder, an event watch, a goal check-in or an open
    check-in, with the direct conversation it would go to. Only normal rows, never a
    conversation with an open segment (the candidate query's own SQL)."""

    kind: str  # reminder | watch | goal | checkin
    item_id: int  # the follow-up, the goal, or (checkin) the person
    due_at: float
    text: str  # what the person asked to be reminded of / the event / the goal; '' for a check-in
    conversation: Conversation
    prefs: ProactivePrefs

    @property
    def subject(self) -> str:
        prefix = {"reminder": "followup", "watch": "followup"}.get(self.kind, self.kind)
        return f"{prefix}:{self.item_id}"

    @property
    def is_reminder(self) -> bool:
        return self.kind == "reminder"


@dataclass(frozen=True, slots=True)
class ProactiveDecision:
    """One triage decision, recorded without any text. `segment_id` only with reason 'private'
    (the row then goes with that segment)."""

    person_id: int
    kind: str
    subject: str
    outcome: str  # sent | silent | skipped | missed
    reason: str
    local_day: str
    decided_at: float
    segment_id: int | None = None


@dataclass(frozen=True, slots=True)
class ProactiveSent:
    """What a claim wrote: the message, its delivery and its mirror rows."""

    message_id: int
    delivery_id: int
    mirror_ids: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ChatMove:
    """What following a moved chat (a Telegram group upgraded to a supergroup) changed: the
    conversation re-keyed (None: none was known), the one merged into it (one had begun under the
    new id already), and how many bindings and pending deliveries now name the new chat.
    `refused`: a conversation that is direct, or has or had a private segment, is never moved."""

    conversation_id: int | None = None
    merged_conversation_id: int | None = None
    bindings: int = 0
    deliveries: int = 0
    refused: bool = False


# --- quotes and edits (issue 15) ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QuotedMessage:
    """A stored message that a reply quotes, as one mode may read it: `text` is None when the
    message belongs to a private interval that mode may not read (the store's SQL decides)."""

    role: str
    kind: str
    text: str | None


@dataclass(frozen=True, slots=True)
class EditableMessage:
    """A stored user chat message an edit may change, in its own mode and segment; `turn` is
    'open' while its answer is not written yet."""

    id: int
    segment_id: int | None
    turn: str | None


# One event of a run: (kind, name, status, duration_ms, size_in, size_out, created_at).
# (kind, name, status, duration_ms, size_in, size_out, created_at, server): `server` names a served
# tool's MCP server (None: anything else).
Event = tuple[str, str, str, float | None, int | None, int | None, float, str | None]


@dataclass(frozen=True, slots=True)
class RunRecord:
    """A finished normal turn's run and its events: (kind, name, status, duration_ms,
    size_in, size_out, created_at, server). Ids, kinds, timings and sizes only."""

    conversation_id: int
    started_at: float
    ended_at: float
    status: str
    events: tuple[Event, ...]


@dataclass(frozen=True, slots=True)
class Turn:
    """Who said what, where: the resolved records of one inbound message."""

    message: InboundMessage
    account: Account
    conversation: Conversation
    restart_notice: bool = False  # a restart ended this conversation's private mode: say so first
