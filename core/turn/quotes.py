"""Quotes, forwards and speakers: the lines put before a message's text, decided for one mode.

A forward of a message of the companion's own chats is read like a quote (see `forward_words`):
a private interval's message stands as the placeholder, whichever way it arrives.

What a reply quotes is looked up by its platform id in the inbox of stored messages, through
the store's SQL for the mode the message is read in: a quoted message of a private interval
that mode may not read arrives as the constant placeholder, never as its text. Text the
platform sends along with a reply (the quoted message as the person's app shows it) is used
only where this mode can already read the same words, or in a group, where the companion does
not see every message and no private interval can exist. Anything else stands as one
constant line without text.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.commands.registry import carries_secret
from core.ports.store.quotes import QuoteStore
from core.values import copy
from core.values.model import Conversation, InboundMessage
from core.values.names import clean_name, speaker_name

QUOTE_MAX_CHARS = 300
# How many of the companion's newest readable replies a quote of one of them is matched against.
RECENT_REPLIES = 200
# Platform times are coarse (Telegram's dates are whole seconds, rounded down): a forwarded message
# sent this close to a private interval counts as one of it (the safe direction).
FORWARD_SENT_AT_MARGIN = 1.0


@dataclass(frozen=True, slots=True)
class Composed:
    """A message as stored: `text` is what the model reads (the lines put before the words, then
    the words); `said` is what a mirror may copy, the words alone (in a group, headed with who
    spoke), or None when `text` is just that. `unread_forward`: it forwards words this mode may
    not read (a private interval's, or a message of its own chats the companion no longer keeps):
    they stand as a constant line, and the person may be told to type again what should be known."""

    text: str
    said: str | None = None
    unread_forward: bool = False


async def compose(
    store: QuoteStore, conversation: Conversation, message: InboundMessage, *, visible_segment: int | None
) -> Composed:
    """The text stored and shown to the model for `message`, read in the mode that lives in
    `visible_segment` (None: normal mode): who forwarded it, what it replies to, then its words;
    in a group each line is headed with the speaker's name."""
    lines = []
    words = message.text
    unread = False
    if message.forwarded_from:
        lines.append(copy.FORWARD_LINE.format(name=clean_name(message.forwarded_from)))
        forwarded = await forward_words(store, conversation, message, visible_segment=visible_segment)
        if forwarded is not None:  # not words this mode may read: a constant stands for them
            words, unread = forwarded, True
    if message.reply_to_message_id is not None or message.quoted_text is not None:
        lines.append(await quote_line(store, conversation, message, visible_segment=visible_segment))
    text = "\n".join([*lines, words])
    # A mirror copies the words typed; of a forward that is not read, a constant that says nothing.
    said = copy.FORWARD_UNREAD_SAID if unread else words
    if not conversation.is_direct:
        text, said = f"{speaker_name(message)}: {text}", f"{speaker_name(message)}: {said}"
    return Composed(text, said if lines else None, unread)


async def forward_words(
    store: QuoteStore, conversation: Conversation, message: InboundMessage, *, visible_segment: int | None
) -> str | None:
    """What stands for a forward's words when this mode may not read them, or None when it may.

    A forward of a message of one of the companion's own chats (`forwarded_chat_id`) is read as a
    quote is: by its id, through the store's SQL for this mode (a private interval's message is
    the placeholder); else by when it was sent (within a private interval this mode may not read,
    it is the placeholder too). A message of a one-to-one chat the companion does not keep (and
    cannot match among its own readable replies) was never kept or went with its interval: its
    words stay out. A forward from anywhere else is read as it comes."""
    if message.forwarded_chat_id is None:
        return None
    origin = await store.conversation_of_chat(message.platform, message.forwarded_chat_id)
    if origin is None:
        return None  # a chat the companion was never in
    # A private interval belongs to its own conversation: another conversation's is never readable.
    visible = visible_segment if origin == conversation.id else None
    if message.forwarded_message_id is not None:
        found = await store.quoted_message(origin, message.forwarded_message_id, visible_segment=visible)
        if found is not None:
            return copy.PLACEHOLDER if found.text is None else None
    if message.forwarded_at is not None and await store.private_interval_at(
        origin, message.forwarded_at, visible_segment=visible, margin=FORWARD_SENT_AT_MARGIN
    ):
        return copy.PLACEHOLDER
    if message.forwarded_message_id is not None:
        # Not stored under its id: one of the companion's own replies (matched against those this
        # mode may read), or a message the companion never kept or no longer keeps.
        readable = await store.visible_texts(origin, "assistant", visible_segment=visible, limit=RECENT_REPLIES)
        if not any(_within(message.text, text) for text in readable):
            return copy.FORWARD_WITHHELD
    return None


async def quote_line(
    store: QuoteStore, conversation: Conversation, message: InboundMessage, *, visible_segment: int | None
) -> str:
    """One line saying what `message` replies to, as this mode may know it."""
    quoted = message.quoted_text
    if quoted is not None and (carries_secret(quoted) or not quoted.strip()):
        quoted = None  # a passphrase the person sent by mistake is never quoted back
    if message.reply_to_message_id is not None:
        found = await store.quoted_message(
            conversation.id, message.reply_to_message_id, visible_segment=visible_segment
        )
        if found is not None:
            if found.text is None:
                return copy.QUOTE_LINE.format(text=copy.PLACEHOLDER)
            # The platform's words (a part the person selected) only where they are the stored ones.
            words = quoted if quoted is not None and _within(quoted, found.text) else found.text
            return copy.QUOTE_LINE.format(text=short(words))
    if quoted is None:
        return copy.QUOTE_WITHHELD_LINE
    if not conversation.is_direct:
        # The companion's own group replies carry no inbox key; a group never has private mode.
        line = copy.QUOTE_LINE if message.quoted_from_companion else copy.QUOTE_UNSEEN_LINE
        return line.format(text=short(quoted))
    if message.quoted_from_companion:
        # The companion's own replies carry no inbox key: matched by their words against the
        # replies this mode can read, so a private reply quoted in normal mode is never matched.
        readable = await store.visible_texts(
            conversation.id, "assistant", visible_segment=visible_segment, limit=RECENT_REPLIES
        )
        if any(_within(quoted, text) for text in readable):
            return copy.QUOTE_LINE.format(text=short(quoted))
    # In a one-to-one chat the companion stores every message it is sent: one it does not have
    # was never kept (a mistyped passphrase) or went with its interval. Its text stays out.
    return copy.QUOTE_WITHHELD_LINE


def short(text: str) -> str:
    """A quote on one line, at most QUOTE_MAX_CHARS characters."""
    line = " ".join(text.split())
    return line if len(line) <= QUOTE_MAX_CHARS else line[: QUOTE_MAX_CHARS - 1] + "…"


def _within(part: str, whole: str) -> bool:
    """Whether `part` says nothing beyond `whole`: its letters and digits appear in it, in order,
    whatever the spacing, punctuation and Markdown (a rendered reply loses its stars)."""
    needle = _letters(part)
    return bool(needle) and needle in _letters(whole)


def _letters(text: str) -> str:
    return "".join(ch for ch in text.casefold() if ch.isalnum())
