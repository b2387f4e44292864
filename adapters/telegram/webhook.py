"""Telegram's webhook: the inbox's port, setting and removing the webhook (one place), and reading the inbox.

The route that receives deliveries is the HTTP service's (adapters/web/webhook.py); it hands each update to
`TelegramIntake.accept`, which stores it through `InboxReader.accept` before the 200 goes out. The reader
then takes the stored updates in update-id order and hands each to the intake, which routes it as the
polling path does (adapters/telegram/intake.py), and settles it once the core's outcome is in.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from telegram.error import TelegramError

from adapters.telegram.connection import TelegramConnection, TelegramStartError
from core.values.retry import Sleep

log = logging.getLogger(__name__)

PLATFORM = "telegram"
# How many stored updates one read of the inbox takes, and how often the inbox is tidied (handled rows past
# their day deleted, transit keys no row needs shredded).
TAKE_LIMIT = 100
TIDY_SECONDS = 60.0
# Shared database: how often the inbox is read again when nothing woke the reader. An update another process
# stored for a chat this one holds wakes nothing here, so this bounds what that hand-over adds to its round trip.
SHARED_REPOLL_SECONDS = 0.2


class StoredUpdate(Protocol):
    @property
    def update_id(self) -> int: ...

    @property
    def body(self) -> str: ...

    @property
    def chat_id(self) -> str | None: ...


class WebhookInbox(Protocol):
    """The durable inbox of webhook updates (adapters/storage/inbox.py `InboxQueries`)."""

    async def put(self, platform: str, update_id: int, body: str, chat_id: str | None = None) -> bool:
        """Store an update durably before its 200, with its chat (`chat_of`); False: it is there already (a
        redelivery)."""
        ...

    async def take(self, platform: str, limit: int, skip: Collection[int] = ()) -> Sequence[StoredUpdate]:
        """Up to `limit` stored updates not handled yet, not in `skip`, by update id; on a shared database, not
        those of chats another live process holds."""
        ...

    async def done(self, platform: str, update_id: int) -> None:
        """The core's outcome for the update is in: its body deleted."""
        ...

    async def depth(self, platform: str) -> int: ...

    async def tidy(self) -> None: ...

    def arrivals(self) -> AsyncIterator[None] | None:
        """Several processes: an item each time another one stored an update (None: nothing to wait on)."""
        ...


async def always() -> bool:
    return True


@dataclass(frozen=True, slots=True)
class WebhookSetup:
    """COMPANION_TELEGRAM_WEBHOOK_URL and its secret, set with setWebhook at the start.

    Attributes:
        url: the public HTTPS URL Telegram delivers to.
        secret: the secret token Telegram sends back in every delivery's header.
        inbox: where deliveries are stored.
        allowed_updates: the update types asked for (the intake's ALLOWED_UPDATES).
        removes_at_stop: asked at a clean stop whether this process removes the webhook (deleteWebhook):
            with several processes, only the last one should; alone, always.
        sets_at_start: asked at the start whether this process sets the webhook (setWebhook): with several
            processes, the first one (the others set it only when Telegram holds another URL or none);
            alone, always.
        shared: several processes serve the webhook (COMPANION_SHARED_DATABASE): a chat's updates are taken
            one at a time until this process is known to hold its conversation (`InboxReader.run`).
    """

    url: str
    secret: str
    inbox: WebhookInbox
    allowed_updates: Sequence[str] = ()
    removes_at_stop: Callable[[], Awaitable[bool]] = field(default=always)
    sets_at_start: Callable[[], Awaitable[bool]] = field(default=always)
    shared: bool = False

    async def register(self, connection: TelegramConnection) -> None:
        """setWebhook (deliveries already stored are kept: drop_pending_updates false), unless another
        process sets it (`sets_at_start`) and Telegram holds this URL already.

        Raises:
            TelegramStartError: Telegram refused it (one line naming the setting).
        """
        try:
            if not await self.sets_at_start():
                info = await connection.call("getWebhookInfo", connection.bot.get_webhook_info)
                if info.url == self.url:
                    log.info("telegram: webhook set already (by another process)")
                    return
            await connection.call(
                "setWebhook",
                lambda: connection.bot.set_webhook(
                    url=self.url,
                    secret_token=self.secret,
                    allowed_updates=list(self.allowed_updates),
                    drop_pending_updates=False,
                ),
            )
        except TelegramError as exc:
            raise TelegramStartError(
                f"COMPANION_TELEGRAM_WEBHOOK_URL: Telegram refused setWebhook ({type(exc).__name__}: {exc.message})"
            ) from None
        log.info("telegram: webhook set")

    async def unregister(self, connection: TelegramConnection) -> None:
        """deleteWebhook at a clean stop, when `removes_at_stop` says this process is the one to."""
        try:
            if not await self.removes_at_stop():
                return
            await connection.call("deleteWebhook", lambda: connection.bot.delete_webhook(drop_pending_updates=False))
        except Exception as exc:  # noqa: BLE001 - the stop goes on; the next start sets it again
            log.warning("telegram: deleteWebhook failed (%s)", type(exc).__name__)
            return
        log.info("telegram: webhook removed")


class InboxReader:
    """The webhook's inbox as the intake sees it: `accept` stores a delivery, `run` takes the stored updates in
    update-id order and hands each to the intake, `settled` settles one once its outcome is in.

    Args:
        setup: the webhook and its inbox.
        sleep, backoff: the pause after a failed read (doubling from `backoff`, at most a minute).
        repoll_interval: the inbox is read again at least this often (an update another process stored
            wakes nothing here).
        monotonic: the clock of the tidying.
    """

    def __init__(
        self,
        setup: WebhookSetup,
        *,
        sleep: Sleep,
        backoff: float,
        repoll_interval: float,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.setup = setup
        self.depth = 0  # updates stored and not yet settled (read by /readyz, /metrics)
        self.failure: str | None = None  # why the last read of the inbox failed
        self._sleep = sleep
        self._backoff = backoff
        self._repoll_interval = min(repoll_interval, SHARED_REPOLL_SECONDS) if setup.shared else repoll_interval
        self._monotonic = monotonic
        self._inflight: set[int] = set()  # the stored updates taken and not yet settled
        self._arrived = asyncio.Event()  # an update was stored, or one settled or was left to another process
        # A shared database: the chats whose updates this process answered (their conversations it holds, for as
        # long as it lives), and per chat not known so, the one update taken while its claim is decided.
        self._answered: set[str] = set()
        self._deciding: dict[str, int] = {}

    async def accept(self, update_id: int, body: str) -> bool:
        """Store a delivery durably; False: stored already (a redelivery)."""
        stored = await self.setup.inbox.put(PLATFORM, update_id, body, chat_of(body))
        if stored:
            self.depth += 1
            self._arrived.set()
        return stored

    async def run(
        self,
        begin: Callable[[StoredUpdate], Awaitable[None]],
        *,
        closing: Callable[[], bool],
    ) -> None:
        """Take the stored updates in update-id order and `begin` each, until `closing()`."""
        inbox = self.setup.inbox
        failures = 0
        tidied: float | None = None
        waking = asyncio.create_task(self._woken(), name="telegram-webhook-arrivals")
        try:
            await self._read(begin, closing, inbox, failures, tidied)
        finally:
            waking.cancel()
            await asyncio.gather(waking, return_exceptions=True)

    async def _woken(self) -> None:
        """Wake the reader each time another process stored an update (the holder of its chat may be this one);
        listening again after a failure. Without it the reader still reads the inbox every repoll interval."""
        failures = 0
        while True:
            arrivals = self.setup.inbox.arrivals()
            if arrivals is None:
                return
            try:
                async for _ in arrivals:
                    failures = 0
                    self._arrived.set()
            except Exception as exc:  # noqa: BLE001 - the repoll still reads the inbox meanwhile
                failures += 1
                log.warning("telegram: listening for stored updates failed (%s)", type(exc).__name__)
            await self._sleep(min(self._backoff * 2 ** min(failures, 7), 60.0))

    async def _read(
        self,
        begin: Callable[[StoredUpdate], Awaitable[None]],
        closing: Callable[[], bool],
        inbox: WebhookInbox,
        failures: int,
        tidied: float | None,
    ) -> None:
        while not closing():
            self._arrived.clear()  # before the read: an update stored during it is not missed
            try:
                if tidied is None or self._monotonic() - tidied >= TIDY_SECONDS:
                    # First at the start, before any row is opened: transit keys past their life go first.
                    await inbox.tidy()
                    tidied = self._monotonic()
                # A copy made before the read: an update settled after it was made is skipped even if the
                # read still sees its body, and one settled before it is not seen by the read.
                stored = await inbox.take(PLATFORM, TAKE_LIMIT, skip=frozenset(self._inflight))
                self.depth = await inbox.depth(PLATFORM)
            except Exception as exc:  # noqa: BLE001 - the inbox is read again; its rows wait there
                failures += 1
                self.failure = f"the webhook inbox cannot be read ({type(exc).__name__})"
                log.warning("telegram: reading the webhook inbox failed (%s), attempt %d", type(exc).__name__, failures)
                await self._sleep(min(self._backoff * 2 ** min(failures, 7), 60.0))
                continue
            failures = 0
            self.failure = None
            begun = 0
            for row in stored:
                chat = row.chat_id
                if self.setup.shared and chat is not None and chat not in self._answered:
                    # Its conversation may be claimed by another process as this one's turn begins: one update
                    # at a time until the core's claim is decided (`settled` or `left`), so that a chat's
                    # updates are answered in their order by one process, never some here and some there.
                    if chat in self._deciding:
                        continue
                    self._deciding[chat] = row.update_id
                self._inflight.add(row.update_id)
                begun += 1
                await begin(row)
            if not begun:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._repoll_interval):
                        await self._arrived.wait()

    async def settled(self, update_id: int) -> None:
        """The core's outcome for the update is in: its row is settled (body deleted)."""
        try:
            await self.setup.inbox.done(PLATFORM, update_id)
        except Exception as exc:  # noqa: BLE001 - left stored: the next start takes it, a no-op by its inbox key
            log.warning("telegram: settling update %s in the inbox failed (%s)", update_id, type(exc).__name__)
            self._decided(update_id, answered=True)
            return
        self._inflight.discard(update_id)
        self.depth = max(self.depth - 1, 0)
        self._decided(update_id, answered=True)

    def left(self, update_id: int) -> None:
        """Another live process holds the update's conversation (the core's claim said so): the update is left
        stored for it, and taken here again only if this process takes that conversation over."""
        self._inflight.discard(update_id)
        self._decided(update_id, answered=False)

    def _decided(self, update_id: int, *, answered: bool) -> None:
        for chat, deciding in list(self._deciding.items()):
            if deciding == update_id:
                del self._deciding[chat]
                if answered:
                    self._answered.add(chat)
                self._arrived.set()  # its chat's next update may be taken now


def chat_of(body: str) -> str | None:
    """The chat of an update's JSON (its message's, edit's or pressed button's message's), read without
    python-telegram-bot (the HTTP service's route stores it before anything parses it); None: no chat."""
    try:
        update = json.loads(body)
    except ValueError:
        return None
    if not isinstance(update, dict):
        return None
    for kind in ("message", "edited_message", "callback_query"):
        part = update.get(kind)
        if isinstance(part, dict) and kind == "callback_query":
            part = part.get("message")
        if isinstance(part, dict):
            chat = part.get("chat")
            chat_id = chat.get("id") if isinstance(chat, dict) else None
            if isinstance(chat_id, int) and not isinstance(chat_id, bool):
                return str(chat_id)
    return None
