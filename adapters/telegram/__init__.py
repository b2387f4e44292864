"""The Telegram adapter; python-telegram-bot is imported only here, and only when Telegram is configured."""

from adapters.telegram.adapter import TelegramAdapter, TelegramStartError
from adapters.telegram.delivery import Delivery, TelegramDeliveryError
from adapters.telegram.ledger import UpdateLedger
from adapters.telegram.text import MAX_MESSAGE_LENGTH, Entity, group_text, split_message
from core.values.copy import HANDLER_FAILED

__all__ = [
    "HANDLER_FAILED",
    "MAX_MESSAGE_LENGTH",
    "Delivery",
    "Entity",
    "TelegramAdapter",
    "TelegramDeliveryError",
    "TelegramStartError",
    "UpdateLedger",
    "group_text",
    "split_message",
]
