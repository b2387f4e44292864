"""The companion's turns: one inbound message in, its typed result out, the same for every platform.

Each chat has one lane (core/turn/lanes.py): its messages, edits, commands, a burst's end and a
cut-off turn are handled there in order. The lane stores, asks the model and writes the reply with
its delivery row; it sends nothing. A turn ends in a `Reply`, `Held` (for the rest of its burst)
or `Silent` with a reason; the core's entry (core/turn/entry.py) hands the reply off, and work
nobody waits for (a burst's end, a cut-off turn) is handed off here (core/delivery/handoff.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time

from core.commands.registry import carries_secret
from core.memory.context import ReadAhead
from core.turn import edits, quotes
from core.turn.bursts import BurstWindow, HeldTurn
from core.turn.bursts import Held as HeldBurst
from core.turn.config import CompanionConfig, Parts
from core.turn.gate import Event, EventKind
from core.turn.media import unread_text
from core.turn.recovery import ClosedByRestart
from core.turn.responder import LaneKey
from core.values import copy
from core.values.edge import Held, Silence, Silent
from core.values.errors import IntervalEnded
from core.values.model import ChatMove, ContextReads, InboundMessage, OpenTurn, Reply, Turn
from core.values.modes import ModeState, with_notice
from core.values.retry import Sleep

log = logging.getLogger(__name__)

# The part of the stop grace kept for sending what the last turns wrote.
FLUSH_SECONDS = 5.0
# How often `serve` asks whether the process whose platform connection it took still holds conversations.
SERVE_POLL_SECONDS = 0.25
UNKNOWN_COMMAND = "I don't know /{name}. /help lists the commands."
MISTYPED_LOOKALIKE = (
    "That looked like a mistyped /private or /link; nothing of that message was kept. /help lists the commands."
)


class Companion:
    """Runs turns: one lane per chat, different chats concurrently."""

    def __init__(self, parts: Parts, config: CompanionConfig, *, burst_sleep: Sleep = asyncio.sleep) -> None:
        self.config = config
        self.parts = parts
        self.provider = parts.provider
        self.clock = parts.clock
        self.valve = parts.valve
        self.context = parts.context
        self.capture = parts.capture
        self.media = parts.media
        self.outbox = parts.outbox
        self.proactive = parts.proactive
        self._handoff = parts.handoff
        self._inbox = parts.inbox
        self._timeline = parts.timeline
        self._quotes = parts.quotes
        self._edits = parts.edits
        self._people = parts.people
        self._recovery = parts.recovery
        self._responder = parts.responder
        self._commands = parts.commands
        self._lanes = parts.lanes
        self._gate = parts.gate
        self._told_forwards: set[int] = set()  # conversations told that unread forwards are not read
        self._bursts: BurstWindow[HeldTurn] = BurstWindow(config.burst_seconds, self._burst_quiet, sleep=burst_sleep)

    # --- lifecycle --------------------------------------------------------

    async def start(self) -> None:
        """Crash semantics first (core/turn/recovery.py), then the owner's accounts."""
        await self._recovery.start()
        await self._people.link_owner()

    @property
    def answering(self) -> int:
        """How many conversations have work queued or running now."""
        return self._lanes.busy

    async def take_over_dead(self) -> int:
        """Scheduled on a shared database: the conversations of processes that died or stopped taken over and
        recovered, and their cut-off turns answered here. Returns how many were taken over."""
        taken = await self._recovery.take_over_dead()
        if taken:
            await self.answer_open_turns()
        return len(taken)

    async def serve(self, platform: str, *, settle: float) -> int:
        """A shared database: this process took `platform`'s connection (the Discord gateway) from a process that
        stopped or died. Its conversations are taken over and recovered before the connection opens (a private
        interval of the dead process lands in normal mode): for at most `settle` seconds, until no live process
        holds one (the one whose connection ended is stopping). Returns how many were taken over; their cut-off
        turns are answered once the platform is attached (`answer_open_turns`)."""
        taken = len(await self._recovery.serve(platform))
        claims = self._recovery.claims
        deadline = time.monotonic() + settle
        while claims is not None and await claims.held_elsewhere(platform) and time.monotonic() < deadline:
            await asyncio.sleep(SERVE_POLL_SECONDS)
            taken += len(await self._recovery.take_over_dead())
        return taken

    async def answer_open_turns(self) -> int:
        """Once the adapters can send: answer each turn the last process was cut off in. Returns how many."""
        turns = await self._recovery.cut_off_turns()
        for open_turn in turns:
            try:
                await self.answer_cut_off(open_turn)
            except Exception as exc:  # noqa: BLE001 - one conversation must not stop the others
                log.warning("answering a cut-off turn failed (%s)", type(exc).__name__)
        marked = await self._recovery.cut_off_streams()  # replies shown in part that no answer took over
        if turns or marked:
            log.info(
                "start-up: %d turns cut off by the last stop were answered, %d partly shown replies marked cut off",
                len(turns),
                marked,
            )
            if self.outbox is not None:
                await self.outbox.settle(self.config.stop_grace)  # their answers sent (or pending, retried)
        return len(turns)

    async def answer_cut_off(self, open_turn: OpenTurn) -> None:
        """Answer one cut-off turn in its conversation's lane (unless a newer message answered it
        first); its answer is handed to the outbox's lanes (a stop waits for that send)."""
        conversation = open_turn.conversation
        reply = await self._lanes.run(
            _key_of(conversation.platform, conversation.chat_id),
            functools.partial(self._recovery.answer_cut_off, open_turn),
        )
        if reply is not None:
            self._handoff.later(conversation.platform, conversation.chat_id, reply)

    async def finish_turns(self, grace: float) -> int:
        """The stop: answer every burst still held, let each lane finish what it holds within
        `grace` seconds, then cut off the rest (stored as open turns: the next start answers them).
        Returns how many lanes were cut off."""
        await self._answer_held_bursts()
        return await self._lanes.drain(grace)

    async def stop(self, grace: float) -> None:
        """The core's part of a stop, after intake stopped and before connections close: the turns
        finish (`finish_turns`), then the outbox sends what they wrote, all within `grace` seconds
        (the outbox keeps a fifth of it, at most FLUSH_SECONDS)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        await self.finish_turns(grace - flush_share(grace))
        await self.flush(deadline - loop.time())

    async def flush(self, grace: float) -> None:
        """The stop's last step in the core: the outbox sends what the turns wrote, within `grace` seconds."""
        if self.outbox is not None:
            await self.outbox.flush(grace)

    async def drain(self) -> None:
        """Let the work this companion started finish, and keep working after: held bursts are
        answered now, summary folds and sends complete (within COMPANION_STOP_GRACE)."""
        await self._answer_held_bursts()
        await self._lanes.idle(self.config.stop_grace)
        if self.outbox is not None:
            await self.outbox.settle(self.config.stop_grace)

    async def _answer_held_bursts(self) -> None:
        for conversation_id, generation in await self._bursts.stop():
            self._burst_quiet(conversation_id, generation)

    async def sweep(self) -> int:
        """Scheduled: delete expired segments and artifacts past their retention, and finish a
        checkpoint a reader blocked earlier (the store keeps it owed in a durable flag).
        Idle and expiry also end private mode at read time. What an expired interval's answers
        showed while written is withdrawn (their retractions are sent)."""
        deleted = await self._recovery.sweep()
        if deleted and self.outbox is not None:
            self.outbox.interval_ended()
        return deleted

    # --- access and chats -------------------------------------------------

    def is_allowed(self, message: InboundMessage) -> bool:
        return self._people.is_allowed(message)

    def refusal(self, message: InboundMessage) -> Reply | None:
        """The answer to someone not allowed (nothing of it is stored): once per account and run, then None."""
        return self._people.refusal(message)

    def accounts_changed(self) -> None:
        self._people.accounts_changed()

    async def chat_moved(self, platform: str, old_chat_id: str, new_chat_id: str) -> ChatMove:
        """A chat moved to a new id: re-keyed through the store, waiting on no lane; the new id's
        events join the old id's lane, so the conversation keeps one order across the move."""
        self._lanes.follow(_key_of(platform, old_chat_id), _key_of(platform, new_chat_id))
        return await self._people.chat_moved(platform, old_chat_id, new_chat_id)

    # --- the turn ---------------------------------------------------------

    def submit(self, message: InboundMessage) -> asyncio.Future[Reply | Held | Silent]:
        """Queue the turn of one inbound message on its conversation's lane, without suspending (so
        the order of these calls is the lane's order); the future gets its result. Only the core's
        entry calls it (core/turn/entry.py), once it decided the sender may talk with the companion.

        Raises:
            core.turn.lanes.LanesClosed: the stop closed the lanes.
        """
        return self._lanes.submit(_key_of(message.platform, message.chat_id), lambda: self._turn(message))

    async def handle(self, message: InboundMessage) -> Reply | None:
        """The turn without the edge (the core's tests and bench/turn.py): answer one inbound message.
        Returns None when the companion stays silent (a redelivered message, a repeated refusal, a
        message held for the rest of its burst). A platform's events go through the core's entry."""
        if not self.is_allowed(message):
            return self._people.refusal(message)
        result = await self._lanes.run(_key_of(message.platform, message.chat_id), lambda: self._turn(message))
        return result if isinstance(result, Reply) else None

    async def _turn(self, message: InboundMessage) -> Reply | Held | Silent:
        started = time.perf_counter()
        account, conversation = await self._people.resolve(message)
        claims = self._recovery.claims
        if claims is not None:
            # A shared database: a conversation's turns run in the one process that holds it; one taken over
            # from a process that died or stopped is recovered first (its private interval closed, never resumed).
            claim = await claims.claim(conversation.id)
            if claim is None:
                log.info("conversation %s is held by another process: not handled here", conversation.id)
                return Silent(Silence.HELD_ELSEWHERE)
            if claim.taken_over:
                await self._recovery.taken_over([conversation.id])
        turn = Turn(message, account, conversation, restart_notice=self._recovery.restart_notice(conversation.id))
        # The event's kind and mode, decided once (core/turn/gate.py); nothing below asks again.
        event = await self._gate.admit(turn)
        if event.kind in (EventKind.COMMAND, EventKind.UNKNOWN_COMMAND, EventKind.MISTYPED):
            await self._flush_burst(conversation.id)  # a burst never spans a command
        try:
            try:
                reply = await self._dispatch(turn, event)
            except _NotAsAssumed:
                # Normal mode was assumed and its write refused (a segment is open after all) or failed:
                # nothing of the event was written; it is admitted again, its mode read this time.
                event = await self._gate.admit(turn, assume=False)
                reply = await self._dispatch(turn, event)
        except IntervalEnded:
            # Its private interval expired while it was answered: nothing of it is written or sent,
            # not even an apology (the outbox withdrew what its answer showed).
            log.info("conversation %s: the interval of a %s ended before its answer", conversation.id, event.kind)
            return Silent(Silence.INTERVAL_ENDED)
        if not isinstance(reply, Reply):
            return reply
        self._recovery.noticed(conversation.id)
        log.info(
            "conversation %s: %s of %d chars answered with %d chars in %.0f ms",
            conversation.id,
            event.kind,
            len(message.text),
            len(reply.text),
            (time.perf_counter() - started) * 1e3,
        )
        return reply

    async def _dispatch(self, turn: Turn, event: Event) -> Reply | Held | Silent:
        state, kind = event.state, event.kind
        # Every answer below is written in the interval the event was made in (state.segment_id): the
        # schema (0011) refuses a delivery of a conversation with an open interval that does not name it.
        if event.restarted is not None and not _private_mode_runs(event):
            return await self._keep_unread(turn, event, event.restarted)
        if kind is EventKind.EDIT:
            edited = await edits.answer_edit(
                turn,
                state,
                edits=self._edits,
                timeline=self._timeline,
                quotes=self._quotes,
                clock=self.clock,
                responder=self._responder,
            )
            return _or_silent(edited, Silence.NO_ANSWER)  # applied or dropped, without an answer
        if kind is EventKind.COMMAND and event.info is not None and event.command is not None:
            ran = await self._commands.run(turn, event.info, event.command.args, state)
            return _or_silent(ran, Silence.STORED_ALREADY)  # a redelivered command ran already
        if kind is EventKind.MISTYPED:
            # Not stored, not sent to the model, not quoted: it may carry the passphrase or a code.
            return await self._responder.finish(
                turn, MISTYPED_LOOKALIKE, segment_id=state.segment_id, delete_inbound=True, queued=not state.unreadable
            )
        if state.unreadable:
            # It may belong to an open private interval: stored nowhere, shown to no model, and its
            # answer is no outbox row (which interval it would belong to cannot be known).
            return await self._responder.finish(turn, copy.MODE_UNREADABLE, queued=False)
        if kind is EventKind.UNKNOWN_COMMAND and event.command is not None:
            # Not stored; the answer names the command, words typed in this mode: it lives in its interval.
            return await self._responder.finish(
                turn, UNKNOWN_COMMAND.format(name=event.command.name), segment_id=state.segment_id
            )
        return await self._chat(turn, state)

    async def _keep_unread(self, turn: Turn, event: Event, closed: ClosedByRestart) -> Reply | Silent:
        """An event made inside an interval a restart closed since: kept there unread (a message is
        not read, a command is not run, an edit is not applied). Only a command private mode itself
        runs (/mode, /normal, /private, /forget private ...) runs now, in the mode the conversation
        is in: it writes nothing that outlives an interval, and its answer quotes none of its words."""
        message = turn.message
        if event.kind is EventKind.EDIT:
            log.info("conversation %s: an edit made before the restart was dropped", turn.conversation.id)
            return Silent(Silence.NO_ANSWER)
        secret = carries_secret(message.text)
        if event.kind is EventKind.MESSAGE:
            stored: str | None = unread_text(message)  # media: markers and caption only, nothing fetched
            row = "chat"
        elif event.kind is EventKind.MISTYPED:
            stored, row = None, "command"
        else:
            command = event.command
            stored = f"/{command.name} [redacted]" if (secret and command is not None) else message.text
            row = "command"
        kept = await self._recovery.keep_unread(
            turn, closed, stored=stored, kind=row, answer_segment=event.state.segment_id, delete_inbound=secret
        )
        return _or_silent(kept, Silence.STORED_ALREADY)  # None: stored already (a redelivery)

    async def _chat(self, turn: Turn, state: ModeState) -> Reply | Held | Silent:
        conversation, message = turn.conversation, turn.message
        segment_id = state.segment_id
        # Media are read once the mode is known: their text (marker, caption, transcript) is stored
        # in this mode and segment; their bytes are never stored (core/turn/media.py).
        media = await self.media.read(message, conversation.id, private=state.is_private) if message.media else None
        # Who forwarded it, what it quotes (as this mode may read it), and in a group who speaks.
        said = dataclasses.replace(message, text=media.text) if media else message
        composed = await quotes.compose(self._quotes, conversation, said, visible_segment=segment_id)
        # A message answered at once (no burst window to wait in, no media) has its context read while it is
        # being stored: the read and the commit overlap, and the context is the one a read after the commit
        # gives (ContextAssembler.assemble). A burst's end, or media, read after it as before.
        ahead = None
        if media is None and not (self._bursts.enabled and self._responder.delivers(message.platform)):
            ahead = asyncio.ensure_future(self._responder.read_ahead(conversation, state))
        try:
            # Stored before the provider is called: a provider failure loses nothing.
            message_id = await self._inbox.add_inbound(
                conversation.id,
                composed.text,
                self.clock.now(),
                segment_id=segment_id,
                account_id=turn.account.id,
                platform_message_id=message.message_id,
                said=composed.said,
                assumed_normal=state.assumed,
            )
        except BaseException as exc:
            _dropped(ahead)
            if state.assumed and isinstance(exc, Exception):  # PrivateWriteRefused, or the store failing
                raise _NotAsAssumed from exc
            raise
        if message_id is None:
            _dropped(ahead)
            log.info("conversation %s: message %s is stored already", conversation.id, message.message_id)
            return Silent(Silence.STORED_ALREADY)
        # Forwarded words normal mode may not read: the person is told once (per conversation and
        # run) to type again what should be known. Never stored, so never mirrored.
        told: tuple[str, ...] = ()
        if composed.unread_forward and not state.is_private and conversation.id not in self._told_forwards:
            self._told_forwards.add(conversation.id)
            told = (copy.FORWARD_NOT_READ,)
        # Plain words wait for the rest of a burst; media with images or lines of their own do not
        # (the burst held before them is answered first, so its timer cannot answer it twice).
        plain = not told and (media is None or (media.answerable and not media.images and not media.notes))
        if self._bursts.enabled and self._responder.delivers(message.platform):
            if plain:
                self._bursts.hold(conversation.id, HeldTurn(turn, state, message_id))
                return Held(self._bursts.seconds)
            await self._flush_burst(conversation.id)
        if media is not None and not media.answerable:  # a sticker, a photo the model cannot see ...
            return await self._responder.finish(
                turn,
                with_notice(state, media.reply),
                stored_text=media.reply,
                segment_id=segment_id,
                answers=message_id,
            )
        read = None if ahead is None else ReadAhead(ahead, message_id, composed.text)
        try:
            return await self._responder.answer(turn, state, message_id, media, told=told, ahead=read)
        finally:
            _dropped(ahead)  # used and done by now, unless the answer failed before its first request

    # --- bursts -------------------------------------------------------------

    def _burst_quiet(self, conversation_id: int, generation: int) -> None:
        """A burst's window passed (or the stop came): its end is one more event of its lane."""
        held = self._bursts.peek(conversation_id)
        if held is None:
            return
        message = held.item.turn.message
        self._lanes.submit(
            _key_of(message.platform, message.chat_id), lambda: self._burst_ended(conversation_id, generation)
        )

    async def _burst_ended(self, conversation_id: int, generation: int) -> None:
        taken = self._bursts.take(conversation_id, generation)  # unless a newer message or a command came first
        if taken is not None:
            await self._reply_to_burst(taken)

    async def _flush_burst(self, conversation_id: int) -> None:
        """Answer a held burst now, inside the lane (before a command or a message that is not held)."""
        held = self._bursts.take(conversation_id)
        if held is not None:
            await self._reply_to_burst(held)

    async def _reply_to_burst(self, held: HeldBurst[HeldTurn]) -> None:
        burst = held.item
        conversation = burst.turn.conversation
        if burst.state.is_private:
            current = await self.valve.settle(conversation)
            if current.unreadable or current.segment_id != burst.state.segment_id:
                # Its interval ended while the burst waited: left unread, like a private turn a stop cut off.
                log.info("conversation %s: a private burst's interval ended before its answer", conversation.id)
                return
        turn = dataclasses.replace(burst.turn, restart_notice=self._recovery.restart_notice(conversation.id))
        try:
            reply = await self._responder.answer(turn, burst.state, burst.message_id)
        except IntervalEnded:
            log.info("conversation %s: a private burst's interval ended while it was answered", conversation.id)
            return
        self._recovery.noticed(conversation.id)
        log.info("conversation %s: a burst of %d messages answered in one turn", conversation.id, held.count)
        message = burst.turn.message
        self._handoff.later(message.platform, message.chat_id, reply)


def flush_share(grace: float) -> float:
    """The part of a stop's `grace` kept for the outbox's flush, after the turns (at most FLUSH_SECONDS)."""
    return min(FLUSH_SECONDS, grace / 5)


def _or_silent(reply: Reply | None, reason: Silence) -> Reply | Silent:
    return reply if reply is not None else Silent(reason)


def _private_mode_runs(event: Event) -> bool:
    """Whether private mode runs this command (see `_keep_unread`)."""
    info, command = event.info, event.command
    return info is not None and command is not None and not info.refused_while_private(command.args)


def _key_of(platform: str, chat_id: str) -> LaneKey:
    return (platform, chat_id)


class _NotAsAssumed(Exception):
    """The write of a message whose normal mode was assumed (not read) was refused or failed: nothing of it
    was written, and `Companion._turn` admits it again with its mode read."""


def _dropped(ahead: asyncio.Future[ContextReads] | None) -> None:
    """A context read ahead that no turn will use: cancelled, and its outcome (a failure too) taken when it
    ends, so that nothing is logged as never retrieved."""
    if ahead is not None:
        ahead.cancel()
        ahead.add_done_callback(_taken)


def _taken(future: asyncio.Future[ContextReads]) -> None:
    if not future.cancelled():
        future.exception()
