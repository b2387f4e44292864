"""Telegram as a platform of three parts; python-telegram-bot is imported only here, and only when Telegram is configured."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable

from adapters.telegram.connection import TelegramConnection, TelegramStartError
from adapters.telegram.intake import TelegramIntake
from adapters.telegram.ledger import UpdateLedger
from adapters.telegram.sender import TelegramDeliveryError, TelegramSender
from adapters.telegram.streaming import TelegramStreamer
from adapters.telegram.text import MAX_MESSAGE_LENGTH, Entity, group_text, split_message
from adapters.telegram.webhook import WebhookInbox, WebhookSetup
from core.ports.chat import ChatCore, Platform
from core.values.copy import HANDLER_FAILED
from core.values.edge import EdgeSettings
from core.values.retry import Sleep

__all__ = [
    "HANDLER_FAILED",
    "MAX_MESSAGE_LENGTH",
    "Entity",
    "TelegramDeliveryError",
    "TelegramIntake",
    "TelegramSender",
    "TelegramStartError",
    "TelegramStreamer",
    "UpdateLedger",
    "WebhookInbox",
    "WebhookSetup",
    "group_text",
    "split_message",
    "telegram_platform",
]


def telegram_platform(
    core: ChatCore,
    edge: EdgeSettings,
    *,
    token: str,
    base_url: str | None = None,
    on_fatal: Callable[[str], None] | None = None,
    poll_timeout: float = 25.0,
    repoll_interval: float = 1.0,
    typing_interval: float = 4.0,
    read_timeout: float = 15.0,
    sleep: Sleep = asyncio.sleep,
    stale_after: float = 120.0,
    monotonic: Callable[[], float] = time.monotonic,
    webhook: WebhookSetup | None = None,
) -> Platform:
    """One Telegram bot as a platform: an intake (long polling, or a webhook's inbox), a sender and a streamer on one connection.

    Args:
        core: the core's entry the intake hands updates to.
        edge: the settings every platform shares (retries of a call, the stop's grace).
        token: the bot token (COMPANION_TELEGRAM_TOKEN).
        base_url: a Bot API server's base URL with the /bot part (COMPANION_TELEGRAM_BASE_URL);
            None: api.telegram.org.
        on_fatal: called with one line when Telegram refuses the token while running.
        poll_timeout, repoll_interval: getUpdates' long-poll timeout, and the longest pause
            between polls while updates are in hand.
        typing_interval: how often the typing indicator is renewed (Telegram shows one ~5 s).
        read_timeout, sleep: the requests' read timeout, and the pause between two tries of a call.
        stale_after, monotonic: `ready()` says not ready once no long poll completed for this
            many seconds (by this clock).
        webhook: the webhook and its inbox, instead of long polling (the intake's `accept` stores each
            delivery; the HTTP service's route calls it).
    """
    connection = TelegramConnection(token, edge, base_url=base_url, read_timeout=read_timeout, sleep=sleep)
    # A group upgraded to a supergroup that a send meets (ChatMigrated): its conversation follows.
    sender = TelegramSender(
        connection, on_moved=functools.partial(core.chat_moved, "telegram"), typing_every=typing_interval
    )
    intake = TelegramIntake(
        core,
        connection,
        sender,
        edge,
        on_fatal=on_fatal,
        poll_timeout=poll_timeout,
        repoll_interval=repoll_interval,
        stale_after=stale_after,
        monotonic=monotonic,
        webhook=webhook,
    )
    # Replies are shown while the model writes them (when the outbox streams, as shipped).
    streamer = TelegramStreamer(connection, moved_to=sender.moved_to)
    return Platform("telegram", intake, sender, streamer)
