"""The round trip's baseline: a bare python-telegram-bot Application that asks the model server
with httpx, replies with send_message, and commits twice a turn to the engine the companion uses
(the user's message before the model call, the reply before the send). No context, no outbox,
no typing action, no streaming.

    BARE_TELEGRAM_TOKEN=... BARE_TELEGRAM_BASE_URL=http://127.0.0.1:PORT/bot \
    BARE_LLM_BASE_URL=http://127.0.0.1:PORT/v1 BARE_DATABASE=/tmp/bare.db python bench/bare_bot.py

BARE_DATABASE is a SQLite file (aiosqlite, the store's PRAGMAs: WAL, synchronous FULL, so each
commit is fsynced) or a postgresql:// URL (psycopg 3, one connection, synchronous_commit as the
server has it). Runs until SIGTERM or SIGINT; exits 0.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack

import httpx
from telegram import Update
from telegram.ext import Application, ContextTypes, MessageHandler, filters

# The store's PRAGMAs (adapters/storage/database.py; bench/_common.py repeats them).
SQLITE_PRAGMAS = (
    "PRAGMA foreign_keys = ON",
    "PRAGMA journal_mode = WAL",
    "PRAGMA synchronous = FULL",
    "PRAGMA secure_delete = ON",
    "PRAGMA busy_timeout = 5000",
)
TABLE = "CREATE TABLE IF NOT EXISTS bare_messages (id {key}, chat_id BIGINT NOT NULL, role TEXT NOT NULL, text TEXT NOT NULL)"

Commit = Callable[[int, str, str], Awaitable[None]]


async def open_database(target: str, stack: AsyncExitStack) -> Commit:
    """`commit(chat_id, role, text)`: one INSERT in a transaction of its own, committed."""
    if target.startswith(("postgresql://", "postgres://")):
        import psycopg

        conn = await psycopg.AsyncConnection.connect(target)
        stack.push_async_callback(conn.close)
        await conn.execute(TABLE.format(key="BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY"))
        await conn.commit()

        async def commit_pg(chat_id: int, role: str, text: str) -> None:
            await conn.execute(
                "INSERT INTO bare_messages (chat_id, role, text) VALUES (%s, %s, %s)", (chat_id, role, text)
            )
            await conn.commit()

        return commit_pg

    import aiosqlite

    db = await aiosqlite.connect(target, isolation_level=None)
    stack.push_async_callback(db.close)
    for pragma in SQLITE_PRAGMAS:
        await db.execute(pragma)
    await db.execute(TABLE.format(key="INTEGER PRIMARY KEY"))

    def insert(raw, chat_id: int, role: str, text: str) -> None:  # on aiosqlite's thread: one trip
        raw.execute("BEGIN IMMEDIATE")
        raw.execute("INSERT INTO bare_messages (chat_id, role, text) VALUES (?, ?, ?)", (chat_id, role, text))
        raw.execute("COMMIT")

    async def commit_sqlite(chat_id: int, role: str, text: str) -> None:
        await db._execute(insert, db._conn, chat_id, role, text)

    return commit_sqlite


async def main() -> int:
    token = os.environ["BARE_TELEGRAM_TOKEN"]
    base_url = os.environ["BARE_TELEGRAM_BASE_URL"]
    model_url = os.environ["BARE_LLM_BASE_URL"].rstrip("/")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    async with AsyncExitStack() as stack:
        commit = await open_database(os.environ["BARE_DATABASE"], stack)
        client = await stack.enter_async_context(httpx.AsyncClient(timeout=30.0))

        async def on_message(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
            message = update.message
            await commit(message.chat_id, "user", message.text)
            response = await client.post(
                f"{model_url}/chat/completions",
                json={"model": "default", "messages": [{"role": "user", "content": message.text}]},
            )
            response.raise_for_status()
            text = response.json()["choices"][0]["message"]["content"]
            await commit(message.chat_id, "assistant", text)
            await context.bot.send_message(message.chat_id, text)

        app = Application.builder().token(token).base_url(base_url).job_queue(None).build()
        app.add_handler(MessageHandler(filters.UpdateType.MESSAGE & filters.TEXT, on_message))
        async with app:
            await app.updater.start_polling(poll_interval=0.0, timeout=25, allowed_updates=["message"])
            await app.start()
            await stop.wait()
            await app.updater.stop()
            await app.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
