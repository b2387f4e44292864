"""Recovery: what a stop or a crash left, made right at the next start.

Crash semantics first (seed 000): every private interval left open is closed at the end of the
stored record, and what expired while the process was down is deleted. A message sent before this
start into a conversation whose interval that closed belongs to the interval (stored there unread).
Turns the last process was cut off in are answered once (or, when old, asked for again).
"""

from __future__ import annotations

import dataclasses
import logging

from core.ports import BaseStore, Clock
from core.privacy.valve import ModeValve
from core.turn.media import unread_text
from core.turn.responder import Responder
from core.values import copy
from core.values.model import Account, InboundMessage, OpenTurn, Reply, Turn

log = logging.getLogger(__name__)

# A platform's clock and ours may differ a little: a message stamped this close after a restart
# is taken to be from before it (the fail-closed direction). Telegram's whole-second dates are
# rounded down, which already errs the same way.
SENT_AT_MARGIN = 0.5
# A turn a restart cut off is answered when it is younger than this; older ones are asked again.
ANSWER_CUT_OFF_TURNS_WITHIN = 10 * 60.0


class Recovery:
    def __init__(
        self,
        store: BaseStore,
        clock: Clock,
        valve: ModeValve,
        responder: Responder,
        *,
        platforms: frozenset[str] | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._valve = valve
        self._responder = responder
        # The platforms this process serves; only their open segments are closed at start, so
        # `companion chat` never drops a Telegram conversation out of private mode. None: all.
        self._platforms = platforms
        self.started_at = clock.now()
        # Conversations whose private mode the restart ended: their next reply says so first.
        self._restart_closed: set[int] = set()
        # Conversations whose private interval this start closed: a message sent before the start
        # belongs to that interval, also when its segment expired (was deleted) at this start.
        self._closed_at_start: set[int] = set()

    async def start(self) -> None:
        """Close intervals left open, delete what expired while down (segments and crossing
        artifacts); each deletion also finishes a checkpoint a reader blocked before the stop, so
        deleted text leaves the database files."""
        self.started_at = self._clock.now()
        closed = await self._store.close_crash_open_segments(self._platforms, now=self.started_at)
        self._restart_closed.update(closed)
        self._closed_at_start.update(closed)
        expired = await self._store.delete_expired_segments(self._clock.now())
        artifacts = await self._store.delete_expired_artifacts(self._clock.now())
        if closed or expired or artifacts:
            log.info(
                "start-up: closed open segments in %d conversations, deleted %d expired segments"
                " and %d expired artifacts",
                len(closed),
                expired,
                artifacts,
            )

    def restart_notice(self, conversation_id: int) -> bool:
        """Whether the next reply of the conversation first says that a restart ended private mode."""
        return conversation_id in self._restart_closed

    def noticed(self, conversation_id: int) -> None:
        self._restart_closed.discard(conversation_id)

    async def cut_off_turns(self) -> list[OpenTurn]:
        """The normal turns the last process was cut off in (a turn this process began is running)."""
        return [t for t in await self._store.open_turns(self._platforms) if t.created_at < self.started_at]

    async def answer_cut_off(self, open_turn: OpenTurn) -> Reply | None:
        """Answer one cut-off turn (in its conversation's lane): younger than ten minutes it is
        answered, older it is asked for again; None when it is no longer open or the person went on
        in private mode meanwhile (it is left unread)."""
        conversation = open_turn.conversation
        if not await self._store.turn_is_open(open_turn.message_id):
            return None  # a newer message of the conversation was answered first, and closed it
        state = await self._valve.settle(conversation)
        if state.is_private or state.unreadable:
            return None
        message = InboundMessage(
            conversation.platform,
            conversation.chat_id,
            "",
            "",
            conversation.is_direct,
            message_id=open_turn.platform_message_id,
        )
        account = Account(open_turn.account_id or 0, conversation.person_id or 0, conversation.platform, "")
        turn = Turn(message, account, conversation)
        if self._clock.now() - open_turn.created_at < ANSWER_CUT_OFF_TURNS_WITHIN:
            return await self._responder.answer(turn, state, open_turn.message_id)
        return await self._responder.finish(
            turn, copy.MISSED_IN_RESTART, stored_text=copy.MISSED_IN_RESTART, answers=open_turn.message_id
        )

    def sent_before_start(self, message: InboundMessage) -> bool:
        return message.sent_at is not None and message.sent_at < self.started_at + SENT_AT_MARGIN

    async def keep_in_restarted_interval(self, turn: Turn) -> tuple[bool, Reply | None]:
        """A message sent before this process started, into a conversation whose private interval
        a restart closed after it was sent, belongs to that interval: stored there (masked,
        expiring with it), never read. Returns whether the rule applied, and then the reply
        (None for a redelivery)."""
        conversation, message = turn.conversation, turn.message
        if not conversation.is_direct or message.sent_at is None:
            return False, None
        turn = dataclasses.replace(turn, restart_notice=False)  # the reply says it already
        # The platform's clock and ours may differ a little: the margin errs toward the interval.
        segment_id = await self._store.restart_segment_for(conversation.id, message.sent_at - SENT_AT_MARGIN)
        if segment_id is not None:
            message_id = await self._store.add_inbound(
                conversation.id,
                unread_text(message),  # media: markers and caption only, nothing fetched
                self._clock.now(),
                segment_id=segment_id,
                account_id=turn.account.id,
                platform_message_id=message.message_id,
            )
            if message_id is None:
                return True, None
            log.info(
                "conversation %s: a message from before the restart was kept in segment %s unread",
                conversation.id,
                segment_id,
            )
            reply = await self._responder.finish(
                turn, copy.RESTART_KEPT_PRIVATE, segment_id=segment_id, answers=message_id
            )
            return True, reply
        if conversation.id in self._closed_at_start:
            # Its interval expired while the process was down and is deleted: the message is not kept.
            log.info("conversation %s: a message from an expired interval was dropped unread", conversation.id)
            return True, await self._responder.finish(turn, copy.RESTART_KEPT_PRIVATE)
        return False, None
