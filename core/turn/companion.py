"""The turn pipeline: one inbound message in, one reply out, the same for every platform."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from core.commands.registry import COMMANDS, Command, CommandCall, command_info, mistyped_secret_command, with_notice
from core.delivery.mirrors import source_label
from core.delivery.outbox import Outbox
from core.memory.capture import CaptureService
from core.memory.context import ContextAssembler, ContextBudget, Persona
from core.memory.tools import ToolContext, ToolRegistry, default_tools, run_tool_call
from core.ports import BaseProvider, BaseStore, Clock, SystemClock, Transcriber
from core.privacy.valve import ModeValve
from core.proactive.service import ProactiveConfig, ProactiveService
from core.turn import edits, quotes
from core.turn.analytics import RunRecorder
from core.turn.bursts import BurstWindow, Held
from core.turn.media import MediaReader, ReadMedia, unread_text, with_images
from core.values import copy
from core.values.command_text import parse_command
from core.values.errors import (
    LinkConflict,
    PrivateWriteRefused,
    ProviderError,
    ProviderRejected,
    ProviderRequestTooLong,
    ProviderUnavailable,
)
from core.values.locks import KeyedLocks
from core.values.model import (
    Account,
    ChatMessage,
    ChatMove,
    Completion,
    CompletionRequest,
    Conversation,
    DeliveryTarget,
    InboundMessage,
    MirrorOf,
    OpenTurn,
    Reply,
    RunRecord,
)
from core.values.modes import ModeState
from core.values.retry import Sleep

log = logging.getLogger(__name__)

OWNER_PLATFORMS = frozenset({"terminal"})  # the person at the terminal is the owner
TERMINAL_OWNER = "owner"  # the terminal's one account (adapters/terminal.py)
# A platform's clock and ours may differ a little: a message stamped this close after a restart
# is taken to be from before it (the fail-closed direction). Telegram's whole-second dates are
# rounded down, which already errs the same way.
SENT_AT_MARGIN = 0.5
TRANSITION_MAX_CHARS = 400
# A turn a restart cut off is answered when it is younger than this; older ones are asked again.
ANSWER_CUT_OFF_TURNS_WITHIN = 10 * 60.0


@dataclass(frozen=True, slots=True)
class CompanionConfig:
    persona: Persona = field(default_factory=Persona)
    passphrase_hash: str | None = None
    default_expiry: str = "24h"
    private_idle_seconds: float | None = 30 * 60.0
    allowed_accounts: frozenset[str] = frozenset()  # "platform:user_id"
    # COMPANION_OWNER: accounts that are one person with the terminal's owner from start-up.
    owner_accounts: frozenset[str] = frozenset()  # "platform:user_id"
    timezone: str = "UTC"
    budget: ContextBudget = field(default_factory=ContextBudget)
    max_tool_rounds: int = 4
    allow_private_export: bool = False
    # COMPANION_LLM_VISION: images go to the model as image input (core.turn.media).
    vision: bool = False
    # The platforms this process serves; at start-up only their open segments are closed,
    # so `companion chat` never drops a Telegram conversation out of private mode. None: all.
    platforms: frozenset[str] | None = None
    artifact_retention_seconds: float | None = 30 * 86400.0
    # The line said on leaving private mode: "constant" (copy.TRANSITION_FALLBACK, no model call)
    # or "generated" (seed 000's variable wording from a constant instruction, capped).
    transition: str = "constant"
    # Reminders and nudges: the manners' defaults (COMPANION_QUIET_HOURS, COMPANION_TIMEZONE, ...).
    proactive: ProactiveConfig = field(default_factory=ProactiveConfig)
    # COMPANION_BURST_SECONDS: messages this close together are answered in one turn (0: each alone).
    burst_seconds: float = 0.0
    # How long a stop lets a burst already being answered finish (the gateway gives its turns the
    # model timeout, COMPANION_LLM_TIMEOUT); cut off later, it stays an open turn for the next start.
    stop_grace: float = 30.0


@dataclass(frozen=True, slots=True)
class Turn:
    """Who said what, where: the resolved records of one inbound message."""

    message: InboundMessage
    account: Account
    conversation: Conversation
    restart_notice: bool = False  # a restart ended this conversation's private mode: say so first


@dataclass(frozen=True, slots=True)
class HeldTurn:
    """The newest stored message of a burst, with the mode it was stored in."""

    turn: Turn
    state: ModeState
    message_id: int


class Companion:
    """Owns the valve, the context assembler and the tool set, and runs turns.

    Turns of one conversation are strictly ordered by a per-conversation lock;
    different conversations run concurrently.
    """

    def __init__(
        self,
        store: BaseStore,
        provider: BaseProvider,
        config: CompanionConfig | None = None,
        *,
        clock: Clock | None = None,
        tools: ToolRegistry | None = None,
        outbox: Outbox | None = None,
        transcriber: Transcriber | None = None,
        burst_sleep: Sleep | None = None,
    ) -> None:
        self.config = config or CompanionConfig()
        self.media = MediaReader(vision=self.config.vision, transcriber=transcriber)
        self.store = store
        self.provider = provider
        self.clock = clock or SystemClock()
        self.tools = tools or default_tools()
        self.outbox = outbox
        self.valve = ModeValve(
            store,
            self.clock,
            passphrase_hash=self.config.passphrase_hash,
            default_expiry=self.config.default_expiry,
            idle_seconds=self.config.private_idle_seconds,
        )
        self.context = ContextAssembler(store, self.config.persona, self.config.budget, self.clock)
        self.capture = CaptureService(store, provider, self.clock, self.config.timezone)
        # Proactive messages go out through the outbox only: none where nothing delivers (the terminal).
        self.proactive = (
            ProactiveService(store, provider, self.clock, outbox, self.context, self.config.proactive)
            if outbox is not None
            else None
        )
        self._locks: KeyedLocks[tuple[str, str]] = KeyedLocks()
        self._refused: set[str] = set()
        self._background: set[asyncio.Task[None]] = set()
        # Mirror sends of finished turns; cancelled at `drain` (their rows stay pending for the next start).
        self._sending: set[asyncio.Task[None]] = set()
        # Conversations whose private mode the restart ended: their next reply says so first.
        self._restart_closed: set[int] = set()
        self._resolved: dict[tuple[str, str, str], tuple[Account, Conversation]] = {}
        # Conversations whose private interval this start closed: a message sent before the start
        # belongs to that interval, also when its segment expired (was deleted) at this start.
        self._closed_at_start: set[int] = set()
        self._started_at = self.clock.now()
        self._bursts: BurstWindow[HeldTurn] = BurstWindow(
            self.config.burst_seconds, self._answer_burst, sleep=burst_sleep or asyncio.sleep
        )

    # --- lifecycle --------------------------------------------------------

    async def start(self) -> None:
        """Crash semantics first: close intervals left open, delete what expired while down
        (segments and crossing artifacts); each deletion also finishes a checkpoint a reader
        blocked before the stop, so deleted text leaves the database files."""
        self._started_at = self.clock.now()
        closed = await self.store.close_crash_open_segments(self.config.platforms, now=self._started_at)
        self._restart_closed.update(closed)
        self._closed_at_start.update(closed)
        expired = await self.store.delete_expired_segments(self.clock.now())
        await self._link_owner()
        artifacts = await self.store.delete_expired_artifacts(self.clock.now())
        if closed or expired or artifacts:
            log.info(
                "start-up: closed open segments in %d conversations, deleted %d expired segments"
                " and %d expired artifacts",
                len(closed),
                expired,
                artifacts,
            )

    async def drain(self) -> None:
        """Wait for the background work this companion started (summary folds) to finish; stop
        the mirror sends still running (their rows stay pending: the next start sends them), and
        the bursts still waiting (their messages are open turns: the next start answers them)."""
        await self._bursts.aclose(self.config.stop_grace)
        for task in self._sending:
            task.cancel()
        if self._sending:
            await asyncio.gather(*self._sending, return_exceptions=True)
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

    async def sweep(self) -> int:
        """Scheduled: delete expired segments and artifacts past their retention, and finish a
        checkpoint a reader blocked earlier (the store keeps it owed in a durable flag).
        Idle and expiry also end private mode at read time."""
        await self.store.delete_expired_artifacts(self.clock.now())
        return await self.store.delete_expired_segments(self.clock.now())

    async def answer_open_turns(self) -> int:
        """After start-up, once the adapters can send: answer each normal turn the last process
        died in (younger than ten minutes), or ask for it again (older). Returns how many."""
        # Only turns from before this start: a turn this process began is running, not cut off.
        turns = [t for t in await self.store.open_turns(self.config.platforms) if t.created_at < self._started_at]
        for open_turn in turns:
            try:
                await self._answer_open_turn(open_turn)
            except Exception as exc:  # noqa: BLE001 - one conversation must not stop the others
                log.warning(
                    "conversation %s: answering a cut-off turn failed (%s)",
                    open_turn.conversation.id,
                    type(exc).__name__,
                )
        if turns:
            log.info("start-up: %d turns cut off by the last stop were answered", len(turns))
        return len(turns)

    async def _answer_open_turn(self, open_turn: OpenTurn) -> None:
        conversation = open_turn.conversation
        message = InboundMessage(
            conversation.platform,
            conversation.chat_id,
            "",
            "",
            conversation.is_direct,
            message_id=open_turn.platform_message_id,
        )
        account = Account(open_turn.account_id or 0, conversation.person_id or 0, conversation.platform, "")
        async with self._lock_of(conversation.platform, conversation.chat_id):
            if not await self.store.turn_is_open(open_turn.message_id):
                return  # a newer message of the conversation was answered first, and closed it
            state = await self.valve.settle(conversation)
            if state.is_private or state.unreadable:
                return  # the person went on in private mode meanwhile: that turn is left unread
            turn = Turn(message, account, conversation)
            if self.clock.now() - open_turn.created_at < ANSWER_CUT_OFF_TURNS_WITHIN:
                reply = await self._answer(turn, state, open_turn.message_id)
            else:
                reply = await self._finish(
                    turn, copy.MISSED_IN_RESTART, stored_text=copy.MISSED_IN_RESTART, answers=open_turn.message_id
                )
        if reply.delivery_id is not None and self.outbox is not None:
            await self.outbox.deliver(conversation.id, reply.delivery_id)

    def command_list(self) -> list[tuple[str, str]]:
        return [(c.name, c.description) for c in COMMANDS]

    # --- access -----------------------------------------------------------

    def is_allowed(self, message: InboundMessage) -> bool:
        return (
            message.platform in OWNER_PLATFORMS
            or message.account in self.config.allowed_accounts
            or message.account in self.config.owner_accounts
        )

    def accounts_changed(self) -> None:
        """Linking or unlinking moved an account to another person: resolve every chat afresh."""
        self._resolved.clear()

    async def chat_moved(self, platform: str, old_chat_id: str, new_chat_id: str) -> ChatMove:
        """A platform moved a chat to a new id (a Telegram group upgraded to a supergroup): its
        conversation, bindings and pending deliveries follow it (`ChatStore.move_chat`, one
        transaction). Turns of either chat wait meanwhile; every chat is resolved afresh after."""
        if old_chat_id == new_chat_id:
            return ChatMove()
        first, second = sorted([(platform, old_chat_id), (platform, new_chat_id)])
        async with self._locks.of(first), self._locks.of(second):
            moved = await self.store.move_chat(platform, old_chat_id, new_chat_id, self.clock.now())
            self._resolved.clear()
        log.info(
            "%s: a chat moved to a new id: conversation %s%s, %d bindings, %d pending deliveries follow it%s",
            platform,
            moved.conversation_id,
            f" (conversation {moved.merged_conversation_id} merged into it)" if moved.merged_conversation_id else "",
            moved.bindings,
            moved.deliveries,
            " (refused: not a group conversation without private segments)" if moved.refused else "",
        )
        return moved

    async def _link_owner(self) -> None:
        """COMPANION_OWNER: the listed accounts and the terminal are one person, the owner. Refused
        (and said in the log) while a conversation of theirs is private; the next start tries again."""
        if not self.config.owner_accounts:
            return
        now = self.clock.now()
        terminal = await self.store.ensure_account("terminal", TERMINAL_OWNER, None, now)
        for item in sorted(self.config.owner_accounts):
            platform, _, user_id = item.partition(":")
            account = await self.store.ensure_account(platform, user_id, None, now)
            try:
                await self.store.merge_accounts(terminal.id, account.id, now)
            except (PrivateWriteRefused, LinkConflict) as exc:
                log.warning("COMPANION_OWNER: account %s was not linked to the owner (%s)", account.id, exc)
        self.accounts_changed()

    # --- the turn ---------------------------------------------------------

    async def handle(self, message: InboundMessage) -> Reply | None:
        """Answer one inbound message. Returns None when the companion stays silent (a
        redelivered message, a repeated refusal)."""
        if not self.is_allowed(message):
            # Nothing of it is stored; one refusal per account per run, then silence.
            if message.account in self._refused:
                return None
            self._refused.add(message.account)
            # The platform id (never the text) is what the owner needs to allow the account.
            log.warning("refused %s (add it to COMPANION_ALLOWED_USERS)", message.account)
            return Reply(copy.NOT_ALLOWED)
        async with self._lock_of(message.platform, message.chat_id):
            started = time.perf_counter()
            now = self.clock.now()
            account, conversation = await self._resolve(message, now)
            turn = Turn(message, account, conversation, restart_notice=conversation.id in self._restart_closed)
            command = parse_command(message.text)
            info = command_info(command.name) if command is not None else None
            if not message.edited and (command is not None or mistyped_secret_command(message.text)):
                await self._flush_burst(conversation.id)  # a burst never spans a command
            if message.edited:
                reply = await edits.answer_edit(self, turn)
                if reply is None:
                    return None
            elif command is not None and info is not None:
                reply = await self._command(turn, info, command.args)
            elif mistyped_secret_command(message.text):
                # Not stored, not sent to the model, not quoted: a mistyped or look-alike /private
                # or /link (`/privte`, a Cyrillic er for the p) may carry the passphrase or a code.
                reply = await self._finish(
                    turn,
                    "That looked like a mistyped /private or /link; nothing of that message was kept. "
                    "/help lists the commands.",
                    delete_inbound=True,
                )
            elif command is not None:
                # Not stored, not sent to the model.
                reply = await self._finish(turn, f"I don't know /{command.name}. /help lists the commands.")
            else:
                reply = await self._chat(turn)
                held = self._bursts.peek(conversation.id)
                if reply is None and held is not None and held.item.turn.message is message:
                    return None  # stored; answered with the rest of its burst
            if reply is None:
                log.info(
                    "conversation %s: message %s is stored already; not handled again",
                    conversation.id,
                    message.message_id,
                )
                return None
            self._restart_closed.discard(conversation.id)
            log.info(
                "conversation %s: turn of %d chars answered with %d chars in %.0f ms",
                conversation.id,
                len(message.text),
                len(reply.text),
                (time.perf_counter() - started) * 1e3,
            )
            return reply

    def _lock_of(self, platform: str, chat_id: str) -> asyncio.Lock:
        return self._locks.of((platform, chat_id))

    async def _resolve(self, message: InboundMessage, now: float) -> tuple[Account, Conversation]:
        """The account and conversation of a message; ids never change, so they are cached
        (bounded) and the common turn reads neither table."""
        key = (message.platform, message.user_id, message.chat_id)
        known = self._resolved.get(key)
        if known is not None:
            return known
        account = await self.store.ensure_account(message.platform, message.user_id, message.user_name, now)
        conversation = await self.store.ensure_conversation(
            message.key, "direct" if message.is_direct else "group", account.person_id, now
        )
        if len(self._resolved) >= 4096:
            self._resolved.clear()
        self._resolved[key] = (account, conversation)
        return account, conversation

    async def _chat(self, turn: Turn) -> Reply | None:
        conversation, message = turn.conversation, turn.message
        if message.sent_at is not None and message.sent_at < self._started_at + SENT_AT_MARGIN:
            applies, kept = await self._keep_in_restarted_interval(turn, message.sent_at)
            if applies:
                return kept
        state = await self.valve.settle(conversation)
        if state.unreadable:
            # It may belong to an open private interval: stored nowhere, shown to no model.
            return await self._finish(turn, copy.MODE_UNREADABLE)
        segment_id = state.segment_id
        # Media are read once the mode is known: their text (marker, caption, transcript) is stored
        # in this mode and segment; their bytes are never stored (core.turn.media).
        media = await self.media.read(message, conversation.id) if message.media else None
        # Who forwarded it, what it quotes (as this mode may read it), and in a group who speaks.
        said = dataclasses.replace(message, text=media.text) if media else message
        text = await quotes.compose(self.store, conversation, said, visible_segment=segment_id)
        # Stored before the provider is called: a provider failure loses nothing.
        message_id = await self.store.add_inbound(
            conversation.id,
            text,
            self.clock.now(),
            segment_id=segment_id,
            account_id=turn.account.id,
            platform_message_id=message.message_id,
        )
        if message_id is None:
            return None
        # Plain words wait for the rest of a burst; media with images or lines of their own do not
        # (the burst held before them is answered first, so its timer cannot answer it twice).
        plain = media is None or (media.answerable and not media.images and not media.notes)
        if self._bursts.enabled and self._delivers(turn):
            if plain:
                self._bursts.hold(conversation.id, HeldTurn(turn, state, message_id))
                return None
            await self._flush_burst(conversation.id)
        if media is not None and not media.answerable:  # a sticker, a photo the model cannot see ...
            return await self._finish(
                turn,
                with_notice(state, media.reply),
                stored_text=media.reply,
                segment_id=segment_id,
                answers=message_id,
            )
        return await self._answer(turn, state, message_id, media)

    async def _answer_burst(self, conversation_id: int, generation: int) -> None:
        """The burst's quiet window passed: answer its messages in one turn, unless a newer
        message or a command came first."""
        held = self._bursts.peek(conversation_id)
        if held is None:
            return
        message = held.item.turn.message
        async with self._lock_of(message.platform, message.chat_id):
            taken = self._bursts.take(conversation_id, generation)
            if taken is not None:
                await self._reply_to_burst(taken)

    async def _flush_burst(self, conversation_id: int) -> None:
        """Answer a held burst now (the caller holds the conversation's lock)."""
        held = self._bursts.take(conversation_id)
        if held is not None:
            await self._reply_to_burst(held)

    async def _reply_to_burst(self, held: Held[HeldTurn]) -> None:
        burst = held.item
        conversation = burst.turn.conversation
        if burst.state.is_private:
            current = await self.valve.settle(conversation)
            if current.unreadable or current.segment_id != burst.state.segment_id:
                # Its interval ended while the burst waited: left unread, like a private turn a stop cut off.
                log.info("conversation %s: a private burst's interval ended before its answer", conversation.id)
                return
        turn = dataclasses.replace(burst.turn, restart_notice=conversation.id in self._restart_closed)
        reply = await self._answer(turn, burst.state, burst.message_id)
        self._restart_closed.discard(conversation.id)
        log.info("conversation %s: a burst of %d messages answered in one turn", conversation.id, held.count)
        if reply.delivery_id is not None and self.outbox is not None:
            await self.outbox.deliver(conversation.id, reply.delivery_id)

    async def _keep_in_restarted_interval(self, turn: Turn, sent_at: float) -> tuple[bool, Reply | None]:
        """A message sent before this process started, into a conversation whose private interval
        a restart closed after it was sent, belongs to that interval: stored there (masked,
        expiring with it), never read. Returns whether the rule applied, and then the reply
        (None for a redelivery)."""
        conversation, message = turn.conversation, turn.message
        if not conversation.is_direct:
            return False, None
        turn = dataclasses.replace(turn, restart_notice=False)  # the reply says it already
        # The platform's clock and ours may differ a little: the margin errs toward the interval.
        segment_id = await self.store.restart_segment_for(conversation.id, sent_at - SENT_AT_MARGIN)
        if segment_id is not None:
            message_id = await self.store.add_inbound(
                conversation.id,
                unread_text(message),  # media: markers and caption only, nothing fetched
                self.clock.now(),
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
            return True, await self._finish(turn, copy.RESTART_KEPT_PRIVATE, segment_id=segment_id, answers=message_id)
        if conversation.id in self._closed_at_start:
            # Its interval expired while the process was down and is deleted: the message is not kept.
            log.info("conversation %s: a message from an expired interval was dropped unread", conversation.id)
            return True, await self._finish(turn, copy.RESTART_KEPT_PRIVATE)
        return False, None

    async def _answer(
        self,
        turn: Turn,
        state: ModeState,
        message_id: int,
        media: ReadMedia | None = None,
        *,
        note: str | None = None,
    ) -> Reply:
        """Run the model on the view that ends with the stored user message and write the reply
        (message, run, answered turn and delivery) in one transaction. `media`: its images go
        with this request only, its notes before the answer. `note`: a constant system line after
        the view (an edit's correction)."""
        conversation = turn.conversation
        segment_id = state.segment_id
        # A private run has no analytics context at all: nothing below can write an event for it.
        recorder = None if state.is_private else RunRecorder(self.clock, conversation.id)
        context = await self.context.assemble(conversation, state)
        images = media.images if media else ()
        tail = [ChatMessage("system", note)] if note else []
        try:
            try:
                text = await self._complete_with_tools(
                    conversation, state, with_images([*context.messages, *tail], images), recorder
                )
            except ProviderRequestTooLong:
                # The server counts more than the estimate: once more, with half the window.
                log.info(
                    "conversation %s: request too long for the model; retrying with half the window", conversation.id
                )
                context = await self.context.assemble(conversation, state, shrink=2)
                text = await self._complete_with_tools(
                    conversation, state, with_images([*context.messages, *tail], images), recorder
                )
        except ProviderError as exc:
            log.warning("conversation %s: provider failed (%s)", conversation.id, type(exc).__name__)
            if recorder:
                recorder.event("error", type(exc).__name__, "error")
                await self._save_run(recorder.finish("error"))
            # Say what went wrong in words the person can act on; the message is kept in every case.
            if isinstance(exc, ProviderRejected) and exc.status in (401, 403):
                words = copy.PROVIDER_KEY_REFUSED
            elif isinstance(exc, ProviderRequestTooLong):
                words = copy.PROVIDER_TOO_LONG
            elif isinstance(exc, ProviderUnavailable):
                words = copy.PROVIDER_FAILED  # not reached, or no answer in time
            else:
                words = copy.PROVIDER_SERVER_FAILED
            return await self._finish(turn, with_notice(state, words), segment_id=segment_id, answers=message_id)
        reply = await self._finish(
            turn,
            with_notice(state, media.noted(text) if media else text),
            stored_text=text,
            segment_id=segment_id,
            answers=message_id,
            run=recorder.finish("ok") if recorder else None,
            # Asked for every answered exchange: the store's SQL alone decides there is nothing to
            # copy from a private one (no check up here that a later caller could forget).
            mirror=MirrorOf(message_id, source_label(conversation)),
        )
        if context.needs_fold:
            self._spawn(self._fold(conversation, state))
        return reply

    async def _finish(
        self,
        turn: Turn,
        text: str,
        *,
        stored_text: str | None = None,
        segment_id: int | None = None,
        answers: int | None = None,
        run: RunRecord | None = None,
        delete_inbound: bool = False,
        mirror: MirrorOf | None = None,
    ) -> Reply:
        """Write the turn's outcome and, where the platform sends through the outbox, its
        pending delivery, in one transaction; the adapter then sends and marks it. With
        `mirror`, the same transaction writes the exchange's mirror rows, sent from here."""
        if turn.restart_notice:
            text = f"{copy.RESTART_ENDED_PRIVATE}\n\n{text}"
        message = turn.message
        target = None
        if self._delivers(turn):
            # In a group the reply quotes the message it answers; a deleted one cannot be quoted.
            reply_to = None if (turn.conversation.is_direct or delete_inbound) else message.message_id
            target = DeliveryTarget(message.platform, message.chat_id, reply_to, message.thread_id)
        if stored_text is None and answers is None and target is None and run is None:
            return Reply(text, delete_inbound=delete_inbound)
        recorded = await self.store.record_reply(
            turn.conversation.id,
            text,
            self.clock.now(),
            stored_text=stored_text,
            segment_id=segment_id,
            run=run,
            answers=answers,
            target=target,
            mirror=mirror,
        )
        if recorded.mirror_ids and self.outbox is not None:
            self._send_mirrors(turn.conversation.id, recorded.mirror_ids)
        return Reply(
            text,
            delete_inbound=delete_inbound,
            delivery_id=recorded.delivery_id,
            conversation_id=turn.conversation.id,
        )

    def _send_mirrors(self, conversation_id: int, delivery_ids: tuple[int, ...]) -> None:
        """Send a turn's mirror rows in the background, each in its own lane: a slow or failing
        target never delays the reply. What is not sent now the dispatcher sends later."""
        if self.outbox is None:
            return
        task = asyncio.get_running_loop().create_task(self.outbox.deliver_all(conversation_id, delivery_ids))
        self._sending.add(task)
        task.add_done_callback(self._mirror_sent)

    def _mirror_sent(self, task: asyncio.Task[None]) -> None:
        self._sending.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("sending mirrors failed (%s); the dispatcher tries again", type(task.exception()).__name__)

    def _delivers(self, turn: Turn) -> bool:
        """Whether this turn's answer goes out through the outbox (the terminal prints it)."""
        return self.outbox is not None and self.outbox.serves(turn.message.platform)

    async def _complete_with_tools(
        self,
        conversation: Conversation,
        state: ModeState,
        messages: list[ChatMessage],
        recorder: RunRecorder | None,
    ) -> str:
        offered = self.tools.tools_for(conversation, state)
        specs = tuple(t.spec for t in offered)
        segment_id = state.segment_id
        for round_ in range(self.config.max_tool_rounds + 1):
            last = round_ == self.config.max_tool_rounds
            # Out of rounds: one last answer, with no tools to call.
            request = CompletionRequest(tuple(messages), () if last else specs)
            completion = await self._call(request, recorder)
            if not completion.tool_calls or last:
                text = completion.text.strip() or "…"
                # A reply stopped at its token limit says so, rather than reading as complete.
                return text + copy.CUT_OFF_MARKER if completion.truncated else text
            messages.append(ChatMessage("assistant", completion.text or None, completion.tool_calls))
            timezone = await self.timezone_of(conversation)
            tool_context = ToolContext(conversation, state, self.clock.now(), timezone, self.store)
            for call in completion.tool_calls:
                started = time.perf_counter()
                result = await run_tool_call(offered, call, tool_context)
                status = "error" if result.startswith("error") else "ok"
                await self.store.record_tool_operation(
                    conversation.id,
                    segment_id,
                    call.name[:64],
                    status,
                    len(call.arguments.encode()),
                    len(result.encode()),
                    self.clock.now(),
                )
                if recorder:
                    recorder.event(
                        "tool_call",
                        call.name[:64],
                        status,
                        duration_ms=(time.perf_counter() - started) * 1e3,
                        size_in=len(call.arguments.encode()),
                        size_out=len(result.encode()),
                    )
                messages.append(ChatMessage("tool", result, tool_call_id=call.id))
        raise AssertionError("unreachable")

    async def _save_run(self, run: RunRecord) -> None:
        try:
            await self.store.save_run(run)
        except Exception as exc:  # noqa: BLE001 - analytics never breaks a turn
            log.warning("analytics run could not be written (%s)", type(exc).__name__)

    async def _call(self, request: CompletionRequest, recorder: RunRecorder | None) -> Completion:
        started = time.perf_counter()
        try:
            completion = await self.provider.complete(request)
        except ProviderError:
            if recorder:
                recorder.event(
                    "provider_call", self.provider.name, "error", duration_ms=(time.perf_counter() - started) * 1e3
                )
            raise
        if recorder:
            recorder.event(
                # "cut_off": the model stopped at max_tokens; `companion report` counts them.
                "provider_call",
                self.provider.name,
                "cut_off" if completion.truncated else "ok",
                duration_ms=(time.perf_counter() - started) * 1e3,
                size_in=sum(len(m.content or "") for m in request.messages),
                size_out=len(completion.text),
            )
        # What the server counted teaches the context budget how many tokens a byte costs.
        self.context.ratio.observe(_prompt_bytes(request), completion.prompt_tokens)
        return completion

    async def _fold(self, conversation: Conversation, state: ModeState) -> None:
        async with self._lock_of(conversation.platform, conversation.chat_id):
            # Re-read the mode: the fold must run in the mode it was planned for, or not at all.
            current = await self.valve.settle(conversation)
            if current.unreadable or current.mode is not state.mode or current.segment_id != state.segment_id:
                return
            try:
                await self.context.fold(conversation, current, self.provider)
            except Exception as exc:  # noqa: BLE001 - e.g. the segment expired meanwhile; retried next turn
                log.warning("summary fold for conversation %s failed (%s)", conversation.id, type(exc).__name__)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # --- commands ---------------------------------------------------------

    async def _command(self, turn: Turn, info: Command, args: str) -> Reply | None:
        carries_secret = info.secret and bool(args)
        stored = f"/{info.name} [redacted]" if carries_secret else turn.message.text
        state = await self.valve.settle(turn.conversation)
        if state.unreadable and not info.runs_when_unreadable:
            return await self._finish(turn, copy.MODE_UNREADABLE, delete_inbound=carries_secret)
        try:
            stored_id = await self.store.add_message(
                turn.conversation.id,
                "user",
                stored,
                self.clock.now(),
                segment_id=state.segment_id,
                kind="command",
                account_id=turn.account.id,
                platform_message_id=turn.message.message_id,
            )
        except Exception as exc:  # noqa: BLE001 - /normal must work even when storage misbehaves
            log.warning("storing a /%s command failed (%s)", info.name, type(exc).__name__)
        else:
            if stored_id is None:
                return None  # a redelivered command ran already
        if state.is_private and info.refused_while_private(args):
            reply = Reply(copy.PRIVATE_REFUSES.format(command=info.name))
        else:
            reply = await info.handler(CommandCall(self, turn, info.name, args, state))
        try:
            # An outbox row of the answer stays in the private thread when the command left it private.
            segment = await self.store.open_segment_of(turn.conversation.id) if self._delivers(turn) else None
            final = await self._finish(
                turn, reply.text, segment_id=segment.id if segment else None, delete_inbound=carries_secret
            )
        except Exception as exc:  # noqa: BLE001 - the answer is sent directly, without an outbox row
            log.warning("writing the delivery of a /%s answer failed (%s)", info.name, type(exc).__name__)
            text = f"{copy.RESTART_ENDED_PRIVATE}\n\n{reply.text}" if turn.restart_notice else reply.text
            final = Reply(text, delete_inbound=carries_secret)
        final.attachments = reply.attachments
        final.confirm = reply.confirm
        return final

    async def say_transition_line(self, conversation: Conversation) -> str:
        """The line said on leaving private mode, stored in normal mode like any reply."""
        line = await self.transition_line()
        try:
            await self.store.add_message(conversation.id, "assistant", line, self.clock.now())
        except Exception as exc:  # noqa: BLE001 - leaving must work even when storage misbehaves
            log.warning("storing the transition line failed (%s)", type(exc).__name__)
        return line

    async def transition_line(self) -> str:
        """Fixed intent. By default the constant line itself; with `transition="generated"`, variable
        wording from a constant input that holds no conversation content (the constant on failure)."""
        if self.config.transition != "generated":
            return copy.TRANSITION_FALLBACK
        request = CompletionRequest(
            messages=(ChatMessage("system", copy.TRANSITION_INSTRUCTION), ChatMessage("user", "I'm back.")),
            purpose="transition",
            temperature=1.0,
            max_tokens=120,
        )
        try:
            completion = await asyncio.wait_for(self.provider.complete(request), 30)
        except (TimeoutError, ProviderError) as exc:
            log.info("transition line fell back to the constant (%s)", type(exc).__name__)
            return copy.TRANSITION_FALLBACK
        text = completion.text.strip()
        # A small model may run on and off its instruction: a long answer is not used.
        return text if text and len(text) <= TRANSITION_MAX_CHARS else copy.TRANSITION_FALLBACK

    async def timezone_of(self, conversation: Conversation) -> str:
        """The person's time zone (/timezone), else the configured one: reminders' clock times are theirs."""
        if conversation.person_id is None:
            return self.config.timezone
        try:
            prefs = await self.store.proactive_prefs(conversation.person_id)
        except Exception as exc:  # noqa: BLE001 - a read failure falls back to the configured zone
            log.warning("reading a person's time zone failed (%s)", type(exc).__name__)
            return self.config.timezone
        return prefs.timezone or self.config.timezone

    def format_time(self, timestamp: float) -> str:
        from datetime import datetime
        from zoneinfo import ZoneInfo

        moment = datetime.fromtimestamp(timestamp, ZoneInfo(self.config.timezone))
        return moment.strftime("%Y-%m-%d %H:%M %Z")


def _prompt_bytes(request: CompletionRequest) -> int:
    """The UTF-8 size of what a request asks the model to read (messages and tool specs)."""
    size = sum(len((m.content or "").encode("utf-8", "replace")) for m in request.messages)
    size += sum(len(c.arguments.encode("utf-8", "replace")) for m in request.messages for c in m.tool_calls)
    return size + sum(len(t.name) + len(t.description) + len(repr(t.parameters)) for t in request.tools)
