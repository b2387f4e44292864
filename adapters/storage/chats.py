"""SQL of chats a platform moved to a new id: re-keying a conversation, its bindings and its deliveries."""

from __future__ import annotations

from collections.abc import Sequence

from adapters.storage.engine import Database, Dialect, Fetch, Row, Statement
from core.values.model import ChatMove

# Only a group conversation that never had a private segment moves. Private mode is refused in a
# group (the valve), so this holds for every real move; the predicate makes the store say it too.
_MOVABLE = "c.kind = 'group' AND NOT EXISTS (SELECT 1 FROM segments s WHERE s.conversation_id = c.id)"

# The columns that reference conversations, read from the schema (each engine keeps it its own way), so a
# table added later moves too instead of being cascaded away: (table, column), ordered by table.
_REFERENCES = {
    "sqlite": 'SELECT m.name AS tbl, f."from" AS col FROM sqlite_master m, pragma_foreign_key_list(m.name) f'
    " WHERE m.type = 'table' AND f.\"table\" = 'conversations' ORDER BY m.name, f.\"from\"",
    "postgres": "SELECT t.relname AS tbl, a.attname AS col FROM pg_constraint k"
    " JOIN pg_class t ON t.oid = k.conrelid JOIN pg_namespace n ON n.oid = t.relnamespace"
    " JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = ANY (k.conkey)"
    " WHERE k.contype = 'f' AND k.confrelid = CAST('conversations' AS regclass) AND n.nspname = current_schema()"
    " ORDER BY t.relname, a.attname",
}

# PostgreSQL has no UPDATE OR IGNORE: the unique keys (columns, and the partial index's predicate) a moved
# row could collide on, read from the schema too, so the move leaves such a row to the source's cascade.
_UNIQUE_KEYS = (
    "SELECT t.relname AS tbl, pg_get_expr(i.indpred, i.indrelid) AS pred,"
    " (SELECT string_agg(a.attname, ',' ORDER BY k.ord) FROM unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)"
    "  JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum) AS cols"
    " FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid JOIN pg_namespace n ON n.oid = t.relnamespace"
    " WHERE i.indisunique AND n.nspname = current_schema() AND NOT (0 = ANY (i.indkey)) ORDER BY t.relname"
)


class ChatQueries:
    """Implements core.ports.store.chats.ChatMoveStore."""

    def __init__(self, engine: Database) -> None:
        self._engine = engine

    async def move_chat(self, platform: str, old_chat_id: str, new_chat_id: str, now: float) -> ChatMove:
        """Follow a chat to its new id, in one transaction (two trips: what is read decides what is written).

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
        dialect = self._engine.dialect
        # On PostgreSQL both conversations' rows are locked (the valve's open_segment takes the same lock),
        # so no segment opens between the check of _MOVABLE and the move.
        select = (
            f"SELECT c.id, CASE WHEN {_MOVABLE} THEN 1 ELSE 0 END AS movable FROM conversations c"
            f" WHERE c.platform = :platform AND c.chat_id = :chat{dialect.for_update}"
        )
        async with self._engine.tx() as tx:
            found = await tx.run(
                Statement(select, {"platform": platform, "chat": old_chat_id}, Fetch.ONE),
                Statement(select, {"platform": platform, "chat": new_chat_id}, Fetch.ONE),
                Statement(_REFERENCES[dialect.name], {}, Fetch.ALL),
                *((Statement(_UNIQUE_KEYS, {}, Fetch.ALL),) if dialect.name == "postgres" else ()),
            )
            old, new = found[0].one, found[1].one
            known = [c for c in (old, new) if c is not None]
            if old is not None and not all(c["movable"] for c in known):
                return ChatMove(conversation_id=old["id"], refused=True)
            statements: list[Statement] = []
            merged = None
            kept = 0
            if old is not None:
                statements.append(
                    Statement(
                        "UPDATE messages SET platform_message_id = CAST(:old AS TEXT) || '/' || platform_message_id"
                        " WHERE conversation_id = :c AND platform_message_id IS NOT NULL",
                        {"old": old_chat_id, "c": old["id"]},
                    )
                )
                kept = old["id"]
                if new is not None:
                    # The older conversation (the one with the history) keeps its id.
                    kept, merged = min(old["id"], new["id"]), max(old["id"], new["id"])
                    keys = found[3].rows if len(found) > 3 else ()
                    statements += _merge(dialect, found[2].rows, keys, into=kept, source=merged)
                statements.append(
                    Statement(
                        "UPDATE conversations SET chat_id = :new WHERE id = :c AND EXISTS (SELECT 1 FROM conversations c"
                        f" WHERE c.id = conversations.id AND {_MOVABLE})",
                        {"new": new_chat_id, "c": kept},
                    )
                )
            bindings_at = len(statements)
            moved = {"new": new_chat_id, "platform": platform, "old": old_chat_id}
            statements += [
                # A conversation bound to both chats keeps one binding; the other goes with its copies.
                Statement(
                    "UPDATE bindings SET chat_id = :new WHERE platform = :platform AND chat_id = :old"
                    " AND NOT EXISTS (SELECT 1 FROM bindings b WHERE b.conversation_id = bindings.conversation_id"
                    " AND b.platform = bindings.platform AND b.chat_id = :new)",
                    moved,
                    Fetch.ROWCOUNT,
                ),
                Statement("DELETE FROM bindings WHERE platform = :platform AND chat_id = :old", moved),
                # A private reply names its segment and its own one-to-one chat: never a group's.
                Statement(
                    "UPDATE deliveries SET chat_id = :new, reply_to = NULL, thread_id = NULL"
                    " WHERE platform = :platform AND chat_id = :old AND status = 'pending' AND segment_id IS NULL",
                    moved,
                    Fetch.ROWCOUNT,
                ),
            ]
            results = await tx.run(*statements)
        return ChatMove(
            conversation_id=kept if old is not None else None,
            merged_conversation_id=merged,
            bindings=results[bindings_at].rowcount,
            deliveries=results[-1].rowcount,
        )


def _merge(
    dialect: Dialect, references: Sequence[Row], unique_keys: Sequence[Row], *, into: int, source: int
) -> list[Statement]:
    """Move every row naming conversation `source` to `into`, then delete `source` (what stayed,
    a duplicate under a unique key, goes with it by its cascade). Names from the schema itself, never from input."""
    params = {"into": into, "source": source}
    statements = []
    for reference in references:
        table, column = reference["tbl"], reference["col"]
        if dialect.name == "sqlite":
            sql = f'UPDATE OR IGNORE "{table}" SET "{column}" = :into WHERE "{column}" = :source'
        else:
            kept_back = [_collides(table, column, key) for key in unique_keys if _keys(key, table, column)]
            unless = "".join(f" AND NOT {collision}" for collision in kept_back)
            sql = f'UPDATE "{table}" SET "{column}" = :into WHERE "{column}" = :source{unless}'
        statements.append(Statement(sql, params))
    statements.append(Statement("DELETE FROM conversations WHERE id = :source", params))
    return statements


def _keys(key: Row, table: str, column: str) -> bool:
    return bool(key["tbl"] == table and column in str(key["cols"]).split(","))


def _collides(table: str, column: str, key: Row) -> str:
    """SQL, in an UPDATE of `table` moving `column` to :into: the row would break the unique `key` there
    (a row of :into with the same other key columns, both under the partial index's predicate)."""
    others = "".join(f' AND o."{c}" = "{table}"."{c}"' for c in str(key["cols"]).split(",") if c != column)
    pred = key["pred"]
    both = "" if pred is None else f" AND {pred}"
    return (
        f'({"TRUE" if pred is None else pred} AND EXISTS (SELECT 1 FROM "{table}" AS o'
        f' WHERE o."{column}" = :into{others}{both}))'
    )
