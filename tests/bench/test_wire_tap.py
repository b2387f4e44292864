"""The real-server bench's wire tap (bench/_wire_tap.py) is transparent: what a client reads through it is
what the server sent, byte for byte and piece by piece, and what it records is the answer that passed.

The server is the fake model server (recorded streams of tests/helpers/stream_shapes.py), or a tiny
one that sends its next piece only once the client has the last; the client is httpx, the companion's
own, and in the last test the companion's whole model link.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from aiohttp import web

from adapters.llm.openai_compat import OpenAICompatibleProvider
from bench._wire_tap import WireTap
from core.values.model import ChatMessage, CompletionRequest, Partial, ToolSpec
from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.serving import LoopbackServer
from tests.helpers.stream_shapes import ANSWERS, FAILURES, StreamShape

HANG = 30.0  # a guard against a hang only: no test here measures time
ASK = {"model": "fake-model", "messages": [{"role": "user", "content": "hello"}]}
REMEMBER = {
    "type": "function",
    "function": {
        "name": "remember",
        "description": "Keep a note.",
        "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    },
}


def _chunk(delta: dict[str, Any], finish: str | None = None) -> str:
    return json.dumps(
        {
            "id": "chatcmpl-7f1e",
            "object": "chat.completion.chunk",
            "created": 1764547200,
            "model": "smollm2",
            "choices": [{"index": 0, "finish_reason": finish, "logprobs": None, "delta": delta}],
        }
    )


def _forced_piece(arguments: str) -> dict[str, Any]:
    call = {"name": "remember", "arguments": arguments}
    return {
        "role": None,
        "content": None,
        "function_call": call,
        "tool_calls": [{"index": 0, "id": "call__0_remember_cmpl-7f1e", "type": "function", "function": call}],
    }


# llama-cpp-python 0.3.36 streaming a forced tool call (llama_chat_format.py,
# _stream_response_to_function_stream): an empty first delta, then every chunk carries the legacy
# `function_call` and `tool_calls` with the same id and the name again, the arguments in pieces.
LLAMA_CPP_PYTHON_FORCED = StreamShape(
    "llama-cpp-python-forced-call",
    (
        _chunk({"role": "assistant", "content": None, "function_call": None, "tool_calls": None}),
        *(_chunk(_forced_piece(piece)) for piece in ('{"text": "', "my cat", " is Miso", '"}')),
        _chunk({"role": None, "content": None, "function_call": None, "tool_calls": None}, "tool_calls"),
    ),
    calls=(("call__0_remember_cmpl-7f1e", "remember", '{"text": "my cat is Miso"}'),),
    finish="tool_calls",
)


@pytest.fixture
async def server() -> AsyncIterator[FakeOpenAIServer]:
    async with FakeOpenAIServer() as fake:
        yield fake


@pytest.fixture
async def tap(server: FakeOpenAIServer) -> AsyncIterator[WireTap]:
    tap = WireTap(server.base_url, timeout=HANG)
    await tap.start()
    try:
        yield tap
    finally:
        await tap.aclose()


async def _post(base_url: str, body: dict[str, Any]) -> tuple[int, str, bytes]:
    """Status, content type and the body's bytes as they came off the wire (not decoded)."""
    async with (
        httpx.AsyncClient(timeout=HANG) as client,
        client.stream("POST", f"{base_url}/chat/completions", json=body) as response,
    ):
        body_bytes = b"".join([piece async for piece in response.aiter_raw()])
        return response.status_code, response.headers.get("content-type", ""), body_bytes


async def _straight_and_tapped(server: FakeOpenAIServer, tap: WireTap, shape: StreamShape) -> tuple[Any, Any]:
    """The same stream asked for straight from the server and through the tap."""
    shape.script(server)
    straight = await _post(server.base_url, {**ASK, "stream": True})
    shape.script(server)
    tapped = await _post(tap.base_url, {**ASK, "stream": True})
    return straight, tapped


@pytest.mark.parametrize(
    "shape", [*ANSWERS, LLAMA_CPP_PYTHON_FORCED], ids=[s.name for s in (*ANSWERS, LLAMA_CPP_PYTHON_FORCED)]
)
async def test_a_recorded_stream_passes_the_tap_byte_for_byte_and_is_recorded_as_the_answer_it_is(
    server: FakeOpenAIServer, tap: WireTap, shape: StreamShape
) -> None:
    straight, tapped = await _straight_and_tapped(server, tap, shape)

    assert tapped == straight
    assert tapped[1].startswith("text/event-stream")
    (exchange,) = tap.exchanges
    assert exchange.streamed and exchange.asked_to_stream and not exchange.eventless
    assert exchange.done == shape.done
    assert exchange.finish_reason == shape.finish
    message = exchange.response["choices"][0]["message"]  # type: ignore[index]
    assert (message["content"] or "") == shape.text
    calls = [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or ()]
    assert calls == [tuple(call) for call in shape.calls]


@pytest.mark.parametrize("shape", FAILURES, ids=[s.name for s in FAILURES])
async def test_a_stream_the_server_fails_passes_the_tap_as_it_is_and_is_recorded_unfinished(
    server: FakeOpenAIServer, tap: WireTap, shape: StreamShape
) -> None:
    straight, tapped = await _straight_and_tapped(server, tap, shape)

    assert tapped == straight
    (exchange,) = tap.exchanges
    assert exchange.streamed and exchange.events > 0 and exchange.finish_reason is None


async def test_a_stream_that_ends_before_its_first_event_reaches_the_client_so_and_is_recorded_as_eventless(
    server: FakeOpenAIServer, tap: WireTap
) -> None:
    # llama-cpp-python's answer to a streamed request offering tools with tool_choice "auto":
    # 200, text/event-stream, and the chunked body ends at once (llama-findings).
    eventless = StreamShape("eventless", (), finish=None, done=False)
    straight, tapped = await _straight_and_tapped(server, tap, eventless)

    assert tapped == straight == (200, "text/event-stream", b"")
    (exchange,) = tap.exchanges
    assert exchange.eventless and exchange.status == 200 and exchange.error is None
    assert exchange.finish_reason is None and exchange.tool_calls == []


async def test_a_whole_answer_and_a_refusal_pass_the_tap_unchanged(server: FakeOpenAIServer, tap: WireTap) -> None:
    for _ in range(2):
        server.reply_text("A whole answer.")
        server.reply_status(400, message="the request exceeds the available context size")
    straight = [await _post(server.base_url, ASK), await _post(server.base_url, ASK)]
    tapped = [await _post(tap.base_url, ASK), await _post(tap.base_url, ASK)]

    assert tapped == straight
    answered, refused = tap.exchanges
    assert (answered.status, answered.streamed) == (200, False)
    assert answered.response["choices"][0]["message"]["content"] == "A whole answer."  # type: ignore[index]
    assert (refused.status, refused.streamed) == (400, False)


class GatedServer(LoopbackServer):
    """A model server that streams two events and sends the second only when `go` is set."""

    def __init__(self) -> None:
        self.go = asyncio.Event()
        self.base_url = ""

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._stream)
        await self._bind(app)
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    async def aclose(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
        await response.prepare(request)
        await response.write(f"data: {_chunk({'content': 'first'})}\n\n".encode())
        await self.go.wait()
        await response.write(f"data: {_chunk({'content': ' second'}, 'stop')}\n\ndata: [DONE]\n\n".encode())
        await response.write_eof()
        return response


async def test_each_piece_reaches_the_client_before_the_server_sends_the_next() -> None:
    async with GatedServer() as gated:
        tap = WireTap(gated.base_url, timeout=HANG)
        await tap.start()
        try:
            async with (
                httpx.AsyncClient(timeout=HANG) as client,
                client.stream("POST", f"{tap.base_url}/chat/completions", json={**ASK, "stream": True}) as response,
            ):
                pieces = response.aiter_raw()
                # A tap that gathered the answer first would hold this piece until the server's end,
                # which never comes before `go`: the guard below would then fail the test.
                async with asyncio.timeout(HANG):
                    first = await anext(pieces)
                assert b"first" in first and b"second" not in first
                gated.go.set()
                rest = b"".join([piece async for piece in pieces])
            assert b"second" in rest and rest.endswith(b"data: [DONE]\n\n")
            (exchange,) = tap.exchanges
            assert exchange.response["choices"][0]["message"]["content"] == "first second"  # type: ignore[index]
        finally:
            await tap.aclose()


async def test_force_sets_tool_choice_on_the_next_request_offering_tools_and_its_stream_stays_a_stream(
    server: FakeOpenAIServer, tap: WireTap
) -> None:
    with_tools = {**ASK, "tools": [REMEMBER], "tool_choice": "auto", "stream": True}
    tap.force = "remember"
    LLAMA_CPP_PYTHON_FORCED.script(server)
    without = await _post(tap.base_url, {**ASK, "stream": True})
    LLAMA_CPP_PYTHON_FORCED.script(server)
    forced = await _post(tap.base_url, with_tools)
    LLAMA_CPP_PYTHON_FORCED.script(server)
    await _post(tap.base_url, with_tools)

    assert json.loads(server.raw_requests[0]) == {**ASK, "stream": True}  # no tools: left as it was
    assert server.requests[1] == {**with_tools, "tool_choice": {"type": "function", "function": {"name": "remember"}}}
    assert server.requests[2] == with_tools  # once only
    assert forced[1].startswith("text/event-stream") and without[1].startswith("text/event-stream")
    assert [e.forced for e in tap.exchanges] == [None, "remember", None]
    assert tap.exchanges[1].streamed and tap.exchanges[1].tool_calls == ["remember"]


async def test_the_companion_model_link_streams_through_the_tap(server: FakeOpenAIServer, tap: WireTap) -> None:
    # The tap of old answered every request as one JSON body: the link then stopped streaming.
    provider = OpenAICompatibleProvider(tap.base_url, model="fake-model", timeout=HANG)
    seen: list[Partial] = []

    async def sink(partial: Partial) -> None:
        seen.append(partial)

    tool = ToolSpec(name="remember", description="Keep a note.", parameters=REMEMBER["function"]["parameters"])
    server.reply_text("Lentil soup is a good idea tonight.")
    try:
        completion = await provider.complete(
            CompletionRequest(messages=(ChatMessage(role="user", content="hello"),), tools=(tool,)), partial=sink
        )
    finally:
        await provider.aclose()

    assert completion.text == "Lentil soup is a good idea tonight."
    assert provider.streams and len(seen) > 1
    (exchange,) = tap.exchanges
    assert exchange.asked_to_stream and exchange.streamed and exchange.offers_tools


async def test_a_connection_the_server_closes_without_an_answer_is_closed_to_the_client_too() -> None:
    """As uvicorn does after a streamed handler failed: the next request on that kept-alive connection
    meets a closed socket. Through the tap the client must meet the same (and may retry as it would),
    never an answer the server did not give (a 500 or 502 of the tap's own would end the turn)."""
    closed = 0

    async def close_at_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal closed
        closed += 1
        await reader.read(1)
        writer.close()

    server = await asyncio.start_server(close_at_once, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    tap = WireTap(f"http://127.0.0.1:{port}/v1", timeout=HANG)
    await tap.start()
    try:
        async with httpx.AsyncClient(timeout=HANG) as client:
            with pytest.raises(httpx.RemoteProtocolError):
                await client.post(f"{tap.base_url}/chat/completions", json=ASK)
        (exchange,) = tap.exchanges
        assert exchange.status == 0 and exchange.error is not None
        assert closed >= 1
    finally:
        await tap.aclose()
        server.close()
        await server.wait_closed()
