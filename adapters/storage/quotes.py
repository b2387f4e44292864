"""SQL of quotes and edits: a quoted message read as one mode may see it, and an edit kept in the
message's own mode and segment. The privacy predicates are inside each statement."""

from __future__ import annotations

from collections.abc import Mapping

from adapters.storage.engine import Database, Fetch, Statement
from adapters.storage.sealing import KeyLost, opened, sealed
from core.values.model import EditableMessage, QuotedMessage

# What one mode may read of a message row: a normal row, or a row of the segment it lives in
# (:s is NULL in normal mode, so only normal rows). The same predicate as the masked view's.
_READABLE = "((m.segment_id IS NULL AND m.mode = 'normal') OR (CAST(:s AS BIGINT) IS NOT NULL AND m.segment_id = :s))"

# A message an edit may change: a normal row, or a row of an interval that has not expired.
# An expired interval's rows are deleted at the next sweep; an edit never keeps them alive.
_NOT_EXPIRED = (
    "((m.segment_id IS NULL AND m.mode = 'normal') OR (m.mode = 'private' AND m.segment_id IN"
    " (SELECT g.id FROM segments g WHERE g.id = m.segment_id AND (g.expires_at IS NULL OR g.expires_at > :now))))"
)

# An edit is input of the mode the conversation is in when it is made: it may change a normal row
# only while no interval is open, and a private row only while that row's own interval is open.
_EDITED_IN_ITS_OWN_MODE = (
    "((m.segment_id IS NULL AND NOT EXISTS (SELECT 1 FROM segments o WHERE o.conversation_id = m.conversation_id"
    " AND o.ended_at IS NULL)) OR (m.segment_id IS NOT NULL AND EXISTS (SELECT 1 FROM segments o"
    " WHERE o.id = m.segment_id AND o.ended_at IS NULL)))"
)


# The message row an edit changes: the one read (its id, its segment as read, a user's chat message), only
# when the text differs, and only where the mode the edit is made in may change it.
_EDITABLE = (
    "m.id = :id AND m.segment_id IS NOT DISTINCT FROM :s"
    " AND m.text IS DISTINCT FROM :t"
    f" AND m.role = 'user' AND m.kind = 'chat' AND {_NOT_EXPIRED} AND {_EDITED_IN_ITS_OWN_MODE}"
)


class QuoteQueries:
    """Implements core.ports.store.quotes (QuoteStore, EditStore)."""

    def __init__(self, engine: Database) -> None:
        self._engine = engine

    async def quoted_message(
        self, conversation_id: int, platform_message_id: str, *, visible_segment: int | None
    ) -> QuotedMessage | None:
        """The message with this inbox key; its text only where the mode may read it: a private
        row's text never leaves the database for a mode that may not read it."""
        (found,) = await self._engine.read(
            Statement(
                f"SELECT m.role, m.kind, m.segment_id, CASE WHEN {_READABLE} THEN m.text END AS text FROM messages m"
                " WHERE m.conversation_id = :c AND m.platform_message_id = :p",
                {"c": conversation_id, "p": platform_message_id, "s": visible_segment},
                Fetch.ONE,
            )
        )
        row = found.one
        if row is None:
            return None
        # A private row's words open only in their own interval (masked, None, when its key is gone).
        return QuotedMessage(
            row["role"], row["kind"], opened(self._engine.sealer, row["segment_id"], "messages.text", row["text"])
        )

    async def visible_texts(
        self, conversation_id: int, role: str, *, visible_segment: int | None, limit: int
    ) -> list[str]:
        (found,) = await self._engine.read(
            Statement(
                f"SELECT m.text, m.segment_id FROM messages m WHERE m.conversation_id = :c AND m.role = :r AND m.kind = 'chat'"
                f" AND {_READABLE} ORDER BY m.id DESC LIMIT :n",
                {"c": conversation_id, "r": role, "s": visible_segment, "n": limit},
                Fetch.ALL,
            )
        )
        texts = (opened(self._engine.sealer, r["segment_id"], "messages.text", r["text"]) for r in found.rows)
        return [text for text in texts if text is not None]

    async def conversation_of_chat(self, platform: str, chat_id: str) -> int | None:
        (found,) = await self._engine.read(
            Statement(
                "SELECT id FROM conversations WHERE platform = :platform AND chat_id = :chat",
                {"platform": platform, "chat": chat_id},
                Fetch.ONE,
            )
        )
        return found.scalar

    async def private_interval_at(
        self, conversation_id: int, sent_at: float, *, visible_segment: int | None, margin: float
    ) -> bool:
        """Any interval of the conversation but the visible one whose span holds `sent_at`: from
        its start to its end, or to the restart that closed it (a message sent before that restart
        belongs to it), or on while it is open; `margin` widens it both ways (the safe direction)."""
        (found,) = await self._engine.read(
            Statement(
                "SELECT EXISTS (SELECT 1 FROM segments g WHERE g.conversation_id = :c AND g.id IS DISTINCT FROM :s"
                " AND g.started_at - :m <= :at AND (g.ended_at IS NULL OR :at <= (CASE WHEN g.restart_at > g.ended_at"
                " THEN g.restart_at ELSE g.ended_at END) + :m)) AS inside",
                {"c": conversation_id, "s": visible_segment, "at": sent_at, "m": margin},
                Fetch.ONE,
            )
        )
        return bool(found.scalar)

    async def editable_message(
        self, conversation_id: int, platform_message_id: str, now: float
    ) -> EditableMessage | None:
        (found,) = await self._engine.read(
            Statement(
                "SELECT m.id, m.segment_id, m.turn FROM messages m WHERE m.conversation_id = :c"
                f" AND m.platform_message_id = :p AND m.role = 'user' AND m.kind = 'chat' AND {_NOT_EXPIRED}",
                {"c": conversation_id, "p": platform_message_id, "now": now},
                Fetch.ONE,
            )
        )
        row = found.one
        return EditableMessage(row["id"], row["segment_id"], row["turn"]) if row is not None else None

    async def edit_message(
        self, message_id: int, segment_id: int | None, text: str, now: float, *, said: str | None = None
    ) -> bool:
        """Only `text` changes (False when it is the same: no edit, e.g. a link preview added, or
        when the edit was not made in the row's own mode): the row keeps its mode and segment (the
        statement names both as they were read), so an edit can never move a private message into
        normal mode; and a normal row changes only while no interval is open, a private row only
        while its own interval is open, so words typed in one mode never land in a row of the
        other. The recall index follows by the trigger `recall_message_update` (0010), normal rows only.
        One write: the interval's idle clock moves first, under the same predicate as the edit.
        A private row's words are sealed: its "same text" is compared in Python (`_sealed_edit`)."""
        if segment_id is not None:
            return await self._sealed_edit(message_id, segment_id, text, now)
        params = {"t": text, "said": said, "id": message_id, "s": segment_id, "now": now}
        *_, edited = await self._engine.write(*_edit(params))
        return edited.rowcount > 0

    async def _sealed_edit(self, message_id: int, segment_id: int, text: str, now: float) -> bool:
        """`edit_message` of a private row: inside one transaction, the row read (locked on PostgreSQL) and
        opened, nothing written when its words are the same (or its key is gone), else the new words sealed
        and written under the same predicate as a normal edit (a sealed value never equals the stored one,
        so its "text differs" holds). `said` is never kept in a private row."""
        sealer = self._engine.sealer
        async with self._engine.tx() as tx:
            (found,) = await tx.run(
                Statement(
                    f"SELECT text FROM messages WHERE id = :id AND segment_id = :s{self._engine.dialect.for_update}",
                    {"id": message_id, "s": segment_id},
                    Fetch.ONE,
                )
            )
            if found.one is None:
                return False
            if opened(sealer, segment_id, "messages.text", found.one["text"]) in (None, text):
                return False
            try:
                stored = sealed(sealer, segment_id, "messages.text", text)
            except KeyLost:
                return False
            params = {"t": stored, "said": None, "id": message_id, "s": segment_id, "now": now}
            *_, edited = await tx.run(*_edit(params))
            return edited.rowcount > 0

    async def answered_since(self, conversation_id: int, message_id: int, since: float) -> bool:
        (found,) = await self._engine.read(
            Statement(
                "SELECT NOT EXISTS (SELECT 1 FROM messages WHERE conversation_id = :c AND role = 'user' AND id > :m)"
                " AND EXISTS (SELECT 1 FROM messages WHERE conversation_id = :c AND role = 'assistant' AND id > :m"
                "  AND created_at >= :since) AS answered",
                {"c": conversation_id, "m": message_id, "since": since},
                Fetch.ONE,
            )
        )
        return bool(found.scalar)


def _edit(params: Mapping[str, object]) -> list[Statement]:
    """An edit's statements: a private row's interval's idle clock first (under the same predicate), then the row."""
    touch = []
    if params["s"] is not None:
        touch.append(
            Statement(
                "UPDATE segments SET last_activity_at = :now WHERE id = :s AND ended_at IS NULL"
                f" AND EXISTS (SELECT 1 FROM messages m WHERE {_EDITABLE})",
                params,
            )
        )
    return [
        *touch,
        Statement(f"UPDATE messages AS m SET text = :t, said = :said WHERE {_EDITABLE}", params, Fetch.ROWCOUNT),
    ]
