"""Pure text rules for Telegram: splitting long replies, and which group messages are addressed to the bot."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from adapters.rendering.text import split_message as _split

MAX_MESSAGE_LENGTH = 4096  # Telegram's limit, counted here in UTF-16 code units (never fewer than characters)


def split_message(text: str, limit: int = MAX_MESSAGE_LENGTH) -> list[str]:
    """Split `text` into non-empty parts of at most `limit` UTF-16 code units, in order
    (paragraph, line, sentence, word boundaries; see adapters.rendering.text)."""
    return _split(text, limit)


@dataclass(frozen=True, slots=True)
class Entity:
    """A message entity as Telegram sends it; offsets and lengths in UTF-16 code units."""

    type: str  # "mention", "text_mention", "bot_command", ...
    offset: int
    length: int
    user_id: int | None = None


def group_text(
    text: str, entities: Iterable[Entity], *, username: str, bot_id: int, replied_to_bot: bool, commands: set[str]
) -> str | None:
    """The text to answer in a group, with the bot's @mention removed; None when not addressed to the bot.

    Addressed: the bot is @mentioned, the message replies to the bot, or it starts with
    /command@thisbot (or a bare /command the companion knows: Telegram's own convention).
    """
    units = text.encode("utf-16-le", "surrogatepass")

    def piece(entity: Entity) -> str:
        return units[2 * entity.offset : 2 * (entity.offset + entity.length)].decode("utf-16-le", "replace")

    addressed, mentions = replied_to_bot, []
    for entity in entities:
        if entity.type == "bot_command" and entity.offset == 0:
            name, _, target = piece(entity)[1:].partition("@")
            if target and target.lower() != username.lower():
                return None  # a command for another bot
            addressed = addressed or bool(target) or name.lower() in commands
        elif (entity.type == "mention" and piece(entity).lower() == f"@{username.lower()}") or (
            entity.type == "text_mention" and entity.user_id == bot_id
        ):
            addressed = True
            mentions.append(entity)
    if not addressed:
        return None
    for entity in sorted(mentions, key=lambda e: e.offset, reverse=True):
        start, end = 2 * entity.offset, 2 * (entity.offset + entity.length)
        if units[end : end + 2] == b" \x00" and (start == 0 or units[start - 2 : start] in (b" \x00", b"\n\x00")):
            end += 2  # "hey @bot how" -> "hey how"
        units = units[:start] + units[end:]
    cleaned = units.decode("utf-16-le", "surrogatepass").strip()
    if mentions and min(e.offset for e in mentions) == 0:
        cleaned = cleaned.lstrip(",:;").strip()  # "@bot, how are you" -> "how are you"
    return cleaned or text.strip()  # a bare "@bot" is a greeting: answer it as written


def quotable(reply_to: str | None) -> int | None:
    """A message id to quote; none for a message of a chat upgraded since ("old chat id/id")."""
    return int(reply_to) if reply_to and reply_to.isdigit() else None
