"""Rows for the contract modules, written with raw statements on any engine (no query class needed)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import TypeVar

from adapters.storage.engine import Database, Fetch, Statement
from adapters.storage.sealing import sealed

T = TypeVar("T")


async def insert(engine: Database, sql: str, **params: object) -> int:
    """One `INSERT ... RETURNING id` in a write of its own; the new id."""
    (made,) = await engine.write(Statement(sql + " RETURNING id", params, Fetch.ONE))
    return int(made.scalar)


async def count(engine: Database, sql: str, **params: object) -> int:
    (found,) = await engine.read(Statement(sql, params, Fetch.ONE))
    return int(found.scalar)


async def person(engine: Database, name: str = "owner") -> int:
    return await insert(engine, "INSERT INTO people (display_name, created_at) VALUES (:n, 1.0)", n=name)


async def account(engine: Database, person_id: int, platform: str = "telegram", user: str = "1") -> int:
    return await insert(
        engine,
        "INSERT INTO accounts (person_id, platform, platform_user_id, created_at) VALUES (:p, :pl, :u, 1.0)",
        p=person_id,
        pl=platform,
        u=user,
    )


async def conversation(
    engine: Database, person_id: int | None, chat: str = "1", kind: str = "direct", platform: str = "telegram"
) -> int:
    return await insert(
        engine,
        "INSERT INTO conversations (person_id, platform, chat_id, kind, created_at) VALUES (:p, :pl, :chat, :k, 1.0)",
        p=person_id,
        pl=platform,
        chat=chat,
        k=kind,
    )


async def open_segment(engine: Database, conversation_id: int, at: float = 10.0) -> int:
    segment_id = await insert(
        engine,
        "INSERT INTO segments (conversation_id, anchor_message_id, started_at, last_activity_at)"
        " VALUES (:c, 0, :at, :at)",
        c=conversation_id,
        at=at,
    )
    await keyed(engine, segment_id)
    return segment_id


async def keyed(engine: Database, segment_id: int, expires_at: float | None = None) -> None:
    """Give a segment planted raw its key, as `open_segment` does (nothing with a sealer that keeps none)."""
    key_id = await engine.sealer.create(expires_at)
    if key_id is not None:
        await engine.write(Statement("UPDATE segments SET key_id = :k WHERE id = :s", {"k": key_id, "s": segment_id}))
        engine.sealer.bind(segment_id, key_id)


async def end_segment(engine: Database, segment_id: int, at: float = 20.0) -> None:
    await engine.write(
        Statement(
            "UPDATE segments SET ended_at = :at, end_reason = 'command' WHERE id = :s", {"at": at, "s": segment_id}
        )
    )


async def message(
    engine: Database,
    conversation_id: int,
    text: str,
    *,
    segment_id: int | None = None,
    role: str = "user",
    at: float = 1.0,
    capture: str | None = None,
) -> int:
    """A message of `conversation_id`: private (and skipped by capture) when it has a segment."""
    mode = "normal" if segment_id is None else "private"
    mark = capture or ("pending" if segment_id is None else "skipped")
    return await insert(
        engine,
        "INSERT INTO messages (conversation_id, segment_id, mode, role, text, capture, created_at)"
        " VALUES (:c, :s, :mode, :role, :text, :cap, :at)",
        c=conversation_id,
        s=segment_id,
        mode=mode,
        role=role,
        text=sealed(engine.sealer, segment_id, "messages.text", text),
        cap=mark,
        at=at,
    )


@asynccontextmanager
async def opening_segment(engine: Database, conversation_id: int, at: float = 10.0) -> AsyncIterator[None]:
    """A segment of `conversation_id` being opened as the valve opens one (the conversation's row locked first on
    PostgreSQL), committed when the block ends: a write started inside the block runs against that open."""
    lock = Statement(f"SELECT id FROM conversations WHERE id = :c{engine.dialect.for_update}", {"c": conversation_id})
    opened = Statement(
        "INSERT INTO segments (conversation_id, anchor_message_id, started_at, last_activity_at)"
        " VALUES (:c, 0, :at, :at)",
        {"c": conversation_id, "at": at},
    )
    async with engine.tx() as tx:
        await tx.run(lock, opened)
        yield


async def racing(write: Awaitable[T], engine: Database, conversation_id: int) -> asyncio.Task[T]:
    """`write` started while a segment of `conversation_id` is being opened, and left waiting behind it until the
    open commits (a moment's pause lets it reach the database first; had it not, it runs after the open all the
    same, so the outcome asserted never depends on the timing)."""
    async with opening_segment(engine, conversation_id):
        task = asyncio.ensure_future(write)
        await asyncio.sleep(0.3)
    return task
