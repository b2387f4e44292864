"""SQL of mirrors: bindings (created only where no segment is open) and the mirror rows of an exchange."""

from __future__ import annotations

import secrets

from adapters.storage.engine import Database as Engine
from adapters.storage.engine import Fetch, Ref, Row, Statement
from adapters.storage.guard import refusing_while_private
from core.values.errors import PrivateWriteRefused
from core.values.model import Binding, MirrorOf

_COLUMNS = "id, conversation_id, platform, chat_id, state, disabled_reason, created_at"

# The one predicate of "no private kind": the conversation has no open segment. Both writes
# below carry it inside their own SQL, so no caller can forget it.
_NO_OPEN_SEGMENT = "NOT EXISTS (SELECT 1 FROM segments s WHERE s.conversation_id = {c} AND s.ended_at IS NULL)"


def mirror_rows(conversation_id: int, message: int | Ref, mirror: MirrorOf, now: float) -> Statement:
    """One pending mirror row per active binding of the conversation, carrying the exchange (or, for a
    reminder or nudge, whose `mirror.user_message_id` is None, the companion's message alone): of the
    user's message, the words the person said, without what it quotes or forwards. The SELECT finds
    nothing when either message is private or a segment of the conversation is open, so a private
    reply creates no row at all. `message`: the companion's message (a `Ref` inside the write that
    stores it). Returns the new rows' ids."""
    return Statement(
        "INSERT INTO deliveries (conversation_id, message_id, binding_id, kind, platform, chat_id, nonce, text,"
        " next_attempt_at, created_at)"
        # A nonce of 16 characters per row (a Discord part's nonce adds 3: at most 25), distinct per binding.
        " SELECT b.conversation_id, a.id, b.id, 'mirror', b.platform, b.chat_id,"
        "  :nonce || CAST(100000 + b.id % 900000 AS TEXT),"
        "  '[' || :label || '] '"
        # The person's own words only (`said`), never the quote or forward lines before them: a
        # quote of a private message is its placeholder, and a mirror learns nothing of private mode.
        "  || CASE WHEN CAST(:user AS BIGINT) IS NULL THEN '' ELSE 'you: ' || coalesce(u.said, u.text) || :nl END"
        "  || 'companion: ' || a.text, :now, :now"
        " FROM bindings b"
        " JOIN messages a ON a.id = :assistant AND a.conversation_id = b.conversation_id"
        " LEFT JOIN messages u ON u.id = :user AND u.conversation_id = b.conversation_id"
        " WHERE b.conversation_id = :c AND b.state = 'active'"
        "  AND a.segment_id IS NULL AND a.mode = 'normal' AND a.kind = 'chat' AND a.role = 'assistant'"
        "  AND (CAST(:user AS BIGINT) IS NULL OR (u.id IS NOT NULL"
        "   AND u.segment_id IS NULL AND u.mode = 'normal' AND u.kind = 'chat' AND u.role = 'user'))"
        f"  AND {_NO_OPEN_SEGMENT.format(c='b.conversation_id')}"
        " ORDER BY b.id RETURNING id",
        {
            "c": conversation_id,
            "assistant": message,
            "user": mirror.user_message_id,
            "label": mirror.label,
            "now": now,
            "nonce": secrets.token_hex(5),
            "nl": "\n",
        },
        Fetch.ALL,
    )


class BindingQueries:
    """Bindings of a conversation; implements core.ports.store.bindings (BindingStore, BindingList) over the
    engine interface (adapters/storage/engine.py)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    async def add_binding(self, conversation_id: int, platform: str, chat_id: str, now: float) -> Binding:
        """Bind the conversation's normal output to (platform, chat_id), or make a disabled binding
        to it active again. The INSERT ... SELECT itself refuses a conversation with an open
        segment: whoever calls, a private conversation gets no binding.

        Raises:
            PrivateWriteRefused: the conversation is in private mode; nothing was written.
        """
        *_, made = await self._engine.write(
            # The guard first (on PostgreSQL it locks the conversation, as the valve does to open a segment).
            *refusing_while_private(self._engine.dialect, conversation_id, "binding"),
            Statement(
                "INSERT INTO bindings (conversation_id, platform, chat_id, created_at)"
                " SELECT c.id, :platform, :chat, :now FROM conversations c"
                f" WHERE c.id = :c AND {_NO_OPEN_SEGMENT.format(c='c.id')}"
                " ON CONFLICT (conversation_id, platform, chat_id) DO UPDATE SET state = 'active',"
                f" disabled_reason = NULL, disabled_at = NULL RETURNING {_COLUMNS}",
                {"c": conversation_id, "platform": platform, "chat": chat_id, "now": now},
                Fetch.ONE,
            ),
        )
        if made.one is None:
            raise PrivateWriteRefused("binding")
        return _binding(made.one)

    async def bindings_of(self, conversation_id: int) -> list[Binding]:
        (found,) = await self._engine.read(
            Statement(
                f"SELECT {_COLUMNS} FROM bindings WHERE conversation_id = :c ORDER BY id",
                {"c": conversation_id},
                Fetch.ALL,
            )
        )
        return [_binding(r) for r in found.rows]

    async def remove_binding(self, conversation_id: int, binding_id: int) -> Binding | None:
        """Delete one binding of the conversation; its pending mirror rows go with it (cascade).
        Returns what was removed, or None when the conversation has no such binding."""
        (removed,) = await self._engine.write(
            Statement(
                f"DELETE FROM bindings WHERE id = :id AND conversation_id = :c RETURNING {_COLUMNS}",
                {"id": binding_id, "c": conversation_id},
                Fetch.ONE,
            )
        )
        return _binding(removed.one) if removed.one is not None else None


def _binding(row: Row) -> Binding:
    return Binding(
        id=row["id"],
        conversation_id=row["conversation_id"],
        platform=row["platform"],
        chat_id=row["chat_id"],
        state=row["state"],
        reason=row["disabled_reason"],
        created_at=row["created_at"],
    )
