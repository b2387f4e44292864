"""A Discord message as the core's InboundMessage: whether the bot should answer it (a DM, a mention
or a reply to it in a guild channel), its words without the mention, its media, the message it
replies to, and where a forwarded message comes from (issue 15)."""

from __future__ import annotations

from typing import Any

import discord

from adapters.discord.client import PLATFORM
from adapters.discord.media import media_of
from core.values.model import InboundMessage


def to_inbound(message: discord.Message, client: discord.Client) -> InboundMessage | None:
    """The core's view of a message this bot should answer, with what it replies to or forwards (live,
    and caught up after a restart alike), or None to stay out of it."""
    me = _me(client)
    author = message.author
    if author.bot or author.id == me.id or message.webhook_id is not None:
        return None
    if message.type not in (discord.MessageType.default, discord.MessageType.reply):
        return None  # joins, pins, boosts and other system messages
    channel = message.channel
    text = message.content or forwarded_text(message)
    if isinstance(channel, discord.DMChannel):
        direct = True
    elif message.guild is not None or getattr(channel, "guild_id", None) is not None:
        direct = False
        tokens = _mention_tokens(message, me.id)
        addressed = any(token in text for token in tokens) or _replies_to(message, me.id)
        if not addressed:
            return None
        for token in tokens:
            text = text.replace(token, " ")
    else:
        return None  # group DMs: a bot is never in one
    text = text.strip()
    media = media_of(message)  # attachments and stickers; the text is then their caption
    if not text and not media:
        return None
    return InboundMessage(
        platform=PLATFORM,
        chat_id=str(channel.id),
        user_id=str(author.id),
        text=text,
        is_direct=direct,
        message_id=str(message.id),
        user_name=author.display_name,
        sent_at=message.created_at.timestamp(),
        media=media,
        **reply_context(message, me.id, client),
    )


def _me(client: discord.Client) -> discord.ClientUser:
    """This bot's own user; only known once the gateway said READY."""
    if client.user is None:
        raise RuntimeError("discord: used before the gateway said READY")
    return client.user


def _mention_tokens(message: discord.Message, me: int) -> list[str]:
    """How a message can mention this bot: its user, or the role Discord gives the bot in the guild."""
    tokens = [f"<@{me}>", f"<@!{me}>"]
    role = message.guild.self_role if message.guild is not None else None
    if role is not None:
        tokens.append(f"<@&{role.id}>")
    return tokens


def _replies_to(message: discord.Message, me: int) -> bool:
    reference = message.reference
    if reference is None:
        return False
    resolved = reference.resolved
    return isinstance(resolved, discord.Message) and resolved.author.id == me


def forwarded_text(message: discord.Message) -> str:
    """The words of a forward: Discord sends them in `message_snapshots`, with an empty content."""
    if not _is_forward(message) or not message.message_snapshots:
        return ""
    return message.message_snapshots[0].content


def reply_context(message: discord.Message, me_id: int, client: discord.Client | None) -> dict[str, Any]:
    """InboundMessage fields for a reply (`message_reference` type 0 with `referenced_message`)
    and a forward (`message_reference` type 1 with `message_snapshots`)."""
    reference = message.reference
    if reference is None or reference.message_id is None:
        return {}
    if _is_forward(message):
        # A snapshot carries no author: the forward is named by the channel it comes from.
        channel = client.get_channel(reference.channel_id) if client is not None else None
        name = getattr(channel, "name", None)
        return {
            "forwarded_from": f"#{name}" if name else "another Discord chat",
            # Where it comes from: maybe a message of the companion's own chats, a private
            # interval's included; the core reads it as the mode may (its id, and when it was sent).
            "forwarded_chat_id": str(reference.channel_id),
            "forwarded_message_id": str(reference.message_id),
            "forwarded_at": discord.utils.snowflake_time(reference.message_id).timestamp(),
        }
    fields: dict[str, Any] = {"reply_to_message_id": str(reference.message_id)}
    resolved = reference.resolved
    if isinstance(resolved, discord.Message):
        fields["quoted_text"] = resolved.content or None
        fields["quoted_from_companion"] = resolved.author.id == me_id
    return fields


def _is_forward(message: discord.Message) -> bool:
    reference = message.reference
    return reference is not None and reference.type == discord.MessageReferenceType.forward
