"""Recovery: what a stop or a crash left, made right at the next start.

Crash semantics first (seed 000): every private interval left open is closed at the end of the
stored record, and what expired while the process was down is deleted. An event made before this
start into a conversation whose interval that closed belongs to the interval (the gate asks
`closed_by_restart`; `keep_unread` stores it there unread, whatever its kind).
Turns the last process was cut off in are answered once (or, when old, asked for again); a reply
that was being shown while written when the process stopped is taken over by that answer (its
send edits the messages shown), and what no answer takes over is marked cut off.
"""

from __future__ import annotations

import dataclasses
import logging

from core.delivery.outbox import Outbox
from core.ports.clock import Clock
from core.ports.store.claims import ChatClaims
from core.ports.store.lifetime import ArtifactExpiry
from core.ports.store.modes import CrashModes
from core.ports.store.timeline import OpenTurnStore
from core.privacy.valve import ModeValve
from core.turn.responder import Responder
from core.values import copy
from core.values.model import Account, Conversation, InboundMessage, OpenTurn, Reply, Turn

log = logging.getLogger(__name__)

# A platform's clock and ours may differ a little: a message stamped this close after a restart
# is taken to be from before it (the fail-closed direction). Telegram's whole-second dates are
# rounded down, which already errs the same way.
SENT_AT_MARGIN = 0.5
# A turn a restart cut off is answered when it is younger than this; older ones are asked again.
ANSWER_CUT_OFF_TURNS_WITHIN = 10 * 60.0


@dataclasses.dataclass(frozen=True, slots=True)
class ClosedByRestart:
    """The private interval an event made before this start belongs to: `segment_id`, closed by
    the restart, or None when that interval expired while the process was down (deleted).
    `elsewhere`: the interval was served by another process, whose conversation this one took over (a shared
    database): its key is that process's, so the event is kept nowhere (never in normal mode)."""

    segment_id: int | None
    elsewhere: bool = False


class Recovery:
    def __init__(
        self,
        modes: CrashModes,
        turns: OpenTurnStore,
        artifacts: ArtifactExpiry,
        clock: Clock,
        valve: ModeValve,
        responder: Responder,
        *,
        platforms: frozenset[str] | None = None,
        outbox: Outbox | None = None,
        claims: ChatClaims | None = None,
        standby: frozenset[str] = frozenset(),
    ) -> None:
        self._outbox = outbox
        # A shared database (issue 33): this process recovers only the conversations it holds or takes over
        # from a process that died or stopped; what a live process holds is that process's. None: alone.
        self.claims = claims
        # Conversations taken over since the start: the moment each was, their "restart" (closed_by_restart).
        self._taken_at: dict[int, float] = {}
        self._modes = modes
        self._turns = turns
        self._artifacts = artifacts
        self._clock = clock
        self._valve = valve
        self._responder = responder
        # The platforms this process serves; only their open segments are closed at start, so
        # `companion chat` never drops a Telegram conversation out of private mode. None: all.
        self._platforms = platforms
        # Of those, the platforms whose events reach this process only once it holds their connection (Discord's
        # gateway on a shared database): their conversations are taken over only from then on (`serve`).
        self._standby = set(standby)
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
        if self.claims is not None:
            # First every claim of a dead process taken over: the close below leaves out what others hold.
            for claim in await self.claims.take_over_dead(self._claimed_platforms()):
                self._taken_at[claim.conversation_id] = self.started_at
        closed = await self._modes.close_crash_open_segments(self._platforms, now=self.started_at)
        self._restart_closed.update(closed)
        self._closed_at_start.update(closed)
        expired = await self._modes.delete_expired_segments(self._clock.now())
        artifacts = await self._artifacts.delete_expired_artifacts(self._clock.now())
        if closed or expired or artifacts:
            log.info(
                "start-up: closed open segments in %d conversations, deleted %d expired segments"
                " and %d expired artifacts",
                len(closed),
                expired,
                artifacts,
            )

    async def sweep(self) -> int:
        """Scheduled (`Companion.sweep`): delete the segments whose expiry passed, then crossing
        artifacts past their retention. Segments first: nothing else failing (a store that is down)
        may hold back an interval's expiry, or what the store does of it without a database.
        Returns how many segments were deleted."""
        try:
            return await self._modes.delete_expired_segments(self._clock.now())
        finally:
            await self._artifacts.delete_expired_artifacts(self._clock.now())

    async def taken_over(self, conversation_ids: list[int]) -> list[int]:
        """Crash recovery of conversations this process took over from a process that died or stopped (a shared
        database): their open private interval is closed as a restart closes it, never resumed here (its key is
        the other process's), and what was sent in it before now stays inside it. Returns those closed."""
        now = self._clock.now()
        for conversation_id in conversation_ids:
            self._taken_at[conversation_id] = now
        closed = await self._modes.close_taken_over(conversation_ids, now)
        self._restart_closed.update(closed)
        self._closed_at_start.update(closed)
        if closed:
            log.info("take-over: closed open segments in %d conversations", len(closed))
        return closed

    async def take_over_dead(self) -> list[int]:
        """Scheduled on a shared database: take over the conversations of processes that died or stopped, and
        recover them (`taken_over`). Returns the conversations taken over."""
        if self.claims is None:
            return []
        taken = [claim.conversation_id for claim in await self.claims.take_over_dead(self._claimed_platforms())]
        if taken:
            await self.taken_over(taken)
        return taken

    def _claimed_platforms(self) -> frozenset[str] | None:
        """The platforms whose conversations this process takes over now (None: all)."""
        if self._platforms is None:
            return None
        return frozenset(self._platforms - self._standby)

    async def serve(self, platform: str) -> list[int]:
        """This process now holds `platform`'s connection (a shared database's Discord gateway): the
        conversations of it that a dead process held are taken over and recovered. Returns those."""
        self._standby.discard(platform)
        return await self.take_over_dead()

    def restart_notice(self, conversation_id: int) -> bool:
        """Whether the next reply of the conversation first says that a restart ended private mode."""
        return conversation_id in self._restart_closed

    def noticed(self, conversation_id: int) -> None:
        self._restart_closed.discard(conversation_id)

    async def cut_off_turns(self) -> list[OpenTurn]:
        """The normal turns the last process was cut off in (a turn this process began is running)."""
        turns = await self._turns.open_turns(self._platforms)
        if self.claims is None:
            return [t for t in turns if t.created_at < self.started_at]
        # A shared database: only what this process holds, cut off before it took the conversation.
        return [
            t
            for t in turns
            if self.claims.holds(t.conversation.id)
            and t.created_at < self._taken_at.get(t.conversation.id, self.started_at)
        ]

    async def answer_cut_off(self, open_turn: OpenTurn) -> Reply | None:
        """Answer one cut-off turn (in its conversation's lane): younger than ten minutes it is
        answered, older it is asked for again; None when it is no longer open or the person went on
        in private mode meanwhile (it is left unread)."""
        conversation = open_turn.conversation
        if not await self._turns.turn_is_open(open_turn.message_id):
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
        # Its answer was being shown while written when the last process stopped: the answer now is
        # that reply (sent as the final edit of the messages shown), not a second one beside them.
        left = await self._outbox.left_stream(conversation.id, self.started_at) if self._outbox else None
        if self._clock.now() - open_turn.created_at < ANSWER_CUT_OFF_TURNS_WITHIN:
            return await self._responder.answer(turn, state, open_turn.message_id, resume=left)
        return await self._responder.finish(
            turn,
            copy.MISSED_IN_RESTART,
            stored_text=copy.MISSED_IN_RESTART,
            answers=open_turn.message_id,
            stream=left,
        )

    async def cut_off_streams(self) -> int:
        """After the cut-off turns were answered: every reply the last process was showing while
        written that no answer took over gets its messages edited into a constant "cut off" line
        (a private interval's too, while it lives: the line holds nothing of it). Returns how many."""
        if self._outbox is None or self.claims is not None:
            # A shared database leaves them: this sweep of every conversation is not scoped by claims yet.
            return 0
        return await self._outbox.cut_off_streams(self.started_at)

    def sent_before_start(self, message: InboundMessage, conversation_id: int | None = None) -> bool:
        """Sent before this process started, or took over the conversation `conversation_id`."""
        started = self.started_at if conversation_id is None else self._taken_at.get(conversation_id, self.started_at)
        return message.sent_at is not None and message.sent_at < started + SENT_AT_MARGIN

    async def closed_by_restart(self, conversation: Conversation, message: InboundMessage) -> ClosedByRestart | None:
        """The private interval an event belongs to although it arrives only now: made before this
        process started (a redelivery, or sent while the companion was down), into a conversation
        whose interval a restart closed after it was made. None when the rule does not apply."""
        if (
            not conversation.is_direct
            or message.sent_at is None
            or not self.sent_before_start(message, conversation.id)
        ):
            return None
        # The platform's clock and ours may differ a little: the margin errs toward the interval.
        segment_id = await self._modes.restart_segment_for(conversation.id, message.sent_at - SENT_AT_MARGIN)
        if segment_id is not None:
            return ClosedByRestart(segment_id, elsewhere=self.claims is not None and conversation.id in self._taken_at)
        if conversation.id in self._closed_at_start:
            return ClosedByRestart(None)  # its interval expired while the process was down
        return None

    async def keep_unread(
        self,
        turn: Turn,
        closed: ClosedByRestart,
        *,
        stored: str | None,
        kind: str = "chat",
        answer_segment: int | None = None,
        delete_inbound: bool = False,
    ) -> Reply | None:
        """Keep an event a restart's interval owns (see `closed_by_restart`): `stored` (its text, or
        None for what is never stored) goes into that interval as a `kind` row, never read, and the
        answer is the constant that says so. `answer_segment`: the interval open now, if one is (the
        answer belongs to it; else to none). Returns None for a redelivery."""
        conversation, message = turn.conversation, turn.message
        turn = dataclasses.replace(turn, restart_notice=False)  # the answer says it already
        if closed.segment_id is None or closed.elsewhere:
            # Its interval expired while the process was down and is deleted, or was another process's (its key
            # too): nothing is kept.
            log.info(
                "conversation %s: an event from %s interval was dropped unread",
                conversation.id,
                "another process's" if closed.elsewhere else "an expired",
            )
            return await self._responder.finish(
                turn, copy.RESTART_KEPT_PRIVATE, segment_id=answer_segment, delete_inbound=delete_inbound
            )
        message_id = None
        if stored is not None:
            if kind == "chat":
                message_id = await self._turns.add_inbound(
                    conversation.id,
                    stored,
                    self._clock.now(),
                    segment_id=closed.segment_id,
                    account_id=turn.account.id,
                    platform_message_id=message.message_id,
                )
            else:
                message_id = await self._turns.add_message(
                    conversation.id,
                    "user",
                    stored,
                    self._clock.now(),
                    segment_id=closed.segment_id,
                    kind=kind,
                    account_id=turn.account.id,
                    platform_message_id=message.message_id,
                )
            if message_id is None:
                return None  # stored already: a redelivery
        log.info(
            "conversation %s: a %s from before the restart was kept in segment %s unread",
            conversation.id,
            kind,
            closed.segment_id,
        )
        # The answer is a constant that holds nothing of the interval; it belongs to the interval open
        # now, if one is, else to none: the closed one sends nothing any more (its end ended its sends).
        return await self._responder.finish(
            turn,
            copy.RESTART_KEPT_PRIVATE,
            segment_id=answer_segment,
            answers=message_id if kind == "chat" else None,
            delete_inbound=delete_inbound,
        )
