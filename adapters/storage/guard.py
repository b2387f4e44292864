"""The one guard of lasting writes: nothing that outlives a private segment is written while
the conversation it comes from (its origin) has a segment open.

A lasting write is a row no segment's cascade removes that a turn causes: normal pad entries
(added or forgotten), goals, follow-ups and event watches (added or changed), analytics runs,
and tool operations outside a segment; linking and unlinking accounts
(`refusing_while_person_private`, over every conversation of the people concerned). Every such
write begins with the statements of `refusing_while_private`, in the same one-trip write
(adapters/storage/engine.py): `companion_raise` refuses the whole write when a segment is open.
On SQLite the write is BEGIN IMMEDIATE, on PostgreSQL the conversation's row is locked first (the
valve's `open_segment` takes the same lock), so no segment can open between the check and the
write. Rows a segment owns (its messages, summaries, private pad facts, tool operations, its
reply's delivery) are not lasting: they cascade away with it.
"""

from __future__ import annotations

from adapters.storage.engine import Dialect, Statement


def refusing_while_private(dialect: Dialect, origin: int, what: str) -> tuple[Statement, ...]:
    """The statements that open a guarded write (`engine.write(*refusing_while_private(...), *the_write)`):
    the write is refused whole, PrivateWriteRefused(`what`), when the conversation `origin` has an open
    segment. On PostgreSQL the conversation's row is locked first, and the valve's `open_segment` takes the
    same lock, so no segment opens between the check and the write (SQLite's BEGIN IMMEDIATE does that)."""
    check = Statement(
        "SELECT companion_raise('private_write', :what) FROM segments"
        " WHERE conversation_id = :origin AND ended_at IS NULL LIMIT 1",
        {"origin": origin, "what": what},
    )
    if not dialect.for_update:
        return (check,)
    lock = Statement(f"SELECT id FROM conversations WHERE id = :origin{dialect.for_update}", {"origin": origin})
    return (lock, check)


def refusing_while_person_private(dialect: Dialect, people: tuple[int, ...], what: str) -> tuple[Statement, ...]:
    """As `refusing_while_private`, over every conversation of every one of `people` (linking and
    unlinking change whose memory a conversation reads)."""
    params: dict[str, object] = {f"p{n}": person for n, person in enumerate(people)}
    named = ", ".join(f":{name}" for name in params)
    check = Statement(
        "SELECT companion_raise('private_write', :what) FROM segments s JOIN conversations c"
        f" ON c.id = s.conversation_id WHERE s.ended_at IS NULL AND c.person_id IN ({named}) LIMIT 1",
        {**params, "what": what},
    )
    if not dialect.for_update:
        return (check,)
    lock = Statement(
        f"SELECT id FROM conversations WHERE person_id IN ({named}) ORDER BY id{dialect.for_update}", params
    )
    return (lock, check)
