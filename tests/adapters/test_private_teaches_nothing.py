"""Private turns teach normal mode nothing (issue 29, point 5): the real core, the real provider and httpx
against the fake model server, replies streamed on a fake Telegram. Whatever private turns came before
(tiny ones, or huge ones whose server reported many times the tokens and refused their image input,
their streaming with tools and without, and their tools), the next normal request is the same bytes:
the token ratio that sizes its window, the tools offered, streaming and images are learned from normal
requests alone.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from adapters.llm.openai_compat import OpenAICompatibleProvider
from adapters.storage.stores import sqlite_stores
from core.memory.context import ContextBudget
from core.turn.companion import Companion
from core.values import copy
from core.values.model import InboundMessage, Media
from tests.adapters.test_model_streaming import QUICK
from tests.conftest import PASSPHRASE
from tests.helpers.boot import USER, boot_companion
from tests.helpers.fake_openai import FakeOpenAIServer, ScriptedResponse, completion_json
from tests.helpers.fakes import FakeClock, FakeStreamer
from tests.helpers.media import png_with
from tests.helpers.stream_shapes import stream_unsupported

pytestmark = pytest.mark.engines

PRIVATE_MARKER = copy.PRIVATE_SYSTEM_LINE  # in the system prompt of every private request
FILLER = "about the garden, the weather and the soup we cooked on Sunday; "
# Small enough that the normal history does not fit whole, so the token ratio decides how much of it
# does; no summary fold (it would only add requests of its own).
BUDGET = ContextBudget(total_tokens=1500, fold_min=10_000)
TINY = (("just a word", False), ("and another", False))
HUGE = (
    ("what is on this picture? " + FILLER, True),  # its image refused, its stream with tools empty
    ("no tools please: " + FILLER * 20, False),  # its tools refused, its stream without tools refused
    ("a very long private story, " * 400, False),
)
_ids = itertools.count(1)


class TeachingServer(FakeOpenAIServer):
    """The fake model server; while `teaching`, to private requests only: it reports four tokens a
    byte, refuses image input, ends a stream offering tools with no event (llama-cpp-python), refuses
    `stream: true` without tools (400), and refuses tools to a message asking for none (Ollama's 400)."""

    def __init__(self) -> None:
        super().__init__(strict=True)
        self.teaching = False
        self.responder = self._answer

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        body = json.loads(await request.read())  # aiohttp keeps the body: the handler reads it again
        refusing = self.teaching and _private(body)
        self.accept_images = not refusing
        self.streams_with_tools = not refusing
        self.stream_refusal = stream_unsupported() if refusing and not body.get("tools") else None
        return await super()._chat_completions(request)

    def _answer(self, body: dict[str, Any]) -> Any:
        size = len(json.dumps(body))
        if not (self.teaching and _private(body)):
            return completion_json(f"noted ({len(body['messages'])})", prompt_tokens=size // 4)
        said = body["messages"][-1]["content"]
        if body.get("tools") and isinstance(said, str) and said.startswith("no tools please"):
            refusal = {"error": {"message": "fake-model does not support tools", "type": "api_error"}}
            return ScriptedResponse(status=400, body=refusal)
        return completion_json("a private answer", prompt_tokens=size * 4)


def _private(body: dict[str, Any]) -> bool:
    return PRIVATE_MARKER in (body["messages"][0].get("content") or "")


async def tell(companion: Companion, text: str, *, image: bool = False) -> None:
    media = (Media("photo", "image/png", None, None, _loader(png_with())),) if image else ()
    message = InboundMessage(
        "telegram", USER, USER, text, is_direct=True, message_id=f"m{next(_ids)}", user_name="Ann", media=media
    )
    reply = await companion.handle(message)
    if reply is not None and reply.delivery_id is not None and reply.conversation_id is not None:
        companion.outbox.hand_over(reply.conversation_id, reply.delivery_id)  # what an adapter does


def _loader(data: bytes):
    async def load() -> bytes:
        return data

    return load


async def next_normal_request(
    db_path: Path, passphrase_hash: str, private_turns: tuple[tuple[str, bool], ...], *, teaching: bool
) -> tuple[bytes, list[dict[str, Any]]]:
    """A normal history, a private interval of `private_turns`, /normal, and the next normal turn (with
    an image): the bytes of that turn's first request, and every request the private turns sent."""
    async with TeachingServer() as server:
        stores = sqlite_stores(db_path)
        await stores.database.start()
        provider = OpenAICompatibleProvider(server.base_url, model="fake-model", timeout=10.0)
        telegram = FakeStreamer("telegram")
        companion = await boot_companion(
            stores,
            provider,
            FakeClock(),
            passphrase_hash,
            (telegram,),
            outbox_options={"pacing": QUICK},
            burst_seconds=0.0,  # each message its own turn (the wire tests keep the shipped window)
            vision=True,
            budget=BUDGET,
        )
        companion.outbox.register_streamer(telegram)
        try:
            for n in range(24):
                await tell(companion, f"Normal message {n}, {FILLER * 3}")
            await tell(companion, f"/private {PASSPHRASE}")
            server.teaching = teaching
            before = len(server.requests)
            for text, image in private_turns:
                await tell(companion, text, image=image)
            private = server.requests[before:]
            server.teaching = False
            await tell(companion, "/normal")
            sent = len(server.raw_requests)
            await tell(companion, "And now, normally: what is on this one?", image=True)
            return server.raw_requests[sent], private
        finally:
            await companion.drain()
            await provider.aclose()
            await stores.database.aclose()


async def test_a_normal_request_is_byte_identical_whether_or_not_private_turns_came_before_it(
    tmp_path, passphrase_hash
) -> None:
    after_tiny, _ = await next_normal_request(tmp_path / "tiny.db", passphrase_hash, TINY, teaching=False)
    after_huge, taught = await next_normal_request(tmp_path / "huge.db", passphrase_hash, HUGE, teaching=True)

    # The private turns met every refusal: an image refused, streams failed, tools refused.
    assert any(_has_image(body) for body in taught) and not _has_image(taught[-1])
    assert any(body.get("stream") and body.get("tools") for body in taught)
    assert not taught[-1].get("tools") and not taught[-1].get("stream")
    assert after_huge == after_tiny
    # ... and the normal request still asks for all of it: streamed, tools offered, the image sent.
    body = json.loads(after_huge)
    assert body["stream"] is True and body["tools"] and _has_image(body)
    assert "Normal message 23" in after_huge.decode() and "Normal message 0," not in after_huge.decode()


def _has_image(body: dict[str, Any]) -> bool:
    return any(isinstance(m.get("content"), list) for m in body["messages"])
