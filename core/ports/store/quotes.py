"""The ports of quotes and edits (issue 15): each read names the mode it reads for, inside its SQL
(adapters.storage.quotes.QuoteQueries implements both)."""

from __future__ import annotations

from typing import Protocol

from core.values.model import EditableMessage, QuotedMessage


class QuoteStore(Protocol):
    """What a quote or a forward says, as this mode may read it (core.turn.quotes.compose)."""

    async def quoted_message(
        self, conversation_id: int, platform_message_id: str, *, visible_segment: int | None
    ) -> QuotedMessage | None:
        """The stored message with this platform id, its text only when the mode that lives in
        `visible_segment` (None: normal mode) may read it. None: no such message is stored."""
        ...

    async def visible_texts(
        self, conversation_id: int, role: str, *, visible_segment: int | None, limit: int
    ) -> list[str]:
        """The newest `limit` chat texts of `role` that this mode may read, newest first."""
        ...

    async def conversation_of_chat(self, platform: str, chat_id: str) -> int | None:
        """The conversation of a chat, if there is one (where a forwarded message came from)."""
        ...

    async def private_interval_at(
        self, conversation_id: int, sent_at: float, *, visible_segment: int | None, margin: float
    ) -> bool:
        """Whether a message sent at `sent_at` (platform time, give or take `margin` seconds) may
        belong to a private interval of the conversation that the mode living in `visible_segment`
        (None: normal mode) may not read. Says nothing else of the interval."""
        ...


class EditStore(Protocol):
    """Applying an edit of a user's message (core.turn.edits.answer_edit)."""

    async def editable_message(
        self, conversation_id: int, platform_message_id: str, now: float
    ) -> EditableMessage | None:
        """The user chat message an edit names, unless it is gone or its interval expired."""
        ...

    async def edit_message(
        self, message_id: int, segment_id: int | None, text: str, now: float, *, said: str | None = None
    ) -> bool:
        """Replace a user chat message's text in its own mode and segment (and the recall index).
        False: it is gone, or its interval expired meanwhile; nothing changed."""
        ...

    async def answered_since(self, conversation_id: int, message_id: int, since: float) -> bool:
        """Whether `message_id` is the conversation's newest user message and was answered at `since` or later."""
        ...
