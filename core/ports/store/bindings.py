"""The ports of mirrors: bindings of a conversation's normal output to other chats; a binding holds
no text (adapters.storage.bindings.BindingQueries implements both)."""

from __future__ import annotations

from typing import Protocol

from core.values.model import Binding


class BindingList(Protocol):
    """A conversation's bindings (the owner's pages)."""

    async def bindings_of(self, conversation_id: int) -> list[Binding]: ...


class BindingStore(BindingList, Protocol):
    """Binding and unbinding (the mirror commands)."""

    async def add_binding(self, conversation_id: int, platform: str, chat_id: str, now: float) -> Binding:
        """Bind (or bind again) the conversation to a chat.

        Raises:
            core.values.errors.PrivateWriteRefused: the conversation has an open segment; the write's
                own SQL refused it, whoever called.
        """
        ...

    async def remove_binding(self, conversation_id: int, binding_id: int) -> Binding | None:
        """Remove one binding of the conversation with its pending copies; None: no such binding."""
        ...
