"""4. The first model request: bytes of the body an OpenAI-compatible server receives for `hello`
in a fresh database, through the real OpenAICompatibleProvider and the CLI's configuration."""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

from adapters.llm.openai_compat import OpenAICompatibleProvider
from adapters.storage.stores import sqlite_stores
from bot.bootstrap import build_companion, companion_config
from bot.settings import load_settings
from core.values.model import InboundMessage

BUDGET_BYTES = 8192


def _size(value: object) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


async def _measure() -> dict:
    from tests.helpers.fake_openai import FakeOpenAIServer

    with tempfile.TemporaryDirectory(prefix="bench-request-") as tmp:
        # Defaults as `companion chat` builds them, without the environment or a .env file.
        settings = load_settings(_env_file=None, db_path=Path(tmp) / "companion.db")
        async with FakeOpenAIServer() as server:
            stores = sqlite_stores(settings.db_path)
            provider = OpenAICompatibleProvider(server.base_url, None, settings.llm_model, max_retries=0)
            await stores.database.start()
            try:
                companion = build_companion(stores, provider, companion_config(settings))
                await companion.start()
                reply = await companion.handle(InboundMessage("terminal", "terminal", "owner", "hello", is_direct=True))
                await companion.drain()
            finally:
                await provider.aclose()
                await stores.database.aclose()
            raw = server.raw_requests[0]
            body = server.requests[0]
    messages = body.get("messages", [])
    return {
        "bytes": len(raw),
        "budget_bytes": BUDGET_BYTES,
        "requests": len(server.raw_requests),
        "replied": reply is not None and reply.text.startswith("fake reply"),
        "breakdown_bytes": {
            "messages": _size(messages),
            "system_prompt_chars": sum(len(m.get("content") or "") for m in messages if m.get("role") == "system"),
            "tools": _size(body.get("tools", [])),
            "tool_count": len(body.get("tools", [])),
            "other": len(raw) - _size(messages) - _size(body.get("tools", [])),
        },
        "ok": len(raw) < BUDGET_BYTES,
    }


def run(quick: bool = False) -> dict:
    return asyncio.run(_measure())
