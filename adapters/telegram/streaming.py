"""Replies shown on Telegram while the model writes them: a post, edits, and the formatted final edit.

`TelegramStreamer` is the platform's streaming part (core.ports.BaseStreamer), called from the
outbox's lane of the reply's chat (core/delivery/streams.py): it posts the first piece of the
reply as plain text (the Markdown as written, quoting the person's message in a group as the
final reply would), then edits it with newer text. Each call is one request: the lane paces
them, and a 429 is handed back as `DeliveryThrottled(retry_after)` for the lane to wait out.

The final send of such a reply (`TelegramSender.send_delivery`) edits those messages into
`formatting.streamed_parts` of the final text: cut where `pieces(final=True)` cuts it, each piece
rendered to entities on its own, so message i of the stream becomes part i of the reply.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from telegram import ReplyParameters
from telegram.error import BadRequest, RetryAfter, TelegramError
from telegram.ext import ExtBot

from adapters.rendering.pieces import stream_pieces
from adapters.rendering.text import sendable
from adapters.telegram.connection import TelegramConnection, is_permanent, retry_after_seconds
from adapters.telegram.text import MAX_MESSAGE_LENGTH, quotable
from core.values.errors import DeliveryFailed, DeliveryThrottled
from core.values.model import StreamedReply

log = logging.getLogger(__name__)


def not_modified(exc: TelegramError) -> bool:
    """Telegram's answer to an edit that changes nothing: the message shows what was asked."""
    return isinstance(exc, BadRequest) and "message is not modified" in exc.message.lower()


class TelegramStreamer:
    """core.ports.BaseStreamer for Telegram.

    Args:
        connection: the bot's connection (its requests share the sender's connection pool).
        moved_to: the supergroup a group was upgraded to, if it was (the stream follows it).
    """

    name = "telegram"

    def __init__(self, connection: TelegramConnection, *, moved_to: Callable[[str], int | None]) -> None:
        self._connection = connection
        self._moved_to = moved_to

    def _bot(self) -> ExtBot:
        if not self._connection.started:  # closed: the final send (a row) copes later
            raise DeliveryFailed("not started", permanent=False, parts_sent=0)
        return self._connection.bot

    async def _post(self, method: str, params: dict[str, Any]) -> Any:
        self._bot()  # not started: DeliveryFailed
        return await self._connection.post(method, params)

    def pieces(self, text: str, *, final: bool = False) -> list[str]:
        return stream_pieces(sendable(text), MAX_MESSAGE_LENGTH, final=final)

    async def post(self, reply: StreamedReply, text: str, index: int) -> str:
        target = reply.target
        chat_id: int | str = target.chat_id
        reply_to = quotable(target.reply_to) if index == 0 else None
        thread_id = int(target.thread_id) if target.thread_id else None
        if (moved := self._moved_to(target.chat_id)) is not None:
            chat_id, reply_to, thread_id = moved, None, None
        quote = ReplyParameters(reply_to, allow_sending_without_reply=True) if reply_to else None
        # bot.send_message's parameters; the answer read for the message id only (TelegramConnection.post).
        params = {"chat_id": chat_id, "text": sendable(text), "message_thread_id": thread_id, "reply_parameters": quote}
        try:
            message = await self._post("sendMessage", params)
        except TelegramError as exc:
            raise _failure(exc) from exc
        return str(message["message_id"])

    async def edit(self, reply: StreamedReply, message_id: str, text: str) -> None:
        chat_id: int | str = self._moved_to(reply.target.chat_id) or reply.target.chat_id
        try:  # bot.edit_message_text's parameters; its answer is not read
            await self._post(
                "editMessageText", {"text": sendable(text), "chat_id": chat_id, "message_id": int(message_id)}
            )
        except TelegramError as exc:
            if not_modified(exc):
                return
            raise _failure(exc) from exc


def _failure(exc: TelegramError) -> DeliveryFailed:
    """A streamed request's failure as the lane reads it: flood control says how long to wait;
    anything else stops the showing (the reply's final send copes on its own)."""
    if isinstance(exc, RetryAfter):
        return DeliveryThrottled(retry_after_seconds(exc))
    log.info("telegram: a streamed message's request failed (%s)", type(exc).__name__)
    return DeliveryFailed(type(exc).__name__, permanent=is_permanent(exc), parts_sent=0)
