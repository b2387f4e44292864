"""The Telegram intake: long polling or a webhook's inbox, each update handed to the core in order, and settled once handled.

Long polling is the default: it needs no public HTTPS endpoint, and the restart guarantees rest on
confirming offsets ourselves. With a webhook (COMPANION_TELEGRAM_WEBHOOK_URL; adapters/telegram/webhook.py)
the HTTP service stores each delivered update in the inbox (`accept`, durable before its 200), and this
intake takes the stored updates in update-id order and routes each exactly as a polled one (`_take`,
`_route`, `_settle`), settling it in the inbox (its body deleted) once the core's outcome is in; rows a
crash left are taken at the next start. getUpdates is never called then.

With polling, an update is confirmed to Telegram (the getUpdates offset) and recorded in the store
(the update ledger, written at most every LEDGER_SECONDS and at the stop; a press at once) only once
the core's outcome for it is in, so updates that arrived while the gateway was down are handled once,
and one a kill left unrecorded comes again as a no-op (the inbox holds its message); an update the
stop cut off stays unconfirmed, and Telegram offers it again after the restart.

Updates are routed here, not through python-telegram-bot's dispatcher (whose awaits could reorder
them): each fetched update gets a task, in the order fetched, and nothing a task does before it
calls `ChatCore.receive` can suspend (the move lock is free, or FIFO while a move runs), so the
core receives the updates in Telegram's order; the core's lanes keep each conversation's order.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta

from telegram import Message, Update
from telegram.constants import ChatType
from telegram.error import Conflict, InvalidToken, NetworkError, RetryAfter, TelegramError
from telegram.ext import filters

from adapters.telegram.connection import TelegramConnection, retry_after_seconds
from adapters.telegram.context import reply_context
from adapters.telegram.ledger import UpdateLedger
from adapters.telegram.media import MEDIA, media_of
from adapters.telegram.sender import TelegramSender
from adapters.telegram.text import Entity, group_text
from adapters.telegram.updates import UnparsableUpdate
from adapters.telegram.webhook import InboxReader, StoredUpdate, WebhookSetup
from core.ports.chat import ChatCore
from core.values.edge import EdgeSettings, Outcome, acknowledged, held_elsewhere
from core.values.model import InboundMessage

log = logging.getLogger(__name__)

# The update ledger is written at most once per this many seconds, and at the stop, off the turns: a
# kill loses at most the marks of that window, and Telegram offers those updates again, where the
# inbox makes each stored message a no-op. A button press (no inbox key holds it) is written at once.
LEDGER_SECONDS = 0.5

# What getUpdates asks for: messages, edits of them (issue 15), and presses of confirmation buttons.
ALLOWED_UPDATES = ["message", "edited_message", "callback_query"]

# What is handed to the core: messages with words or media, and edits of words and of captions (a
# caption is a media message's words: core/turn/edits.py). Service messages (a member joining) are not.
_MESSAGES = filters.UpdateType.MESSAGE & (filters.TEXT | MEDIA)
_EDITS = filters.UpdateType.EDITED_MESSAGE & (filters.TEXT | filters.CAPTION)
# A group upgraded to a supergroup: followed whatever else the update holds.
_MIGRATION = filters.StatusUpdate.MIGRATE


class TelegramIntake:
    """core.ports.BaseIntake for Telegram: one bot's updates, by long polling or from a webhook's inbox.

    Args:
        core: the core's entry (its commands are registered with setMyCommands; its store keeps
            the update ledger).
        connection: the bot's connection, opened by `start` and closed by `aclose`.
        sender: the platform's sender, which learns the chats that moved.
        edge: the settings every platform shares (`stop_grace` bounds `aclose`'s wait; the
            polling's pause after a failed getUpdates starts at `send_backoff`).
        on_fatal: called with one line when Telegram refuses the token while running.
        poll_timeout, repoll_interval: getUpdates' long-poll timeout, and the longest pause
            between polls while updates are in hand.
        stale_after, monotonic: `ready()` says not ready once no long poll completed for this
            many seconds (by this clock).
        webhook: the webhook and its inbox (None: long polling).
    """

    name = "telegram"

    def __init__(
        self,
        core: ChatCore,
        connection: TelegramConnection,
        sender: TelegramSender,
        edge: EdgeSettings,
        *,
        on_fatal: Callable[[str], None] | None = None,
        poll_timeout: float = 25.0,
        repoll_interval: float = 1.0,
        stale_after: float = 120.0,
        monotonic: Callable[[], float] = time.monotonic,
        webhook: WebhookSetup | None = None,
    ) -> None:
        self._core = core
        self._webhook = webhook
        self._inbox = (
            None
            if webhook is None
            else InboxReader(
                webhook,
                sleep=connection.sleep,
                backoff=edge.send_backoff,
                repoll_interval=repoll_interval,
                monotonic=monotonic,
            )
        )
        self._connection = connection
        self._sender = sender
        self._edge = edge
        self._on_fatal = on_fatal
        self._poll_timeout = poll_timeout
        self._repoll_interval = repoll_interval
        self._stale_after = stale_after
        self._monotonic = monotonic
        self._polled_at = 0.0  # when a getUpdates last completed (or polling began)
        self._commands = {spec.name.lower() for spec in core.commands}
        # Held while a chat is re-keyed, and while a message's chat is read and handed to the core:
        # a message from the old chat that the core takes up after the move names the new chat.
        self._moving = asyncio.Lock()
        self._poll_task: asyncio.Task[None] | None = None
        self._closing = False
        self._handling: set[asyncio.Task[None]] = set()  # one per update, until it is settled
        self._ledger = UpdateLedger()
        self._progress = asyncio.Event()
        self._persist_lock = asyncio.Lock()
        self._persisted: str | None = None
        self._persisting: asyncio.Task[None] | None = None  # the ledger's coalesced write, once due

    # --- lifecycle ------------------------------------------------------------------------

    @property
    def _state_key(self) -> str:
        # Keyed by bot id: update ids of another bot (a changed token) say nothing about this one.
        return f"telegram:offset:{self._connection.bot.id}"

    async def start(self) -> None:
        """Check the token (getMe), register the commands, and begin polling; or, with a webhook, set it
        (setWebhook) and begin taking the inbox's updates, those a crash left first.

        Raises:
            TelegramStartError: the token was rejected, the Bot API server was unreachable, or Telegram
                refused the webhook.
        """
        if self._connection.started:
            return
        self._closing = False
        await self._connection.open(self._core.commands, drop_webhook=self._webhook is None)
        try:
            if self._core.state is not None:
                self._ledger = UpdateLedger.parse(await self._core.state.get_adapter_state(self._state_key))
                self._persisted = self._ledger.dump()
            if self._webhook is not None:
                await self._webhook.register(self._connection)
        except BaseException:
            await self._connection.close()
            raise
        self._polled_at = self._monotonic()
        if self._inbox is not None:
            reading = self._inbox.run(self._begin_stored, closing=lambda: self._closing)
            self._poll_task = asyncio.create_task(reading, name="telegram-webhook-inbox")
            log.info("telegram: taking webhook updates as bot %s", self._connection.bot.id)
            return
        self._poll_task = asyncio.create_task(self._poll(), name="telegram-polling")
        log.info("telegram: polling as bot %s", self._connection.bot.id)

    async def stop_intake(self) -> None:
        """The first step of a stop: no update is fetched any more. The updates handed to the core
        are its to finish or cut off; their confirmations wait for their outcomes."""
        self._closing = True
        poll, self._poll_task = self._poll_task, None
        if poll is not None:
            poll.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poll

    async def aclose(self) -> None:
        """Stop intake, wait for the outcomes still coming (bounded: the core's stop has finished or
        cut off every turn by now), confirm what was handled (with a webhook: remove it, when its
        `removes_at_stop` says so), then close the connection; safe to call twice."""
        if not self._connection.started:
            return
        await self.stop_intake()
        handling = list(self._handling)
        if handling:
            log.info("telegram: %d updates still being answered", len(handling))
            _, late = await asyncio.wait(handling, timeout=self._edge.stop_grace)
            for task in late:  # left unconfirmed, so Telegram delivers them again after the restart
                task.cancel()
            await asyncio.gather(*handling, return_exceptions=True)
        persisting, self._persisting = self._persisting, None
        if persisting is not None:
            persisting.cancel()
            await asyncio.gather(persisting, return_exceptions=True)
        await self._persist()  # the ledger's last marks, before the offset confirms them to Telegram
        if self._webhook is not None:
            await self._webhook.unregister(self._connection)
        else:
            await self._confirm_handled()
        await self._connection.close()
        log.info("telegram: stopped")

    async def wait_lost(self) -> str:
        """Wait until polling ended on its own, and return one line saying so. Polling outlives every
        failure but a rejected token (which calls `on_fatal` first), so otherwise this is a bug.

        Raises:
            RuntimeError: the intake is not started.
        """
        poll = self._poll_task
        if poll is None:
            raise RuntimeError("the Telegram intake is not started")
        await asyncio.wait({poll})
        failure = None if poll.cancelled() else poll.exception()
        reason = f" ({type(failure).__name__})" if failure is not None else ""
        what = "taking webhook updates" if self._webhook is not None else "polling for updates"
        return f"telegram: {what} ended{reason}"

    def ready(self) -> str | None:
        """core.ports.BaseIntake: not ready before start, while stopping, and once no long poll
        (getUpdates) completed for `stale_after` seconds; with a webhook, while its inbox cannot be read."""
        if self._poll_task is None or self._closing:
            return "not polling" if self._webhook is None else "not taking webhook updates"
        if self._inbox is not None:  # nothing to go stale: Telegram delivers when it has something
            return self._inbox.failure
        waited = self._monotonic() - self._polled_at
        if waited > self._stale_after:
            return f"no long poll completed for {waited:.0f} s"
        return None

    # --- polling and restart semantics -----------------------------------------------------

    async def _poll(self) -> None:
        failures = conflicts = 0
        bot = self._connection.bot
        while not self._closing:
            waiting = bool(self._ledger.pending)
            self._progress.clear()  # before the request: a turn that ends during it is not missed
            try:
                updates = await bot.get_updates(
                    offset=self._ledger.next_offset,
                    # While a turn runs its update stays unconfirmed and comes back at once:
                    # poll briefly then, or the next chat would wait for that turn.
                    timeout=timedelta(seconds=0 if waiting else self._poll_timeout),
                    allowed_updates=ALLOWED_UPDATES,
                )
            except RetryAfter as exc:
                await self._connection.sleep(retry_after_seconds(exc))
                continue
            except InvalidToken:
                # Revoked while running: polling again cannot help, and would go on for ever.
                log.error("telegram: the Bot API rejected the token while running; polling stops")
                if self._on_fatal is not None:
                    self._on_fatal(
                        "COMPANION_TELEGRAM_TOKEN: the Bot API rejected the token while running "
                        "(revoked?); set a valid token and start again"
                    )
                return
            except Exception as exc:  # noqa: BLE001 - polling must outlive every failure but cancellation
                failures += 1
                conflicts = conflicts + 1 if isinstance(exc, Conflict) else 0
                if conflicts == 3:  # a streak, not one overlap of a restart's long poll: say it once
                    log.error(
                        "telegram: another instance is polling this bot token (409 Conflict); "
                        "stop the other process (or the other host) using it; still retrying"
                    )
                level = logging.WARNING if isinstance(exc, (NetworkError, Conflict)) else logging.ERROR
                log.log(level, "telegram: getUpdates failed (%s), attempt %d", type(exc).__name__, failures)
                await self._connection.sleep(min(self._edge.send_backoff * 2 ** min(failures, 7), 60.0))
                continue
            self._polled_at = self._monotonic()
            if conflicts >= 3:
                log.info("telegram: polling again after %d 409 Conflicts", conflicts)
            failures = conflicts = 0
            updates = self._connection.fetched(updates)  # those its connection parsed
            fresh = [u for u in updates if not self._ledger.is_known(u.update_id)]
            for update in fresh:
                self._take(update)
            await self._skip(self._connection.take_unparsable())
            if self._ledger.pending:
                # Until a turn ends (its update can then be confirmed) or the interval passes (to
                # take other chats' messages): polling at once would only fetch the same updates.
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation
                # that arrives as the event is set, and aclose would then wait out a long poll.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._repoll_interval):
                        await self._progress.wait()

    # --- the webhook's inbox (adapters/telegram/webhook.py `InboxReader`) -------------------------

    async def accept(self, update_id: int, body: str) -> bool:
        """A delivered update (its id and JSON), stored durably in the inbox before its 200 is answered;
        False: it is stored already (a redelivery), a no-op. On the core's loop (the HTTP service's
        route calls it through its bridge); before the start too: the start takes what is stored.

        Raises:
            RuntimeError: not in webhook mode. Whatever the store raises (nothing stored: no 200).
        """
        if self._inbox is None:
            raise RuntimeError("the Telegram intake is polling, not taking webhook updates")
        return await self._inbox.accept(update_id, body)

    @property
    def inbox_depth(self) -> int:
        """Webhook mode: the updates stored and not yet settled (read by /readyz and /metrics); else 0."""
        return self._inbox.depth if self._inbox is not None else 0

    async def _begin_stored(self, row: StoredUpdate) -> None:
        """A stored update taken from the inbox, begun as a polled one (`_take`), in the inbox's order."""
        update = self._connection.parse(row.body)
        if isinstance(update, UnparsableUpdate):
            log.warning(
                "telegram: update %s (%s, %d bytes) cannot be parsed; skipped", row.update_id, update.kind, update.size
            )
            await self._settled(row.update_id)
            return
        self._take(update)

    async def _settled(self, update_id: int) -> None:
        """Webhook mode: the core's outcome for the update is in; its row is settled (body deleted)."""
        if self._inbox is not None:
            await self._inbox.settled(update_id)

    async def _skip(self, unparsable: list[UnparsableUpdate]) -> None:
        """Settle each update python-telegram-bot could not parse, with one log line of its id, kind and
        size (never its content): fetching it again cannot help. Called after the rest of its batch is
        taken, so that an earlier update still being answered holds the offset back."""
        skipped = False
        for update in unparsable:
            if update.update_id is not None and self._ledger.is_known(update.update_id):
                continue
            log.warning(
                "telegram: update %s (%s, %d bytes) cannot be parsed; skipped",
                update.update_id,
                update.kind,
                update.size,
            )
            if update.update_id is not None:
                self._ledger.begin(update.update_id)
                self._ledger.finish(update.update_id)
                skipped = True
        if skipped:
            await self._persist()

    def _take(self, update: Update) -> None:
        """Begin an update: its task starts after the ones of the updates fetched before it."""
        self._ledger.begin(update.update_id)
        task = asyncio.get_running_loop().create_task(self._settle(update), name="telegram-update")
        self._handling.add(task)
        task.add_done_callback(self._handling.discard)

    async def _settle(self, update: Update) -> None:
        """Hand the update to the core, then confirm it unless the stop cut it off."""
        try:
            outcome = await self._route(update)
        except Exception as exc:  # noqa: BLE001 - one bad update must not stop the others
            log.error("telegram: update %s failed (%s)", update.update_id, type(exc).__name__)
            outcome = None
        if outcome is not None and not acknowledged(outcome):
            if self._inbox is not None and held_elsewhere(outcome):
                self._inbox.left(update.update_id)  # stored for the process holding its conversation
            return  # cut off by the stop: left unconfirmed, Telegram offers it again after the restart
        self._ledger.finish(update.update_id)
        await self._settled(update.update_id)
        self._progress.set()
        if update.callback_query is not None:
            await self._persist()  # a press redelivered would run its command again: no inbox key holds it
        elif self._persisting is None:
            self._persisting = asyncio.get_running_loop().create_task(self._persist_later(), name="telegram-ledger")

    async def _persist_later(self) -> None:
        """The ledger's coalesced write: every update finished within LEDGER_SECONDS in one write."""
        await asyncio.sleep(LEDGER_SECONDS)
        self._persisting = None  # an update finished from now on is in the next write
        await self._persist()

    async def _persist(self) -> None:
        state = self._core.state
        if state is None:
            return
        async with self._persist_lock:
            value = self._ledger.dump()
            if value == self._persisted:
                return
            try:
                await state.set_adapter_state(self._state_key, value, time.time())
            except Exception as exc:  # noqa: BLE001 - Telegram still holds the unconfirmed updates
                log.warning("telegram: storing the update ledger failed (%s)", type(exc).__name__)
                return
            self._persisted = value

    async def _confirm_handled(self) -> None:
        """Tell Telegram what was handled, so it does not offer it again after a restart."""
        offset = self._ledger.next_offset
        if offset is None or not self._connection.started:
            return
        try:
            bot = self._connection.bot
            await bot.get_updates(offset=offset, timeout=0, limit=1, allowed_updates=ALLOWED_UPDATES)
        except TelegramError as exc:  # the stored ledger still skips them
            log.info("telegram: confirming handled updates failed (%s)", type(exc).__name__)
        self._connection.fetched(())  # updates fetched only to confirm: the next start takes them
        self._connection.take_unparsable()  # an update fetched only to confirm: the next start skips it

    # --- one update ---------------------------------------------------------------------------

    async def _route(self, update: Update) -> Outcome | None:
        """The core's outcome for `update`; None when nothing of it went to the core."""
        if _MIGRATION.check_update(update):
            await self._on_migrate(update)
            return None
        if update.callback_query is not None:
            return await self._on_press(update)
        if not (_MESSAGES.check_update(update) or _EDITS.check_update(update)):
            return None
        async with self._moving:  # a chat being re-keyed: its late messages follow it (see _on_migrate)
            event = self._event(update)
            if event is None:
                return None
            outcome = self._core.receive(event)
        return await outcome

    def _event(self, update: Update) -> InboundMessage | None:
        """The core's view of a message or an edit, in the chat it belongs to now."""
        message = update.message or update.edited_message
        if message is None:
            return None
        inbound = self._followed(self._inbound(message))
        if inbound is None:
            return None
        # Quotes, forwards and edits (issue 15): adapters/telegram/context.py reads them.
        edited = update.edited_message is not None
        inbound = dataclasses.replace(inbound, **reply_context(message, self._connection.bot.id), edited=edited)
        if edited and message.edit_date is not None:  # an edit's mode is that of the moment it was made
            inbound = dataclasses.replace(inbound, sent_at=message.edit_date.timestamp())
        log.info(
            "telegram: update %s, %s chat, %d chars",
            update.update_id,
            "direct" if inbound.is_direct else "group",
            len(inbound.text),
        )
        return inbound

    async def _on_press(self, update: Update) -> Outcome | None:
        """A confirmation button pressed: its data goes to the core as the presser's (the core reads
        the command it carries, core.commands.registry.command_of); the press is answered at once
        (answerCallbackQuery stops the button's spinner), whatever the core makes of it."""
        query = update.callback_query
        if query is None:
            return None
        outcome: Awaitable[Outcome] | None = None
        message = query.message
        if query.data is not None and message is not None:
            chat, user = message.chat, query.from_user
            thread = message.message_thread_id if isinstance(message, Message) and message.is_topic_message else None
            event = InboundMessage(
                platform="telegram",
                chat_id=str(chat.id),
                user_id=str(user.id),
                text=query.data,
                is_direct=chat.type == ChatType.PRIVATE,
                message_id=None,  # a press has no message; the update ledger handles each update once
                user_name=user.first_name,
                thread_id=str(thread) if thread is not None else None,
                pressed=True,
            )
            log.info("telegram: update %s, a confirmation button", update.update_id)
            async with self._moving:  # in the order of the updates, as a message
                outcome = self._core.receive(event)
        try:
            await self._connection.call("answerCallbackQuery", query.answer)
        except TelegramError as exc:  # too late or answered already: the press is still honoured
            log.info("telegram: answerCallbackQuery failed (%s)", type(exc).__name__)
        return None if outcome is None else await outcome

    async def _on_migrate(self, update: Update) -> None:
        """The service messages of a group upgraded to a supergroup (`migrate_to_chat_id` in the old
        chat, `migrate_from_chat_id` in the new one): the conversation follows before anything is
        sent there. Either one does it; the second finds it done."""
        message = update.message
        if message is None:
            return
        if message.migrate_to_chat_id is not None:
            old, new = message.chat_id, message.migrate_to_chat_id
        elif message.migrate_from_chat_id is not None:
            old, new = message.migrate_from_chat_id, message.chat_id
        else:
            return
        log.info("telegram: update %s: chat %s was upgraded to supergroup %s", update.update_id, old, new)
        async with self._moving:
            try:
                await self._core.chat_moved(self.name, str(old), str(new))
            except Exception as exc:  # noqa: BLE001 - the next send to the old id (ChatMigrated) tries again
                log.warning("telegram: re-keying chat %s to %s failed (%s)", old, new, type(exc).__name__)
                return
            self._sender.remember_move(str(old), new)

    def _followed(self, inbound: InboundMessage | None) -> InboundMessage | None:
        """A late message of a chat re-keyed already (sent before the upgrade, handled after) belongs
        to the new chat; its inbox key carries the old chat id, as the store's re-key writes it."""
        moved = self._sender.moved_to(inbound.chat_id) if inbound is not None else None
        if inbound is None or moved is None:
            return inbound
        return dataclasses.replace(
            inbound, chat_id=str(moved), message_id=f"{inbound.chat_id}/{inbound.message_id}", thread_id=None
        )

    def _inbound(self, message: Message) -> InboundMessage | None:
        """The core's view of a message, or None when the companion should not answer it."""
        bot = self._connection.bot
        user = message.from_user
        media = media_of(message, bot)  # a caption is the text of a media message
        written = message.text if message.text is not None else ((message.caption or "") if media else None)
        if written is None or user is None or user.is_bot:
            return None
        if message.chat.type == ChatType.PRIVATE:
            text, is_direct = written, True
        elif message.chat.type in (ChatType.GROUP, ChatType.SUPERGROUP):
            replied = message.reply_to_message
            entities = message.entities if message.text is not None else message.caption_entities
            grouped = group_text(
                written,
                [Entity(e.type, e.offset, e.length, e.user.id if e.user else None) for e in entities],
                username=bot.username,
                bot_id=bot.id,
                replied_to_bot=bool(replied and replied.from_user and replied.from_user.id == bot.id),
                commands=self._commands,
            )
            if grouped is None:
                return None
            text, is_direct = grouped, False
        else:
            return None
        return InboundMessage(
            platform="telegram",
            chat_id=str(message.chat_id),
            user_id=str(user.id),
            text=text,
            is_direct=is_direct,
            message_id=str(message.message_id),
            user_name=user.first_name,
            sent_at=message.date.timestamp() if message.date else None,
            thread_id=str(message.message_thread_id) if message.is_topic_message else None,
            media=media,
        )
