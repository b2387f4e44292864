"""The label a mirror copy is headed with. What a binding copies is decided in SQL: the mirror rows
of an exchange are written in the reply's transaction by an INSERT ... SELECT that excludes private
messages and conversations with an open segment (adapters/storage)."""

from __future__ import annotations

from core.values.model import Conversation


def source_label(conversation: Conversation) -> str:
    """The source's name a mirror is headed with: `telegram DM`, `discord group`."""
    return f"{conversation.platform} {'DM' if conversation.is_direct else 'group'}"
