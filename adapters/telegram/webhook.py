"""Telegram's webhook: what the intake needs of the inbox (its port), and setting and removing the webhook, in one place.

The route that receives deliveries is the HTTP service's (adapters/web/webhook.py); it hands each update to
`TelegramIntake.accept`, which stores it through `WebhookInbox.put` before the 200 goes out. The intake then
takes the stored updates in order and routes each as the polling path does (adapters/telegram/intake.py).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from telegram.error import TelegramError

from adapters.telegram.connection import TelegramConnection, TelegramStartError

log = logging.getLogger(__name__)

PLATFORM = "telegram"


class StoredUpdate(Protocol):
    @property
    def update_id(self) -> int: ...

    @property
    def body(self) -> str: ...


class WebhookInbox(Protocol):
    """The durable inbox of webhook updates (adapters/storage/inbox.py `InboxQueries`)."""

    async def put(self, platform: str, update_id: int, body: str) -> bool:
        """Store an update durably before its 200; False: it is there already (a redelivery)."""
        ...

    async def take(self, platform: str, limit: int, skip: Collection[int] = ()) -> Sequence[StoredUpdate]:
        """Up to `limit` stored updates not handled yet, not in `skip`, by update id."""
        ...

    async def done(self, platform: str, update_id: int) -> None:
        """The core's outcome for the update is in: its body deleted."""
        ...

    async def depth(self, platform: str) -> int: ...

    async def tidy(self) -> None: ...


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
    """

    url: str
    secret: str
    inbox: WebhookInbox
    allowed_updates: Sequence[str] = ()
    removes_at_stop: Callable[[], Awaitable[bool]] = field(default=always)

    async def register(self, connection: TelegramConnection) -> None:
        """setWebhook (deliveries already stored are kept: drop_pending_updates false).

        Raises:
            TelegramStartError: Telegram refused it (one line naming the setting).
        """
        try:
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
