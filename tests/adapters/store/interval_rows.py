"""Rows of a conversation and its private intervals, written raw through the engine, for the contract modules."""

from __future__ import annotations

from adapters.storage.engine import Database, Fetch, Statement
from adapters.storage.sealing import opened, sealed
from tests.adapters.store.seed import keyed


async def scalar(engine: Database, sql: str, **params: object) -> object:
    (result,) = await engine.read(Statement(sql, params, Fetch.ONE))
    return result.scalar


async def column(engine: Database, sql: str, **params: object) -> list[object]:
    (result,) = await engine.read(Statement(sql, params, Fetch.ALL))
    return [next(iter(row.values())) for row in result.rows]


async def inserted(engine: Database, sql: str, **params: object) -> int:
    (result,) = await engine.write(Statement(sql + " RETURNING id", params, Fetch.ONE))
    return int(result.scalar)


async def words(engine: Database, table: str) -> list[str | None]:
    """The `text` of every row of `table` (messages, summaries, pad_entries, deliveries) as the query classes
    read it: a private row's opened with its interval's key (None when the key is gone)."""
    (result,) = await engine.read(Statement(f"SELECT text, segment_id FROM {table} ORDER BY id", fetch=Fetch.ALL))
    return [opened(engine.sealer, row["segment_id"], f"{table}.text", row["text"]) for row in result.rows]


async def person(engine: Database, name: str = "owner") -> int:
    return await inserted(engine, "INSERT INTO people (display_name, created_at) VALUES (:n, 1.0)", n=name)


async def conversation(
    engine: Database, chat_id: str = "1", *, platform: str = "telegram", kind: str = "direct", who: int | None = None
) -> int:
    if who is None and kind == "direct":
        who = await person(engine)
    return await inserted(
        engine,
        "INSERT INTO conversations (person_id, platform, chat_id, kind, created_at)"
        " VALUES (CAST(:p AS BIGINT), :platform, :chat, :kind, 1.0)",
        p=who,
        platform=platform,
        chat=chat_id,
        kind=kind,
    )


async def segment(
    engine: Database,
    conversation_id: int,
    *,
    at: float = 10.0,
    ended_at: float | None = None,
    expires_at: float | None = None,
) -> int:
    anchor = await scalar(
        engine, "SELECT coalesce(max(id), 0) FROM messages WHERE conversation_id = :c", c=conversation_id
    )
    made = await inserted(
        engine,
        "INSERT INTO segments (conversation_id, anchor_message_id, started_at, last_activity_at, ended_at, expires_at)"
        " VALUES (:c, :anchor, :at, :at, CAST(:ended AS DOUBLE PRECISION), CAST(:expires AS DOUBLE PRECISION))",
        c=conversation_id,
        anchor=anchor,
        at=at,
        ended=ended_at,
        expires=expires_at,
    )
    await keyed(engine, made, expires_at)
    return made


async def message(
    engine: Database,
    conversation_id: int,
    text: str,
    *,
    segment_id: int | None = None,
    role: str = "user",
    at: float = 11.0,
    key: str | None = None,
) -> int:
    return await inserted(
        engine,
        "INSERT INTO messages (conversation_id, segment_id, mode, role, kind, text, capture, created_at,"
        " platform_message_id) VALUES (:c, CAST(:s AS BIGINT), :mode, :role, 'chat', :text, :capture, :at,"
        " CAST(:key AS TEXT))",
        c=conversation_id,
        s=segment_id,
        mode="normal" if segment_id is None else "private",
        role=role,
        text=sealed(engine.sealer, segment_id, "messages.text", text),
        capture="pending" if segment_id is None else "skipped",
        at=at,
        key=key,
    )


async def delivery(
    engine: Database,
    conversation_id: int,
    *,
    segment_id: int | None = None,
    message_id: int | None = None,
    streamed: str | None = None,
    text: str = "an answer",
) -> int:
    return await inserted(
        engine,
        "INSERT INTO deliveries (conversation_id, message_id, segment_id, kind, platform, chat_id, nonce, text,"
        " streamed_ids, next_attempt_at, created_at) VALUES (:c, CAST(:m AS BIGINT), CAST(:s AS BIGINT), 'reply',"
        " 'telegram', '1', 'n', :text, CAST(:streamed AS TEXT), 1.0, 1.0)",
        c=conversation_id,
        m=message_id,
        s=segment_id,
        text=sealed(engine.sealer, segment_id, "deliveries.text", text),
        streamed=streamed,
    )


async def rows_of_segment(engine: Database, segment_id: int) -> dict[str, int]:
    """How many rows of each table still name the segment."""
    tables = ("segments", "messages", "summaries", "pad_entries", "tool_operations", "crossings", "deliveries")
    counts = {}
    for table in tables:
        key = "id" if table == "segments" else "segment_id"
        counts[table] = int(str(await scalar(engine, f"SELECT count(*) FROM {table} WHERE {key} = :s", s=segment_id)))
    return counts


async def fill_segment(engine: Database, conversation_id: int, segment_id: int, *, who: int) -> None:
    """A message, a summary, a private pad fact, a tool operation, a pending crossing and a pending reply."""
    said = await message(engine, conversation_id, "a private word", segment_id=segment_id)
    await engine.write(
        Statement(
            "INSERT INTO summaries (conversation_id, segment_id, mode, text, watermark, updated_at)"
            " VALUES (:c, :s, 'private', :t, :m, 12.0)",
            {
                "c": conversation_id,
                "s": segment_id,
                "m": said,
                "t": sealed(engine.sealer, segment_id, "summaries.text", "a private summary"),
            },
        ),
        Statement(
            "INSERT INTO pad_entries (person_id, segment_id, mode, text, created_at)"
            " VALUES (:p, :s, 'private', :t, 12.0)",
            {"p": who, "s": segment_id, "t": sealed(engine.sealer, segment_id, "pad_entries.text", "a private fact")},
        ),
        Statement(
            "INSERT INTO tool_operations (conversation_id, segment_id, tool, status, args_bytes, result_bytes,"
            " created_at) VALUES (:c, :s, 'search', 'ok', 1, 1, 12.0)",
            {"c": conversation_id, "s": segment_id},
        ),
        Statement(
            "INSERT INTO crossings (segment_id, destination, requested_at, confirm_by) VALUES (:s, :d, 12.0, 99.0)",
            {"s": segment_id, "d": sealed(engine.sealer, segment_id, "crossings.destination", "file")},
        ),
    )
    await delivery(engine, conversation_id, segment_id=segment_id)
