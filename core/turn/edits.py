"""Edits: an edit is input of the mode it was made in (the gate decides it). Made in the mode and
interval of the message it edits, it replaces the stored text there, and the newest message,
answered moments ago, gets its edited version answered as a correction; made while private, of any
other message, it is kept as a new row of the open interval; made in normal mode, of a private
message, it is dropped."""

from __future__ import annotations

import dataclasses
import logging

from core.commands.registry import carries_secret
from core.ports.clock import Clock
from core.ports.store.quotes import EditStore, QuoteStore
from core.ports.store.timeline import TimelineLog
from core.turn.media import AUDIO_KINDS, unread_text
from core.turn.quotes import compose
from core.turn.responder import Responder
from core.values import copy
from core.values.command_text import parse_command
from core.values.model import Reply, Turn
from core.values.modes import ModeState

log = logging.getLogger(__name__)

# An edit of the newest message answered less than this long ago is answered again.
CORRECTION_WINDOW = 120.0


async def answer_edit(
    turn: Turn,
    state: ModeState,
    *,
    edits: EditStore,
    timeline: TimelineLog,
    quotes: QuoteStore,
    clock: Clock,
    responder: Responder,
) -> Reply | None:
    """Apply an edit (`turn.message.edited`) made in `state` (the mode the gate decided for it);
    returns the correction's reply, or None (nothing sent).

    An edit is input of the mode it is made in, whatever it edits: a message of that same mode and
    interval changes in place; an edit made in private mode of anything else is kept as a new row
    of the open interval (the earlier row unchanged); an edit made in normal mode of a private
    message is dropped. The store's UPDATE refuses the rest again in its SQL."""
    message, conversation = turn.message, turn.conversation
    platform_id = message.message_id
    if platform_id is None:
        return None
    if state.unreadable:
        # It may have been made in an open private interval: not used at all.
        log.info("conversation %s: an edit was dropped (the mode could not be read)", conversation.id)
        return None
    if carries_secret(message.text):
        # Edited into a passphrase or code: not kept, and deleted from the chat where possible.
        return await responder.finish(turn, copy.EDIT_NOT_KEPT, segment_id=state.segment_id, delete_inbound=True)
    if parse_command(message.text) is not None:
        log.info("conversation %s: an edit into a command is not run", conversation.id)
        return None
    if message.media:
        if any(item.kind in AUDIO_KINDS for item in message.media):
            # What is stored of a voice note is its transcript; an edited caption would replace it.
            log.info("conversation %s: an edited caption of a voice note is not applied", conversation.id)
            return None
        # An edited caption: the stored words are the markers and the caption, as first stored
        # (nothing is fetched again: the media did not change).
        message = dataclasses.replace(message, text=unread_text(message))
    now = clock.now()
    stored = await edits.editable_message(conversation.id, platform_id, now)
    if stored is None:
        # Never stored, or its private interval expired or was deleted: an edit never brings
        # a message back, and never stores one anew (in whatever mode the chat is in now).
        log.info("conversation %s: an edit of message %s was dropped", conversation.id, platform_id)
        return None
    if stored.segment_id != state.segment_id:
        if state.is_private:
            # Typed while private: private input, kept in the open interval and expiring with it.
            # The row it edits (normal, or of another interval) keeps its words.
            composed = await compose(quotes, conversation, message, visible_segment=state.segment_id)
            await timeline.add_message(
                conversation.id,
                "user",
                f"{copy.EDIT_KEPT_PRIVATE_LINE}\n{composed.text}",
                now,
                segment_id=state.segment_id,
                account_id=turn.account.id,
            )
            log.info("conversation %s: an edit made in private mode was kept in its interval", conversation.id)
            return None
        # Typed in normal mode, of a private interval's message: normal mode never writes there.
        log.info("conversation %s: an edit of a private message was dropped in normal mode", conversation.id)
        return None
    # The quote is read in the message's own mode, as when it was first stored.
    composed = await compose(quotes, conversation, message, visible_segment=stored.segment_id)
    if not await edits.edit_message(stored.id, stored.segment_id, composed.text, now, said=composed.said):
        return None
    size = len(composed.text)
    log.info("conversation %s: message %s edited (%d chars)", conversation.id, stored.id, size)
    if stored.turn != "done":
        return None  # its answer is still to come (a burst, a cut-off turn) and reads the new words
    if not await edits.answered_since(conversation.id, stored.id, now - CORRECTION_WINDOW):
        return None
    return await responder.answer(turn, state, stored.id, note=copy.EDIT_CORRECTION)
