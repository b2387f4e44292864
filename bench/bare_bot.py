"""The round trip's baseline: a bare python-telegram-bot Application that asks the model server
with httpx and replies with send_message. No storage, no context, no outbox, no typing action.

    BARE_TELEGRAM_TOKEN=... BARE_TELEGRAM_BASE_URL=http://127.0.0.1:PORT/bot \
    BARE_LLM_BASE_URL=http://127.0.0.1:PORT/v1 python bench/bare_bot.py

Runs until SIGTERM or SIGINT; exits 0.
"""

from __future__ import annotations

import asyncio
import os
import signal

import httpx
from telegram import Update
from telegram.ext import Application, ContextTypes, MessageHandler, filters


async def main() -> int:
    token = os.environ["BARE_TELEGRAM_TOKEN"]
    base_url = os.environ["BARE_TELEGRAM_BASE_URL"]
    model_url = os.environ["BARE_LLM_BASE_URL"].rstrip("/")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    async with httpx.AsyncClient(timeout=30.0) as client:

        async def on_message(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
            message = update.message
            response = await client.post(
                f"{model_url}/chat/completions",
                json={"model": "default", "messages": [{"role": "user", "content": message.text}]},
            )
            response.raise_for_status()
            text = response.json()["choices"][0]["message"]["content"]
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
