"""Bot API calls with flood control and retries, and sending text in parts Telegram accepts."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any, TypeVar

from telegram import Bot, InlineKeyboardMarkup, Message, MessageEntity, ReplyParameters
from telegram.error import (
    BadRequest,
    ChatMigrated,
    Conflict,
    EndPointNotFound,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
)
from telegram.warnings import PTBDeprecationWarning

from adapters.telegram.formatting import TelegramPart, streamed_parts, telegram_parts
from core.values.errors import CompanionError
from core.values.retry import Attempt, RetryPolicy, Sleep, retrying

log = logging.getLogger(__name__)

# Opt in to python-telegram-bot's timedelta time periods: the int form warns since v22.2, even
# inside the library when it builds a RetryAfter. This module reads both forms.
os.environ.setdefault("PTB_TIMEDELTA", "true")

T = TypeVar("T")

# What follows a chat that moved (old chat id, new chat id): the re-key in storage.
ChatMoved = Callable[[str, str], Awaitable[object]]

# BadRequest subclasses NetworkError in python-telegram-bot, but repeating a bad request cannot help.
_NOT_TRANSIENT = (BadRequest, Forbidden, InvalidToken, ChatMigrated, Conflict, EndPointNotFound)
# Telegram's descriptions of an edit of a message that cannot be edited any more (deleted, too old).
_NOT_EDITABLE = ("message to edit not found", "message can't be edited", "message_id_invalid")


class TelegramDeliveryError(CompanionError):
    """A message could not be sent after the allowed retries; `delivered` parts went out before it."""

    def __init__(self, message: str, delivered: int) -> None:
        super().__init__(message)
        self.delivered = delivered


class Delivery:
    """Runs Bot API calls for the adapter: 429 waits retry_after, 5xx and network errors back off.

    A request whose answer timed out may have been delivered; it is retried anyway, since a
    lost reply (which the timeline already holds) is worse than a rare duplicate. Parts of a
    long text already delivered are never sent again.
    """

    def __init__(self, bot: Bot, *, sleep: Sleep = asyncio.sleep, max_attempts: int = 5, backoff: float = 0.5) -> None:
        self._bot = bot
        self._sleep = sleep
        # Groups upgraded to supergroups (old id -> new id), learnt from ChatMigrated: a row queued
        # for the old id before the move goes straight to the new one. The store is the record.
        self._moved: dict[str, int] = {}
        self._policy = RetryPolicy(
            attempts=max_attempts,
            base_delay=backoff,
            max_delay=30.0,
            retryable=_is_transient,
            retry_after=_flood_wait,
        )

    async def call(self, what: str, action: Callable[[], Awaitable[T]], *, attempts: int | None = None) -> T:
        """Run `action` (one Bot API call), retrying what can succeed on a later attempt.

        Raises:
            telegram.error.TelegramError: the last failure, when it is not transient or attempts ran out.
        """
        policy = replace(self._policy, attempts=attempts) if attempts else self._policy

        def retrying_after(exc: Exception, attempt: Attempt, delay: float) -> None:
            reason = "flood control" if isinstance(exc, RetryAfter) else type(exc).__name__
            log.info("telegram: %s failed (%s), retry %d in %.1f s", what, reason, attempt.number, delay)

        return await retrying(policy, lambda _attempt: action(), on_retry=retrying_after, sleep=self._sleep)

    async def send_text(
        self,
        chat_id: int | str,
        text: str,
        *,
        reply_to: int | None = None,
        thread_id: int | None = None,
        start: int = 0,
        on_moved: ChatMoved | None = None,
        reply_markup: InlineKeyboardMarkup | None = None,
    ) -> list[int]:
        """Send Markdown `text` rendered as message entities (no parse mode, so nothing needs
        escaping), in parts, in order, from part `start` on (the parts before it went out earlier).
        A part whose entities Telegram refuses goes once more as the same text without them. A group
        upgraded to a supergroup (ChatMigrated) is followed: `on_moved` re-keys it, and the parts go
        to the new chat, quoting nothing (the quoted message's id belonged to the old chat).
        `reply_markup` goes under the last part.

        Returns:
            The message ids of the parts sent now.
        Raises:
            TelegramDeliveryError: a part could not be sent; the parts after it were not sent.
        """
        sent: list[int] = []
        if (moved_to := self._moved.get(str(chat_id))) is not None:
            chat_id, reply_to, thread_id = moved_to, None, None
        parts = telegram_parts(text)
        for number, part in enumerate(parts):
            if number < start:
                continue
            reply = ReplyParameters(reply_to, allow_sending_without_reply=True) if (reply_to and number == 0) else None
            markup = reply_markup if number == len(parts) - 1 else None
            try:
                try:
                    message = await self._send_part(chat_id, part, reply, thread_id, markup)
                except ChatMigrated as moved:
                    chat_id, reply_to, thread_id = await self._follow(chat_id, moved.new_chat_id, on_moved), None, None
                    message = await self._send_part(chat_id, part, None, None, markup)
            except TelegramError as exc:
                raise TelegramDeliveryError(f"sendMessage failed ({type(exc).__name__})", len(sent)) from exc
            sent.append(message.message_id)
        return sent

    async def finish_streamed(
        self,
        chat_id: int | str,
        text: str,
        message_ids: tuple[str, ...],
        *,
        start: int = 0,
        reply_to: int | None = None,
        thread_id: int | None = None,
        on_moved: ChatMoved | None = None,
        reply_markup: InlineKeyboardMarkup | None = None,
    ) -> int:
        """The final send of a reply shown while written: its messages (`message_ids`, in order)
        edited into the parts of the final Markdown `text` (`streamed_parts`: message i gets part
        i), from part `start` on; parts past them go as new messages, and messages left over (a
        final text shorter than what was shown) are deleted. Done again after a cut-off send, it
        changes nothing already right: an edit to what a message shows is "not modified", which
        is success. A message that cannot be edited any more (deleted by the person, or in a
        group upgraded since) gets its part as a new message. `reply_markup` goes under the last part.

        Returns:
            The number of parts of the whole text.
        Raises:
            TelegramDeliveryError: a part could not be edited or sent; `delivered` counts the parts
                done from `start` on, and the parts after it were not touched.
        """
        parts = streamed_parts(text)
        done = 0
        for number in range(start, len(parts)):
            part = parts[number]
            markup = reply_markup if number == len(parts) - 1 else None
            try:
                if number < len(message_ids) and await self._edit_part(chat_id, int(message_ids[number]), part, markup):
                    done += 1
                    continue
                target = self._moved.get(str(chat_id), chat_id)
                quote = reply_to if number == 0 and target == chat_id else None
                reply = ReplyParameters(quote, allow_sending_without_reply=True) if quote else None
                thread = thread_id if target == chat_id else None
                try:
                    await self._send_part(target, part, reply, thread, markup)
                except ChatMigrated as moved:
                    target = await self._follow(chat_id, moved.new_chat_id, on_moved)
                    await self._send_part(target, part, None, None, markup)
            except TelegramError as exc:
                raise TelegramDeliveryError(f"a streamed reply's part failed ({type(exc).__name__})", done) from exc
            done += 1
        for message_id in message_ids[len(parts) :]:  # shown while written, no longer part of the reply
            await self.delete(int(chat_id), int(message_id))
        return len(parts)

    async def _edit_part(
        self, chat_id: int | str, message_id: int, part: TelegramPart, markup: InlineKeyboardMarkup | None
    ) -> bool:
        """Edit one message into a rendered part (once more without its entities if Telegram refuses
        them); False when the message cannot be edited any more."""
        edit = functools.partial(
            self._bot.edit_message_text, part.text, chat_id=chat_id, message_id=message_id, reply_markup=markup
        )
        entities = [MessageEntity(**entity.as_dict()) for entity in part.entities]
        try:
            try:
                await self.call("editMessageText", functools.partial(edit, entities=entities or None))
            except BadRequest as exc:
                if not entities or "entit" not in exc.message.lower():
                    raise
                log.warning("telegram: the entities of a part were refused (%s); it goes plain", type(exc).__name__)
                await self.call("editMessageText", edit)
        except ChatMigrated:
            return False
        except BadRequest as exc:
            if "message is not modified" in exc.message.lower():
                return True  # it shows the part already (a send done again after a cut-off)
            if any(gone in exc.message.lower() for gone in _NOT_EDITABLE):
                log.info("telegram: a streamed message cannot be edited any more; its part goes as a new one")
                return False
            raise
        return True

    def remember_move(self, old: str, new: int) -> None:
        """`old` is `new` now (the store was re-keyed from the service message)."""
        self._moved[old] = new

    def moved_to(self, chat_id: str) -> int | None:
        """The supergroup `chat_id` was upgraded to, once the store was re-keyed for it."""
        return self._moved.get(chat_id)

    async def _send_part(
        self,
        chat_id: int | str,
        part: TelegramPart,
        reply: ReplyParameters | None,
        thread_id: int | None,
        markup: InlineKeyboardMarkup | None,
    ) -> Message:
        """Send one rendered part; when Telegram refuses its entities, once more without them."""
        send = functools.partial(
            self._bot.send_message,
            chat_id,
            part.text,
            reply_parameters=reply,
            message_thread_id=thread_id,
            reply_markup=markup,
        )
        entities = [MessageEntity(**entity.as_dict()) for entity in part.entities]
        try:
            return await self.call("sendMessage", functools.partial(send, entities=entities or None))
        except BadRequest as exc:
            if not entities or "entit" not in exc.message.lower():
                raise
            log.warning("telegram: the entities of a part were refused (%s); it goes plain", type(exc).__name__)
            return await self.call("sendMessage", send)

    async def _follow(self, old: int | str, new: int, on_moved: ChatMoved | None) -> int:
        """Re-key `old` to `new` in storage and remember it; the reply goes out to `new` either way.
        Only a re-key that was done is remembered: otherwise the next send to the old id meets
        ChatMigrated again and tries again (so does the service message)."""
        log.info("telegram: chat %s was upgraded to supergroup %s; following it", old, new)
        if on_moved is not None:
            try:
                await on_moved(str(old), str(new))
            except Exception as exc:  # noqa: BLE001 - the reply is not lost over a failed re-key
                log.warning("telegram: re-keying chat %s to %s failed (%s)", old, new, type(exc).__name__)
            else:
                self._moved[str(old)] = new
        return new

    async def delete(self, chat_id: int, message_id: int) -> bool:
        """Delete a message; False when Telegram refused (too old, no rights) or kept failing."""
        try:
            await self.call("deleteMessage", lambda: self._bot.delete_message(chat_id, message_id))
        except TelegramError as exc:
            log.info("telegram: a message could not be deleted (%s)", type(exc).__name__)
            return False
        return True


def is_permanent(exc: TelegramError) -> bool:
    """Whether sending again cannot help: the bot is blocked or removed (403), the chat is not
    found or the request is malformed (400), or the group moved (ChatMigrated)."""
    return isinstance(exc, (BadRequest, Forbidden, ChatMigrated))


def _is_transient(exc: Exception) -> bool:
    """Flood control (429), and network errors: timeouts and every 5xx answer."""
    if isinstance(exc, _NOT_TRANSIENT):
        return False
    return isinstance(exc, (RetryAfter, NetworkError))


def _flood_wait(exc: Exception) -> float | None:
    return retry_after_seconds(exc) if isinstance(exc, RetryAfter) else None


def parts_of(text: str) -> int:
    return len(telegram_parts(text))


def retry_after_seconds(exc: RetryAfter) -> float:
    with warnings.catch_warnings():  # the int form is deprecated since v22.2; both forms are read
        warnings.simplefilter("ignore", PTBDeprecationWarning)
        value: Any = exc.retry_after
    return value.total_seconds() if isinstance(value, timedelta) else float(value)
