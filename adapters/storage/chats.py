"""SQL of chats a platform moved to a new id: re-keying a conversation, its bindings and its deliveries."""

from __future__ import annotations

import aiosqlite

from adapters.storage.database import Database
from core.values.model import ChatMove

# Only a group conversation that never had a private segment moves. Private mode is refused in a
# group (the valve), so this holds for every real move; the predicate makes the store say it too.
_MOVABLE = "c.kind = 'group' AND NOT EXISTS (SELECT 1 FROM segments s WHERE s.conversation_id = c.id)"


class ChatQueries:
    """Implements core.ports.store.chats.ChatMoveStore."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def move_chat(self, platform: str, old_chat_id: str, new_chat_id: str, now: float) -> ChatMove:
        """Follow a chat to its new id, in one transaction.

        - The old chat's conversation takes the new id. If a conversation of the new id exists
          already (its messages arrived before the move was known), the two are merged: the older
          one keeps its id and so every row attached to it; each row of the newer one moves over,
          except one the older has already under a unique key (its rolling summary), which goes
          with the newer conversation.
        - Inbox keys of the old chat's messages are prefixed with the old chat id: the new chat
          numbers its messages afresh, and its message 12 is not the old chat's message 12.
        - Bindings (mirrors) to the old chat name the new one; pending deliveries to the old chat
          go to the new one, without quoting a message of the old chat.
        """
        if old_chat_id == new_chat_id:
            return ChatMove()
        async with self._db.tx() as db:
            old = await _conversation(db, platform, old_chat_id)
            new = await _conversation(db, platform, new_chat_id)
            known = [c for c in (old, new) if c is not None]
            if old is not None and not all(c["movable"] for c in known):
                return ChatMove(conversation_id=old["id"], refused=True)
            merged = None
            kept = 0
            if old is not None:
                await db.execute(
                    "UPDATE messages SET platform_message_id = ? || '/' || platform_message_id"
                    " WHERE conversation_id = ? AND platform_message_id IS NOT NULL",
                    (old_chat_id, old["id"]),
                )
                kept = old["id"]
                if new is not None:
                    # The older conversation (the one with the history) keeps its id.
                    kept, merged = min(old["id"], new["id"]), max(old["id"], new["id"])
                    await _merge(db, into=kept, source=merged)
                await db.execute(
                    f"UPDATE conversations SET chat_id = ? WHERE id = ? AND EXISTS (SELECT 1 FROM conversations c"
                    f" WHERE c.id = conversations.id AND {_MOVABLE})",
                    (new_chat_id, kept),
                )
            # A conversation bound to both chats keeps one binding; the other goes with its copies.
            cur = await db.execute(
                "UPDATE OR IGNORE bindings SET chat_id = ? WHERE platform = ? AND chat_id = ?",
                (new_chat_id, platform, old_chat_id),
            )
            bindings = cur.rowcount
            await db.execute("DELETE FROM bindings WHERE platform = ? AND chat_id = ?", (platform, old_chat_id))
            # A private reply names its segment and its own one-to-one chat: never a group's.
            cur = await db.execute(
                "UPDATE deliveries SET chat_id = ?, reply_to = NULL, thread_id = NULL"
                " WHERE platform = ? AND chat_id = ? AND status = 'pending' AND segment_id IS NULL",
                (new_chat_id, platform, old_chat_id),
            )
            deliveries = cur.rowcount
        return ChatMove(
            conversation_id=kept if old is not None else None,
            merged_conversation_id=merged,
            bindings=bindings,
            deliveries=deliveries,
        )


async def _conversation(db: aiosqlite.Connection, platform: str, chat_id: str) -> aiosqlite.Row | None:
    async with db.execute(
        f"SELECT c.id, ({_MOVABLE}) AS movable FROM conversations c WHERE c.platform = ? AND c.chat_id = ?",
        (platform, chat_id),
    ) as cur:
        return await cur.fetchone()


async def _merge(db: aiosqlite.Connection, *, into: int, source: int) -> None:
    """Move every row naming conversation `source` to `into`, then delete `source` (what stayed,
    a duplicate under a unique key, goes with it by its cascade). The referencing columns are
    read from the schema, so a table added later moves too instead of being cascaded away."""
    async with db.execute(
        'SELECT m.name, f."from" FROM sqlite_master m, pragma_foreign_key_list(m.name) f'
        " WHERE m.type = 'table' AND f.\"table\" = 'conversations' ORDER BY m.name"
    ) as cur:
        columns = [(row[0], row[1]) for row in await cur.fetchall()]
    for table, column in columns:
        # Names from the schema itself, never from input.
        await db.execute(f'UPDATE OR IGNORE "{table}" SET "{column}" = ? WHERE "{column}" = ?', (into, source))
    await db.execute("DELETE FROM conversations WHERE id = ?", (source,))
