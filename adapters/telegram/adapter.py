"""TelegramAdapter: python-telegram-bot's Application, long polling, updates converted to core values at the edge."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import re
import time
from collections import deque
from collections.abc import Callable
from datetime import timedelta
from urllib.parse import quote

from telegram import BotCommand, Message, Update
from telegram.constants import ChatAction, ChatType
from telegram.error import InvalidToken, NetworkError, RetryAfter, TelegramError
from telegram.ext import Application, CallbackQueryHandler, ContextTypes, ExtBot, MessageHandler, filters

from adapters.telegram.buttons import TelegramButtons, keyboard
from adapters.telegram.context import reply_context
from adapters.telegram.delivery import (
    Delivery,
    TelegramDeliveryError,
    is_permanent,
    parts_of,
    retry_after_seconds,
)
from adapters.telegram.ledger import UpdateLedger
from adapters.telegram.media import MEDIA, media_of
from adapters.telegram.streaming import TelegramStreamer, quotable
from adapters.telegram.text import Entity, group_text
from adapters.telegram.updates import BotAPIRequest, UnparsableUpdate, UpdatesRequest
from core.commands.registry import carries_secret
from core.turn.link import CoreLink
from core.values.copy import DELETE_SECRET_NOTE, HANDLER_FAILED
from core.values.errors import CompanionError, DeliveryFailed
from core.values.model import InboundMessage, OutboundDelivery, Reply
from core.values.retry import Sleep

log = logging.getLogger(__name__)

# What getUpdates asks for: messages, edits of them (issue 15), and presses of confirmation
# buttons (adapters/telegram/buttons.py).
ALLOWED_UPDATES = ["message", "edited_message", "callback_query"]


# A message answered with None may be held for the rest of its burst only when it is this recent
# (seconds, by its Telegram date): typing goes on for it (see `typing_hold`).
_HELD_IF_SENT_WITHIN = 10.0


class TelegramStartError(CompanionError):
    """Telegram rejected the token or could not be reached at start-up; the message is one line."""


class TelegramAdapter:
    """Talks through one Telegram bot; implements core.ports.BaseChatAdapter.

    Updates are fetched by long polling. There is no webhook mode: polling needs no public
    HTTPS endpoint, and the restart guarantees rest on confirming offsets ourselves. An
    update is confirmed to Telegram (the getUpdates offset) and recorded in `state` only
    once it was handled, so updates that arrived while the gateway was down are handled
    once and a restart does not handle one again. Turns of one chat run in order;
    different chats run concurrently. Replies go out through `Delivery` (flood control,
    retries, Markdown as entities in parts).

    Args:
        token: the bot token (COMPANION_TELEGRAM_TOKEN).
        link: the core: the turn handler, the commands (registered with setMyCommands), the
            chat-moved callback (a group upgraded to a supergroup), the outbox and the state
            store that keeps the update ledger.
        base_url: a Bot API server's base URL with the /bot part (COMPANION_TELEGRAM_BASE_URL);
            None: api.telegram.org.
        on_fatal: called with one line when Telegram refuses the token while running.
        stop_grace: seconds the turns still running at `aclose()` may take; a turn cut off
            stays unconfirmed, and Telegram offers its update again after the restart.
        poll_timeout, repoll_interval: getUpdates' long-poll timeout, and the longest pause
            between polls while updates are in hand.
        typing_delay, typing_interval: when the typing indicator first shows, and how often it
            is renewed. It shows until the reply's first message is out: a reply shown while
            written stops it with its first piece.
        typing_hold: how long the typing indicator goes on after a message the core held for the
            rest of its burst (answered later, in its conversation's lane), at most: the reply's
            first message stops it sooner.
        read_timeout, max_attempts, backoff, sleep: the requests' read timeout and the retries
            of a send (`Delivery`).
        stale_after, monotonic: `ready()` says not ready once no long poll completed for this
            many seconds (by this clock).
    """

    name = "telegram"

    def __init__(
        self,
        token: str,
        link: CoreLink,
        *,
        base_url: str | None = None,
        on_fatal: Callable[[str], None] | None = None,
        stop_grace: float = 30.0,
        poll_timeout: float = 25.0,
        repoll_interval: float = 1.0,
        typing_interval: float = 4.0,
        typing_delay: float = 0.25,
        typing_hold: float = 30.0,
        read_timeout: float = 15.0,
        max_attempts: int = 5,
        backoff: float = 0.5,
        sleep: Sleep = asyncio.sleep,
        stale_after: float = 120.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stale_after = stale_after
        self._monotonic = monotonic
        self._polled_at = 0.0  # when a getUpdates last completed (or polling began)
        self._token = token
        self._handler = link.handle
        self._commands = [(name.lower(), description) for name, description in link.commands]
        self._base_url = base_url
        self._state = link.state
        self._outbox = link.outbox
        self._on_fatal = on_fatal
        self._on_chat_moved = link.chat_moved  # (platform, old chat id, new chat id): Companion.chat_moved
        # Held while a chat is re-keyed, and while a message's chat is read: a message from the old
        # chat that the core takes up after the move names the new chat (no suspension between that
        # read and the core's per-chat lock, which the move also takes).
        self._moving = asyncio.Lock()
        self._poll_timeout = poll_timeout
        self._repoll_interval = repoll_interval
        self._typing_interval = typing_interval
        self._typing_delay = typing_delay
        self._typing_hold = typing_hold
        self._is_allowed = link.is_allowed
        # The typing indicator of each chat while it runs, and when it stops at the latest (None:
        # while its message's turn runs).
        self._typing: dict[int, asyncio.Task] = {}
        self._typing_until: dict[int, float] = {}
        self._streamer: TelegramStreamer | None = None
        self._stop_grace = stop_grace
        self._read_timeout = read_timeout
        self._max_attempts = max_attempts
        self._backoff = backoff
        self._sleep = sleep
        self._app: Application | None = None
        self._updates_request: UpdatesRequest | None = None
        self._delivery: Delivery | None = None
        self._poll_task: asyncio.Task | None = None
        self._closing = False
        self._queues: dict[int, deque[Update]] = {}
        self._workers: dict[int, asyncio.Task] = {}
        self._ledger = UpdateLedger()
        self._progress = asyncio.Event()
        self._persist_lock = asyncio.Lock()
        self._persisted: str | None = None
        self._log_filter = _RedactToken(token)
        self._buttons = TelegramButtons()

    # --- lifecycle ----------------------------------------------------------

    @property
    def username(self) -> str:
        """The bot's @username (without the @), known after start()."""
        return self._bot.username

    @property
    def _bot(self) -> ExtBot:
        if self._app is None:
            raise RuntimeError("TelegramAdapter is not started")
        return self._app.bot

    @property
    def _state_key(self) -> str:
        # Keyed by bot id: update ids of another bot (a changed token) say nothing about this one.
        return f"telegram:offset:{self._bot.id}"

    async def start(self) -> None:
        """Check the token (getMe), register the commands, and begin polling.

        Raises:
            TelegramStartError: the token was rejected or the Bot API server was unreachable.
        """
        if self._app is not None:
            return
        _guard_logs(self._log_filter)
        self._closing = False
        self._queues.clear()
        self._app = self._build_application()
        self._delivery = Delivery(
            self._app.bot, sleep=self._sleep, max_attempts=self._max_attempts, backoff=self._backoff
        )
        try:
            await self._initialize()
            await self._register_commands()
            await self._drop_webhook()
            if self._state is not None:
                self._ledger = UpdateLedger.parse(await self._state.get_adapter_state(self._state_key))
                self._persisted = self._ledger.dump()
        except BaseException:
            await self._shutdown_application()
            raise
        if self._outbox is not None:
            self._outbox.register(self)
            # Replies are shown while the model writes them (when the outbox streams, as shipped).
            self._streamer = TelegramStreamer(
                self._app.bot, moved_to=self._delivery.moved_to, first_shown=self._typing_done
            )
            self._outbox.register_streamer(self._streamer)
        self._polled_at = self._monotonic()
        self._poll_task = asyncio.create_task(self._poll(), name="telegram-polling")
        log.info("telegram: polling as bot %s", self._bot.id)

    async def stop_intake(self) -> None:
        """The first step of a stop: no update is fetched or begun any more. The turns running
        finish (each chat's current update); updates fetched but not begun stay unconfirmed, so
        Telegram offers them again after the restart."""
        self._closing = True
        poll, self._poll_task = self._poll_task, None
        if poll is not None:
            poll.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poll

    async def aclose(self) -> None:
        """Stop intake, let the running turns end (bounded: the core's stop has finished them by
        now), confirm what was handled, then close the connection; safe to call twice."""
        if self._app is None:
            return
        await self.stop_intake()
        workers = list(self._workers.values())
        if workers:
            log.info("telegram: %d chats still answering", len(workers))
            _, late = await asyncio.wait(workers, timeout=self._stop_grace)
            for task in late:  # left unconfirmed, so Telegram delivers them again after the restart
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
        await self._confirm_handled()
        if self._outbox is not None:
            self._outbox.unregister(self)
            if self._streamer is not None:
                self._outbox.unregister_streamer(self._streamer)
        self._streamer = None
        typing = list(self._typing.values())
        self._typing.clear()
        self._typing_until.clear()
        for task in typing:
            task.cancel()
        await asyncio.gather(*typing, return_exceptions=True)
        await self._shutdown_application()
        log.info("telegram: stopped")

    async def wait_lost(self) -> str:
        """Wait until polling ended on its own, and return one line saying so. Polling outlives every
        failure but a rejected token (which calls `on_fatal` first), so otherwise this is a bug.

        Raises:
            RuntimeError: the adapter is not started.
        """
        poll = self._poll_task
        if poll is None:
            raise RuntimeError("TelegramAdapter is not started")
        await asyncio.wait({poll})
        failure = None if poll.cancelled() else poll.exception()
        reason = f" ({type(failure).__name__})" if failure is not None else ""
        return f"telegram: polling for updates ended{reason}"

    def ready(self) -> str | None:
        """core.ports.BaseChatAdapter: not ready before start, while stopping, and once no long poll
        (getUpdates) completed for `stale_after` seconds."""
        if self._poll_task is None or self._closing:
            return "not polling"
        waited = self._monotonic() - self._polled_at
        if waited > self._stale_after:
            return f"no long poll completed for {waited:.0f} s"
        return None

    async def send(
        self, chat_id: int | str, text: str, *, reply_to: int | None = None, thread_id: int | None = None
    ) -> list[int]:
        """Send Markdown `text` to a chat, formatted as entities, in parts Telegram accepts, in order.

        Returns:
            The message ids of the parts sent.
        Raises:
            TelegramDeliveryError: a part could not be sent after the retries; later parts were not sent.
        """
        if self._delivery is None or self._app is None:
            raise RuntimeError("TelegramAdapter is not started")
        return await self._delivery.send_text(chat_id, text, reply_to=reply_to, thread_id=thread_id)

    async def send_text(self, chat_id: str, text: str) -> str:
        """core.ports.BaseSender: post `text` now, without an outbox row (a binding's test post).

        Raises:
            DeliveryFailed: permanent for 400 (chat not found), 403 (not a member, blocked) and
                ChatMigrated, else transient.
        """
        if self._delivery is None or self._app is None:
            raise DeliveryFailed("not started", permanent=False, parts_sent=0)
        try:
            sent = await self._delivery.send_text(chat_id, text)
        except TelegramDeliveryError as exc:
            cause = exc.__cause__
            permanent = isinstance(cause, TelegramError) and is_permanent(cause)
            raise DeliveryFailed(
                type(cause).__name__ if cause else "unknown", permanent=permanent, parts_sent=exc.delivered
            ) from exc
        return str(sent[0]) if sent else ""

    async def send_delivery(self, delivery: OutboundDelivery) -> int:
        """core.ports.BaseSender: send an outbox row from part `parts_sent` on.

        Raises:
            DeliveryFailed: permanent for 400/403/ChatMigrated, else transient.
        """
        if self._delivery is None or self._app is None:
            raise DeliveryFailed("not started", permanent=False, parts_sent=delivery.parts_sent)
        target = delivery.target
        if target.chat_id.lstrip("-").isdigit():
            self._typing_done(int(target.chat_id))  # the reply is here (or a message of another kind)
        try:
            if delivery.streamed:
                # Shown while the model wrote it: its messages are edited into the final text.
                return await self._delivery.finish_streamed(
                    target.chat_id,
                    delivery.text,
                    delivery.streamed,
                    start=delivery.parts_sent,
                    reply_to=quotable(target.reply_to),
                    thread_id=int(target.thread_id) if target.thread_id else None,
                    on_moved=self._chat_moved,
                    reply_markup=self._buttons.take(delivery.id),
                )
            sent = await self._delivery.send_text(
                target.chat_id,
                delivery.text,
                start=delivery.parts_sent,
                reply_to=quotable(target.reply_to),
                thread_id=int(target.thread_id) if target.thread_id else None,
                on_moved=self._chat_moved,
                reply_markup=self._buttons.take(delivery.id),
            )
        except TelegramDeliveryError as exc:
            cause = exc.__cause__
            permanent = isinstance(cause, TelegramError) and is_permanent(cause)
            raise DeliveryFailed(
                type(cause).__name__ if cause else "unknown",
                permanent=permanent,
                parts_sent=delivery.parts_sent + exc.delivered,
            ) from exc
        # Every part from `parts_sent` on went out: the count without rendering the text again.
        return delivery.parts_sent + len(sent) if sent else parts_of(delivery.text)

    def _build_application(self) -> Application:
        from adapters.tls import shared_ssl_context

        # Both clients share one TLS context (adapters/tls.py); otherwise python-telegram-bot's defaults.
        tls = {"verify": shared_ssl_context()}
        # Both leave answer bodies out of the log; the getUpdates one sets aside what cannot be parsed.
        updates_request = self._updates_request = UpdatesRequest(connection_pool_size=1, httpx_kwargs=tls)
        builder = (
            Application.builder()
            .token(self._token)
            .updater(None)  # we poll ourselves, to confirm an update only once it is handled
            .job_queue(None)
            .request(
                BotAPIRequest(
                    connection_pool_size=256,
                    read_timeout=self._read_timeout,
                    write_timeout=self._read_timeout,
                    connect_timeout=10.0,
                    pool_timeout=5.0,
                    httpx_kwargs=tls,
                )
            )
            .get_updates_request(updates_request)
        )
        if self._base_url:
            builder = builder.base_url(self._base_url).base_file_url(_file_url(self._base_url))
        app = builder.build()
        app.add_handler(MessageHandler(filters.UpdateType.MESSAGE & (filters.TEXT | MEDIA), self._on_message))
        # Its own group: a group upgraded to a supergroup is followed whatever the other handlers take.
        app.add_handler(MessageHandler(filters.StatusUpdate.MIGRATE, self._on_migrate), group=-1)
        # Edits of words and of captions (a caption is a media message's words: core/turn/edits.py).
        app.add_handler(
            MessageHandler(filters.UpdateType.EDITED_MESSAGE & (filters.TEXT | filters.CAPTION), self._on_message)
        )
        app.add_handler(CallbackQueryHandler(self._on_button))
        app.add_error_handler(self._on_error)
        return app

    async def _initialize(self) -> None:
        if self._app is None or self._delivery is None:
            raise RuntimeError("telegram: initialise after the application is built")
        where = f"the Bot API server at {self._base_url}" if self._base_url else "Telegram (api.telegram.org)"
        # `from None` below: python-telegram-bot's own InvalidToken message quotes the token.
        try:
            await self._delivery.call("getMe", self._app.initialize, attempts=3)
        except InvalidToken:
            hint = ""
            if self._base_url and "bot" not in self._base_url.rstrip("/").rpartition("/")[2]:
                hint = " (or COMPANION_TELEGRAM_BASE_URL lacks the /bot part, as in http://127.0.0.1:8081/bot)"
            raise TelegramStartError(f"COMPANION_TELEGRAM_TOKEN: {where} rejected the token{hint}") from None
        except TelegramError as exc:
            reason = type(exc).__name__
            if self._base_url:
                raise TelegramStartError(f"COMPANION_TELEGRAM_BASE_URL: cannot reach {where} ({reason})") from None
            raise TelegramStartError(
                f"cannot reach {where} ({reason}); check the network, "
                "or point COMPANION_TELEGRAM_BASE_URL at a Bot API server"
            ) from None

    def _started_delivery(self) -> Delivery:
        if self._delivery is None:
            raise RuntimeError("telegram: used before start()")
        return self._delivery

    async def _register_commands(self) -> None:
        delivery = self._started_delivery()
        commands = [
            BotCommand(name, description[:256])
            for name, description in self._commands
            if re.fullmatch(r"[a-z0-9_]{1,32}", name) and description
        ]
        if not commands:
            return
        try:
            await delivery.call("setMyCommands", lambda: self._bot.set_my_commands(commands))
        except TelegramError as exc:
            log.warning("telegram: setMyCommands failed (%s); commands still work when typed", type(exc).__name__)

    async def _drop_webhook(self) -> None:
        delivery = self._started_delivery()
        try:  # a webhook left set would make every getUpdates fail with 409 Conflict
            await delivery.call("deleteWebhook", lambda: self._bot.delete_webhook(drop_pending_updates=False))
        except TelegramError as exc:
            log.warning("telegram: deleteWebhook failed (%s)", type(exc).__name__)

    async def _shutdown_application(self) -> None:
        app, self._app, self._delivery, self._updates_request = self._app, None, None, None
        try:
            if app is not None:
                with contextlib.suppress(Exception):
                    await app.shutdown()
                with contextlib.suppress(Exception):  # when initialize() failed, the app skips its bot
                    await app.bot.shutdown()
        finally:
            _unguard_logs(self._log_filter)

    # --- polling and restart semantics -----------------------------------------

    async def _poll(self) -> None:
        from telegram.error import Conflict  # here, not at the top: this edit touches `_poll` only

        failures = conflicts = 0
        while not self._closing:
            waiting = bool(self._ledger.pending)
            self._progress.clear()  # before the request: a turn that ends during it is not missed
            try:
                updates = await self._bot.get_updates(
                    offset=self._ledger.next_offset,
                    # While a turn runs its update stays unconfirmed and comes back at once:
                    # poll briefly then, or the next chat would wait for that turn.
                    timeout=timedelta(seconds=0 if waiting else self._poll_timeout),
                    allowed_updates=ALLOWED_UPDATES,
                )
            except RetryAfter as exc:
                await self._sleep(retry_after_seconds(exc))
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
                await self._sleep(min(self._backoff * 2 ** min(failures, 7), 60.0))
                continue
            self._polled_at = self._monotonic()
            if conflicts >= 3:
                log.info("telegram: polling again after %d 409 Conflicts", conflicts)
            failures = conflicts = 0
            fresh = [u for u in updates if not self._ledger.is_known(u.update_id)]
            for update in fresh:
                self._dispatch(update)
            await self._skip(self._take_unparsable())
            if self._ledger.pending:
                # Until a turn ends (its update can then be confirmed) or the interval passes (to
                # take other chats' messages): polling at once would only fetch the same updates.
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation
                # that arrives as the event is set, and aclose would then wait out a long poll.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._repoll_interval):
                        await self._progress.wait()

    def _take_unparsable(self) -> list[UnparsableUpdate]:
        return self._updates_request.take_unparsable() if self._updates_request is not None else []

    async def _skip(self, unparsable: list[UnparsableUpdate]) -> None:
        """Settle each update python-telegram-bot could not parse, with one log line of its id, kind and
        size (never its content): fetching it again cannot help. Called after the rest of its batch is
        dispatched, so that an earlier update still being answered holds the offset back."""
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

    def _dispatch(self, update: Update) -> None:
        self._ledger.begin(update.update_id)
        chat = update.effective_chat
        key = chat.id if chat is not None else 0
        self._queues.setdefault(key, deque()).append(update)
        if key not in self._workers:
            self._workers[key] = asyncio.create_task(self._drain(key), name=f"telegram-chat-{key}")

    async def _drain(self, key: int) -> None:
        """Handle one chat's updates in order; the worker ends when its queue is empty."""
        queue = self._queues[key]
        try:
            while queue and not self._closing:  # a stop lets the update in hand finish, no more
                update = queue[0]
                await self._process(update)
                queue.popleft()
                self._ledger.finish(update.update_id)
                self._progress.set()
                await self._persist()
        finally:
            self._workers.pop(key, None)
            if not queue:
                self._queues.pop(key, None)

    async def _process(self, update: Update) -> None:
        app = self._app
        if app is None:
            raise RuntimeError("telegram: an update arrived before start()")
        try:
            await app.process_update(update)
        except Exception as exc:  # noqa: BLE001 - one bad update must not stop its chat
            log.error("telegram: update %s failed (%s)", update.update_id, type(exc).__name__)

    async def _persist(self) -> None:
        if self._state is None:
            return
        async with self._persist_lock:
            value = self._ledger.dump()
            if value == self._persisted:
                return
            try:
                await self._state.set_adapter_state(self._state_key, value, time.time())
            except Exception as exc:  # noqa: BLE001 - Telegram still holds the unconfirmed updates
                log.warning("telegram: storing the update ledger failed (%s)", type(exc).__name__)
                return
            self._persisted = value

    async def _confirm_handled(self) -> None:
        """Tell Telegram what was handled, so it does not offer it again after a restart."""
        offset = self._ledger.next_offset
        if offset is None or self._app is None:
            return
        try:
            await self._bot.get_updates(offset=offset, timeout=0, limit=1, allowed_updates=ALLOWED_UPDATES)
        except TelegramError as exc:  # the stored ledger still skips them
            log.info("telegram: confirming handled updates failed (%s)", type(exc).__name__)
        self._take_unparsable()  # an update fetched only to confirm: the next start skips it

    # --- one inbound message ------------------------------------------------

    async def _on_message(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message = update.message or update.edited_message
        if message is None or self._delivery is None:
            return
        async with self._moving:  # a chat being re-keyed: its late messages follow it (see _on_migrate)
            inbound = self._followed(self._inbound(message))
        if inbound is None:
            return
        # Quotes, forwards and edits (issue 15): adapters/telegram/context.py reads them.
        edited = update.edited_message is not None
        inbound = dataclasses.replace(inbound, **reply_context(message, self._bot.id), edited=edited)
        if edited and message.edit_date is not None:  # an edit's mode is that of the moment it was made
            inbound = dataclasses.replace(inbound, sent_at=message.edit_date.timestamp())
        delivery = self._delivery
        log.info(
            "telegram: update %s, %s chat, %d chars",
            update.update_id,
            "direct" if inbound.is_direct else "group",
            len(inbound.text),
        )
        self._begin_typing(message.chat_id)
        try:
            reply = await self._handler(inbound)
        except Exception as exc:  # noqa: BLE001 - the user gets an answer, the log gets the kind only
            log.error("telegram: update %s: the handler failed (%s)", update.update_id, type(exc).__name__)
            reply = Reply(HANDLER_FAILED, delete_inbound=carries_secret(inbound.text))
        except BaseException:  # cut off by a stop
            self._typing_done(message.chat_id)
            raise
        if reply is None and self._may_be_held(inbound):
            # Held for the rest of its burst: answered later in its lane, whose reply (its first
            # piece when shown while written) stops the indicator; this long at most.
            self._typing_until[message.chat_id] = self._monotonic() + self._typing_hold
        else:
            self._typing_done(message.chat_id)
        if reply is None:
            return
        text = reply.text
        # Right after the verification attempt, before the answer: the secret leaves the chat first.
        if reply.delete_inbound and not await delivery.delete(message.chat_id, message.message_id):
            text = f"{text}\n\n{DELETE_SECRET_NOTE}"
        thread = message.message_thread_id if message.is_topic_message else None
        try:
            if reply.delivery_id is not None and self._outbox is not None:
                # The reply is a pending outbox row already: sent and marked now, or later by the
                # dispatcher if Telegram cannot take it now. Never lost, never answered twice.
                if reply.conversation_id is None:
                    raise RuntimeError("telegram: a reply with an outbox delivery names no conversation")
                if text != reply.text:
                    await self._outbox.append_text(reply.delivery_id, text[len(reply.text) :])
                self._buttons.expect(reply.delivery_id, reply.confirm)
                if reply.attachments:  # the file follows its words
                    await self._outbox.deliver(reply.conversation_id, reply.delivery_id)
                else:  # sent in the outbox's lane: this chat's next update need not wait for it
                    self._outbox.hand_over(reply.conversation_id, reply.delivery_id)
            else:
                reply_to = None if (inbound.is_direct or reply.delete_inbound) else message.message_id
                await delivery.send_text(
                    message.chat_id,
                    text,
                    reply_to=reply_to,
                    thread_id=thread,
                    on_moved=self._chat_moved,
                    reply_markup=keyboard(reply.confirm),
                )
            for attachment in reply.attachments:
                await delivery.call(
                    "sendDocument",
                    functools.partial(
                        self._bot.send_document,
                        message.chat_id,
                        document=attachment.data,
                        filename=attachment.filename,
                        message_thread_id=thread,
                    ),
                )
        except (TelegramDeliveryError, TelegramError) as exc:
            log.error("telegram: update %s: the reply could not be sent (%s)", update.update_id, type(exc).__name__)

    async def _on_migrate(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
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
                await self._chat_moved(str(old), str(new))
            except Exception as exc:  # noqa: BLE001 - the next send to the old id (ChatMigrated) tries again
                log.warning("telegram: re-keying chat %s to %s failed (%s)", old, new, type(exc).__name__)
                return
            if self._delivery is not None:
                self._delivery.remember_move(str(old), new)

    def _followed(self, inbound: InboundMessage | None) -> InboundMessage | None:
        """A late message of a chat re-keyed already (sent before the upgrade, handled after) belongs
        to the new chat; its inbox key carries the old chat id, as the store's re-key writes it."""
        moved = self._delivery.moved_to(inbound.chat_id) if (inbound and self._delivery) else None
        if inbound is None or moved is None:
            return inbound
        return dataclasses.replace(
            inbound, chat_id=str(moved), message_id=f"{inbound.chat_id}/{inbound.message_id}", thread_id=None
        )

    async def _chat_moved(self, old: str, new: str) -> None:
        if self._on_chat_moved is not None:
            await self._on_chat_moved(self.name, old, new)

    async def _on_button(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        if self._delivery is not None:
            await self._buttons.on_press(
                update, handler=self._handler, delivery=self._delivery, outbox=self._outbox, bot=self._bot
            )

    def _inbound(self, message: Message) -> InboundMessage | None:
        """The core's view of a message, or None when the companion should not answer it."""
        user = message.from_user
        media = media_of(message, self._bot)  # a caption is the text of a media message
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
                username=self._bot.username,
                bot_id=self._bot.id,
                replied_to_bot=bool(replied and replied.from_user and replied.from_user.id == self._bot.id),
                commands={name for name, _ in self._commands},
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

    def _may_be_held(self, inbound: InboundMessage) -> bool:
        """Whether a message the core answered with None may be held for the rest of its burst (its
        reply comes later): words from someone allowed, replies through the outbox."""
        return (
            self._outbox is not None
            and self._is_allowed is not None
            and not inbound.edited
            and not inbound.text.startswith("/")
            # Not one sent long ago (an update offered again after a restart is answered already).
            and (inbound.sent_at is None or time.time() - inbound.sent_at < _HELD_IF_SENT_WITHIN)
            and self._is_allowed(inbound)
        )

    def _begin_typing(self, chat_id: int) -> None:
        """Show typing in the chat while its message's turn runs (one indicator per chat)."""
        self._typing_until.pop(chat_id, None)
        task = self._typing.get(chat_id)
        if task is None or task.done():
            self._typing[chat_id] = asyncio.create_task(self._keep_typing(chat_id), name=f"telegram-typing-{chat_id}")

    def _typing_done(self, chat_id: int) -> None:
        """The reply's first message is out (or no reply comes): the chat's typing indicator stops."""
        self._typing_until.pop(chat_id, None)
        task = self._typing.pop(chat_id, None)
        if task is not None:
            task.cancel()

    async def _keep_typing(self, chat_id: int) -> None:
        # Not for a quick answer: the indicator would only cost a request before the reply.
        await asyncio.sleep(self._typing_delay)
        while (until := self._typing_until.get(chat_id)) is None or self._monotonic() < until:
            try:
                await self._bot.send_chat_action(chat_id, ChatAction.TYPING)
            except TelegramError as exc:  # typing is courtesy: never retried, never fatal
                log.debug("telegram: sendChatAction failed (%s)", type(exc).__name__)
            await asyncio.sleep(self._typing_interval)
        if self._typing.get(chat_id) is asyncio.current_task():
            del self._typing[chat_id]
            self._typing_until.pop(chat_id, None)

    async def _on_error(self, update: object, context: ContextTypes.DEFAULT_TYPE) -> None:
        log.error("telegram: error while processing an update (%s)", type(context.error).__name__)


def _file_url(base_url: str) -> str:
    """http://host:8081/bot -> http://host:8081/file/bot, as a self-hosted Bot API server serves files."""
    head, _, tail = base_url.rstrip("/").rpartition("/")
    return f"{head}/file/{tail}" if head else base_url


# --- the token stays out of the logs ---------------------------------------------

_GUARDED = ("httpx", "telegram")


class _RedactToken(logging.Filter):
    """httpx logs every request URL at INFO, and the Bot API puts the token in the URL."""

    def __init__(self, token: str) -> None:
        super().__init__()
        self._token = token
        # A file download's URL carries the token percent-encoded (`123%3AABC`): redacted as well.
        self._forms = tuple(dict.fromkeys(form for form in (token, quote(token, safe="")) if form))

    def filter(self, record: logging.LogRecord) -> bool:
        if self._token:
            message = record.getMessage()
            if any(form in message for form in self._forms):
                for form in self._forms:
                    message = message.replace(form, "<token>")
                record.msg, record.args = message, None
        return True


def _guard_logs(token_filter: _RedactToken) -> None:
    # Levels (python-telegram-bot logs message text at DEBUG) are bot/logs.py's; the token is ours.
    for name in _GUARDED:
        logging.getLogger(name).addFilter(token_filter)


def _unguard_logs(token_filter: _RedactToken) -> None:
    for name in _GUARDED:
        logging.getLogger(name).removeFilter(token_filter)
