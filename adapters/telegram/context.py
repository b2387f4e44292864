"""What a Telegram message says beyond its text: the message it replies to (or the part it
quotes), and who a forwarded message comes from, as fields of the core's InboundMessage."""

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
        fields["forwarded_from"] = forward_name(message.forward_origin)
    return fields


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
