"""Edits: an edited message replaces its stored text in its own mode and segment; the newest
message, answered moments ago, gets its edited version answered as a correction."""

from __future__ import annotations

import dataclasses
import logging

from core.commands.registry import carries_secret
from core.ports import BaseStore, Clock
from core.privacy.valve import ModeValve
from core.turn.media import AUDIO_KINDS, unread_text
from core.turn.quotes import compose
from core.turn.responder import Responder
from core.values import copy
from core.values.command_text import parse_command
from core.values.model import Reply, Turn

log = logging.getLogger(__name__)

# An edit of the newest message answered less than this long ago is answered again.
CORRECTION_WINDOW = 120.0


async def answer_edit(
    turn: Turn, *, store: BaseStore, clock: Clock, valve: ModeValve, responder: Responder
) -> Reply | None:
    """Apply an edit (`turn.message.edited`); returns the correction's reply, or None (nothing sent)."""
    message, conversation = turn.message, turn.conversation
    platform_id = message.message_id
    if platform_id is None:
        return None
    if carries_secret(message.text):
        # Edited into a passphrase or code: not kept, and deleted from the chat where possible.
        return await responder.finish(turn, copy.EDIT_NOT_KEPT, delete_inbound=True)
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
    stored = await store.editable_message(conversation.id, platform_id, now)
    if stored is None:
        # Never stored, or its private interval expired or was deleted: an edit never brings
        # a message back, and never stores one anew (in whatever mode the chat is in now).
        log.info("conversation %s: an edit of message %s was dropped", conversation.id, platform_id)
        return None
    # The quote is read in the message's own mode, as when it was first stored.
    text = await compose(store, conversation, message, visible_segment=stored.segment_id)
    if not await store.edit_message(stored.id, stored.segment_id, text, now):
        return None
    size = len(text)
    log.info("conversation %s: message %s edited (%d chars)", conversation.id, stored.id, size)
    if stored.turn != "done":
        return None  # its answer is still to come (a burst, a cut-off turn) and reads the new words
    if not await store.answered_since(conversation.id, stored.id, now - CORRECTION_WINDOW):
        return None
    state = await valve.settle(conversation)
    if state.unreadable or state.segment_id != stored.segment_id:
        return None  # answered only in the mode and interval the message belongs to
    return await responder.answer(turn, state, stored.id, note=copy.EDIT_CORRECTION)
