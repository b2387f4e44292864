"""Confirmation buttons on Telegram: an inline keyboard under a reply, and a press (callback_query).

A press is answered at once (answerCallbackQuery stops the button's spinner) and then handed to
the core as its command typed by the presser (`adapters/buttons.py`); the core's answer says
when the confirmation expired or was used already. A reply that goes out through the outbox
gets its keyboard when its row is sent (`adapters/buttons.py` `PendingButtons`: `expect`, then
`take` in `send_delivery`).
"""

from __future__ import annotations

import functools
import logging

from telegram import Bot, InlineKeyboardButton, InlineKeyboardMarkup, Message, Update
from telegram.constants import ChatType
from telegram.error import TelegramError

from adapters.buttons import PendingButtons, button_data, command_of
from adapters.telegram.delivery import Delivery, TelegramDeliveryError
from core.delivery.outbox import Outbox
from core.ports import MessageHandler
from core.values.copy import HANDLER_FAILED
from core.values.model import Confirmation, InboundMessage, Reply

log = logging.getLogger(__name__)


def keyboard(confirmation: Confirmation | None) -> InlineKeyboardMarkup | None:
    if confirmation is None:
        return None
    return InlineKeyboardMarkup([[InlineKeyboardButton(confirmation.label, callback_data=button_data(confirmation))]])


class TelegramButtons:
    """Keyboards waiting for their outbox rows, and the handler of presses, for one TelegramAdapter."""

    def __init__(self) -> None:
        self._pending = PendingButtons()

    def expect(self, delivery_id: int, confirmation: Confirmation | None) -> None:
        self._pending.expect(delivery_id, confirmation)

    def take(self, delivery_id: int) -> InlineKeyboardMarkup | None:
        return keyboard(self._pending.take(delivery_id))

    async def on_press(
        self, update: Update, *, handler: MessageHandler, delivery: Delivery, outbox: Outbox | None, bot: Bot
    ) -> None:
        query = update.callback_query
        if query is None:
            return
        try:
            await delivery.call("answerCallbackQuery", query.answer)
        except TelegramError as exc:  # too late or answered already: the press is still honoured
            log.info("telegram: answerCallbackQuery failed (%s)", type(exc).__name__)
        text = command_of(query.data)
        message = query.message
        if text is None or message is None:
            return
        chat = message.chat
        user = query.from_user
        inbound = InboundMessage(
            platform="telegram",
            chat_id=str(chat.id),
            user_id=str(user.id),
            text=text,
            is_direct=chat.type == ChatType.PRIVATE,
            message_id=None,  # a press has no message; the update ledger handles each update once
            user_name=user.first_name,
        )
        log.info("telegram: update %s, a confirmation button", update.update_id)
        try:
            reply = await handler(inbound)
        except Exception as exc:  # noqa: BLE001 - the user gets an answer, the log gets the kind only
            log.error("telegram: update %s: the handler failed (%s)", update.update_id, type(exc).__name__)
            reply = Reply(HANDLER_FAILED)
        if reply is None:
            return
        thread = message.message_thread_id if isinstance(message, Message) and message.is_topic_message else None
        try:
            if reply.delivery_id is not None and outbox is not None and reply.conversation_id is not None:
                self.expect(reply.delivery_id, reply.confirm)
                await outbox.deliver(reply.conversation_id, reply.delivery_id)
            else:
                await delivery.send_text(chat.id, reply.text, thread_id=thread, reply_markup=keyboard(reply.confirm))
            for attachment in reply.attachments:
                await delivery.call(
                    "sendDocument",
                    functools.partial(
                        bot.send_document,
                        chat.id,
                        document=attachment.data,
                        filename=attachment.filename,
                        message_thread_id=thread,
                    ),
                )
        except (TelegramDeliveryError, TelegramError) as exc:
            log.error("telegram: update %s: the answer could not be sent (%s)", update.update_id, type(exc).__name__)
