"""What a Telegram message says beyond its text: the message it replies to (or the part it
quotes), and who a forwarded message comes from (and, when it may be one of the person's own chat
with the bot, when it was sent), as fields of the core's InboundMessage."""

from __future__ import annotations

from typing import Any

from telegram import (
    Message,
    MessageOrigin,
    MessageOriginChannel,
    MessageOriginChat,
    MessageOriginHiddenUser,
    MessageOriginUser,
)


def reply_context(message: Message, bot_id: int) -> dict[str, Any]:
    """InboundMessage fields for a reply (`reply_to_message`, with the selected `quote` if any,
    or an `external_reply` to another chat) and a forward (`forward_origin`)."""
    fields: dict[str, Any] = {}
    replied = message.reply_to_message
    quote = message.quote.text if message.quote is not None else None
    # In a forum topic every message "replies" to the topic's opening service message: not a quote.
    if replied is not None and replied.forum_topic_created is None:
        fields["reply_to_message_id"] = str(replied.message_id)
        fields["quoted_text"] = quote if quote is not None else (replied.text or replied.caption)
        fields["quoted_from_companion"] = bool(replied.from_user and replied.from_user.id == bot_id)
    elif message.external_reply is not None and quote is not None:
        fields["quoted_text"] = quote  # a message of another chat: never one the companion stored
    if message.forward_origin is not None:
        origin = message.forward_origin
        fields["forwarded_from"] = forward_name(origin)
        sender = message.from_user.id if message.from_user is not None else None
        if sender is not None and _may_be_from_our_chat(origin, sender, bot_id):
            # It may be a message of the person's chat with the bot, a private interval's included.
            # Telegram gives no id for a person's message: when it was sent is what is known.
            fields["forwarded_chat_id"] = str(sender)  # a private chat's id is the person's
            fields["forwarded_at"] = origin.date.timestamp()
    return fields


def _may_be_from_our_chat(origin: MessageOrigin, sender: int, bot_id: int) -> bool:
    """Whether a forward may come from the sender's own chat with the bot: sent by them or by the
    bot, or by someone whose name Telegram hides (it may be them: the safe direction)."""
    if isinstance(origin, MessageOriginHiddenUser):
        return True
    return isinstance(origin, MessageOriginUser) and origin.sender_user.id in (sender, bot_id)


def forward_name(origin: MessageOrigin) -> str:
    """Who a forwarded message comes from, as Telegram names them (Bot API `MessageOrigin`)."""
    if isinstance(origin, MessageOriginUser):
        return origin.sender_user.full_name
    if isinstance(origin, MessageOriginHiddenUser):
        return origin.sender_user_name
    if isinstance(origin, MessageOriginChat):
        name = origin.sender_chat.title or origin.sender_chat.full_name or "a chat"
        return f"{name} ({origin.author_signature})" if origin.author_signature else name
    if isinstance(origin, MessageOriginChannel):
        name = origin.chat.title or "a channel"
        return f"{name} ({origin.author_signature})" if origin.author_signature else name
    return "someone"
