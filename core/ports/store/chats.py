"""The port of chats a platform moved to a new id (adapters.storage.chats.ChatQueries implements it)."""

from __future__ import annotations

from typing import Protocol

from core.values.model import ChatMove


class ChatMoveStore(Protocol):
    """Chats a platform moved to a new id (a Telegram group upgraded to a supergroup)."""

    async def move_chat(self, platform: str, old_chat_id: str, new_chat_id: str, now: float) -> ChatMove:
        """In one transaction: the conversation of the old chat takes the new id (merging in one
        begun under the new id already: the older conversation keeps its id and history), and the
        bindings and pending deliveries naming the old chat name the new one. Only group
        conversations that never had a private segment move; anything else is refused unchanged.

        Returns:
            What changed (nothing, when the move happened already).
        """
        ...
