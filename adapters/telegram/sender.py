"""The Telegram sender: replies in parts Telegram accepts, a streamed reply's final edit, buttons, files, deletes, typing."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from telegram import InlineKeyboardButton, InlineKeyboardMarkup, MessageEntity, ReplyParameters
from telegram.constants import ChatAction
from telegram.error import BadRequest, ChatMigrated, TelegramError

from adapters.telegram.connection import TelegramConnection, is_permanent
from adapters.telegram.formatting import TelegramPart, streamed_parts, telegram_parts
from adapters.telegram.text import quotable
from core.values.edge import button_data
from core.values.errors import CompanionError, DeliveryFailed
from core.values.model import Attachment, Confirmation, DeliveryTarget, OutboundDelivery

log = logging.getLogger(__name__)

# What follows a chat that moved (old chat id, new chat id): the re-key in storage.
ChatMoved = Callable[[str, str], Awaitable[object]]

# Telegram's descriptions of an edit of a message that cannot be edited any more (deleted, too old).
_NOT_EDITABLE = ("message to edit not found", "message can't be edited", "message_id_invalid")


class TelegramDeliveryError(CompanionError):
    """A message could not be sent after the allowed retries; `delivered` parts went out before it."""

    def __init__(self, message: str, delivered: int) -> None:
        super().__init__(message)
        self.delivered = delivered


def keyboard(confirmation: Confirmation | None) -> InlineKeyboardMarkup | None:
    """A confirmation as an inline keyboard of one button; a press comes back as its callback_data."""
    if confirmation is None:
        return None
    return InlineKeyboardMarkup([[InlineKeyboardButton(confirmation.label, callback_data=button_data(confirmation))]])


class TelegramSender:
    """core.ports.ChatSender for Telegram: Markdown rendered as message entities (no parse mode, so
    nothing needs escaping), sent in parts, in order; a part already delivered is never sent again.

    A group upgraded to a supergroup (ChatMigrated) is followed: `on_moved` re-keys it in storage,
    and the parts go to the new chat, quoting nothing (the quoted message's id belonged to the old
    chat). The moves learnt (from ChatMigrated, or from the intake's service messages) send a row
    queued for the old id straight to the new one; the store is the record.

    Args:
        connection: the bot's connection (open while the platform runs).
        on_moved: the core's re-key of a chat that moved (old chat id, new chat id).
        typing_every: seconds between two typing requests (Telegram shows one for about five).
    """

    name = "telegram"

    def __init__(self, connection: TelegramConnection, *, on_moved: ChatMoved, typing_every: float = 4.0) -> None:
        self._connection = connection
        self._on_moved = on_moved
        self.typing_every: float | None = typing_every
        self._moved: dict[str, int] = {}

    # --- core.ports.ChatSender ------------------------------------------------------------

    async def send_delivery(self, delivery: OutboundDelivery) -> int:
        """core.ports.BaseSender: send an outbox row from part `parts_sent` on; its button under the last part.

        Raises:
            DeliveryFailed: permanent for 400/403/ChatMigrated, else transient.
        """
        if not self._connection.started:
            raise DeliveryFailed("not started", permanent=False, parts_sent=delivery.parts_sent)
        target = delivery.target
        thread = int(target.thread_id) if target.thread_id else None
        markup = keyboard(delivery.confirm)
        try:
            if delivery.streamed:
                # Shown while the model wrote it: its messages are edited into the final text.
                return await self._finish_streamed(
                    target.chat_id,
                    delivery.text,
                    delivery.streamed,
                    start=delivery.parts_sent,
                    reply_to=quotable(target.reply_to),
                    thread_id=thread,
                    reply_markup=markup,
                )
            sent = await self._send_parts(
                target.chat_id,
                delivery.text,
                start=delivery.parts_sent,
                reply_to=quotable(target.reply_to),
                thread_id=thread,
                on_moved=self._on_moved,
                reply_markup=markup,
            )
        except TelegramDeliveryError as exc:
            raise _failed(exc, delivery.parts_sent) from exc
        # Every part from `parts_sent` on went out: the count without rendering the text again.
        return delivery.parts_sent + len(sent) if sent else len(telegram_parts(delivery.text))

    async def send_text(self, chat_id: str, text: str) -> str:
        """core.ports.BaseSender: post `text` now, without an outbox row (a binding's test post).

        Raises:
            DeliveryFailed: permanent for 400 (chat not found), 403 (not a member, blocked) and
                ChatMigrated, else transient.
        """
        if not self._connection.started:
            raise DeliveryFailed("not started", permanent=False, parts_sent=0)
        try:
            sent = await self._send_parts(chat_id, text)
        except TelegramDeliveryError as exc:
            raise _failed(exc, 0) from exc
        return str(sent[0]) if sent else ""

    async def send_answer(
        self,
        target: DeliveryTarget,
        text: str,
        *,
        confirm: Confirmation | None = None,
        files: Sequence[Attachment] = (),
    ) -> None:
        """core.ports.ChatSender: an answer that is no outbox row, its button under the last part;
        each file follows as a document.

        Raises:
            DeliveryFailed: a part or a file could not be sent (permanent as for `send_delivery`).
        """
        if not self._connection.started:
            raise DeliveryFailed("not started", permanent=False, parts_sent=0)
        thread = int(target.thread_id) if target.thread_id else None
        try:
            if text:
                await self._send_parts(
                    target.chat_id,
                    text,
                    reply_to=quotable(target.reply_to),
                    thread_id=thread,
                    on_moved=self._on_moved,
                    reply_markup=keyboard(confirm),
                )
            chat: int | str = target.chat_id
            if (moved := self._moved.get(target.chat_id)) is not None:
                chat, thread = moved, None
            for attachment in files:
                document = functools.partial(
                    self._connection.bot.send_document,
                    chat,
                    document=attachment.data,
                    filename=attachment.filename,
                    message_thread_id=thread,
                )
                await self._connection.call("sendDocument", document)
        except TelegramDeliveryError as exc:
            raise _failed(exc, 0) from exc
        except TelegramError as exc:
            raise DeliveryFailed(type(exc).__name__, permanent=is_permanent(exc), parts_sent=0) from exc

    async def delete(self, target: DeliveryTarget, message_id: str | None) -> bool:
        """core.ports.ChatSender: delete the person's message; False when Telegram refused (too old,
        no rights) or kept failing. A late message of a chat upgraded since is named "old chat id/id"."""
        if message_id is None or not self._connection.started:
            return False
        chat, _, own = message_id.rpartition("/")
        if not own.isdigit():
            return False
        return await self._delete(int(chat or target.chat_id), int(own))

    async def show_typing(self, target: DeliveryTarget) -> None:
        """core.ports.ChatSender: one sendChatAction; typing is courtesy: never retried, never fatal."""
        if not self._connection.started:
            return
        chat = self._moved.get(target.chat_id) or int(target.chat_id)
        try:
            await self._connection.bot.send_chat_action(chat, ChatAction.TYPING)
        except TelegramError as exc:
            log.debug("telegram: sendChatAction failed (%s)", type(exc).__name__)

    # --- chats that moved -----------------------------------------------------------------

    def remember_move(self, old: str, new: int) -> None:
        """`old` is `new` now (the store was re-keyed from the service message)."""
        self._moved[old] = new

    def moved_to(self, chat_id: str) -> int | None:
        """The supergroup `chat_id` was upgraded to, once the store was re-keyed for it."""
        return self._moved.get(chat_id)

    # --- parts ----------------------------------------------------------------------------

    async def _send_parts(
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
        """Send Markdown `text` in parts, in order, from part `start` on (the parts before it went
        out earlier). A part whose entities Telegram refuses goes once more as the same text without
        them. ChatMigrated is followed (`on_moved` re-keys the chat). `reply_markup` goes under the last part.

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
                    message_id = await self._send_part(chat_id, part, reply, thread_id, markup)
                except ChatMigrated as moved:
                    chat_id, reply_to, thread_id = await self._follow(chat_id, moved.new_chat_id, on_moved), None, None
                    message_id = await self._send_part(chat_id, part, None, None, markup)
            except TelegramError as exc:
                raise TelegramDeliveryError(f"sendMessage failed ({type(exc).__name__})", len(sent)) from exc
            sent.append(message_id)
        return sent

    async def _finish_streamed(
        self,
        chat_id: int | str,
        text: str,
        message_ids: tuple[str, ...],
        *,
        start: int = 0,
        reply_to: int | None = None,
        thread_id: int | None = None,
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
                    target = await self._follow(chat_id, moved.new_chat_id, self._on_moved)
                    await self._send_part(target, part, None, None, markup)
            except TelegramError as exc:
                raise TelegramDeliveryError(f"a streamed reply's part failed ({type(exc).__name__})", done) from exc
            done += 1
        for message_id in message_ids[len(parts) :]:  # shown while written, no longer part of the reply
            await self._delete(int(chat_id), int(message_id))
        return len(parts)

    async def _edit_part(
        self, chat_id: int | str, message_id: int, part: TelegramPart, markup: InlineKeyboardMarkup | None
    ) -> bool:
        """Edit one message into a rendered part (once more without its entities if Telegram refuses
        them), as `bot.edit_message_text` edits it; False when the message cannot be edited any more."""
        entities = [MessageEntity(**entity.as_dict()) for entity in part.entities]
        params: dict[str, Any] = {
            "text": part.text,
            "chat_id": chat_id,
            "message_id": message_id,
            "entities": entities or None,
            "reply_markup": markup,
        }
        try:
            try:
                await self._post("editMessageText", params)
            except BadRequest as exc:
                if not entities or "entit" not in exc.message.lower():
                    raise
                log.warning("telegram: the entities of a part were refused (%s); it goes plain", type(exc).__name__)
                await self._post("editMessageText", {**params, "entities": None})
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

    async def _send_part(
        self,
        chat_id: int | str,
        part: TelegramPart,
        reply: ReplyParameters | None,
        thread_id: int | None,
        markup: InlineKeyboardMarkup | None,
    ) -> int:
        """Send one rendered part, as `bot.send_message` sends it; its message id. When Telegram
        refuses its entities, once more without them."""
        entities = [MessageEntity(**entity.as_dict()) for entity in part.entities]
        params: dict[str, Any] = {
            "chat_id": chat_id,
            "text": part.text,
            "entities": entities or None,
            "message_thread_id": thread_id,
            "reply_markup": markup,
            "reply_parameters": reply,
        }
        try:
            sent = await self._post("sendMessage", params)
        except BadRequest as exc:
            if not entities or "entit" not in exc.message.lower():
                raise
            log.warning("telegram: the entities of a part were refused (%s); it goes plain", type(exc).__name__)
            sent = await self._post("sendMessage", {**params, "entities": None})
        return int(sent["message_id"])

    async def _post(self, method: str, params: dict[str, Any]) -> Any:
        """One call (`TelegramConnection.call`: its retries) of the bot's method `method`, its answer
        left as JSON (`TelegramConnection.post`: the Message Telegram returns is not parsed)."""
        post = self._connection.post
        return await self._connection.call(method, lambda: post(method, dict(params)))

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

    async def _delete(self, chat_id: int, message_id: int) -> bool:
        """Delete a message; False when Telegram refused (too old, no rights) or kept failing."""
        try:
            await self._connection.call(
                "deleteMessage", lambda: self._connection.bot.delete_message(chat_id, message_id)
            )
        except TelegramError as exc:
            log.info("telegram: a message could not be deleted (%s)", type(exc).__name__)
            return False
        return True


def _failed(exc: TelegramDeliveryError, parts_before: int) -> DeliveryFailed:
    """A send's failure as the outbox and the hand-off read it."""
    cause = exc.__cause__
    permanent = isinstance(cause, TelegramError) and is_permanent(cause)
    return DeliveryFailed(
        type(cause).__name__ if cause else "unknown", permanent=permanent, parts_sent=parts_before + exc.delivered
    )
