"""The wire tap of bench/real_server.py: a proxy that passes every answer on as it arrives and records each chat completion.

What the companion receives through it is what the server sent: the same status, the same headers
(hop-by-hop ones aside) and the same bytes, a streamed answer forwarded piece by piece as each piece
arrives, never gathered first (the tap of old answered everything as one JSON body, so the companion
never streamed there). Beside forwarding, it puts a streamed answer together from the events it passed
on, so the checks read the same chat completion whether it came whole or as a stream, and it records
whether the request streamed and how many events it got: a stream that ends with no event at all is
how llama-cpp-python's server fails what it cannot stream.
"""

from __future__ import annotations

import codecs
import dataclasses
import json
from typing import Any

import aiohttp
from aiohttp import web

# Headers that describe one connection or its framing, not the answer: the tap's own hop sets them.
_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
        "content-length",
        "host",
        "date",
        "server",
    }
)
DONE = "[DONE]"


@dataclasses.dataclass
class Exchange:
    """One chat completion as the tap saw it. `response` is the answer as one chat completion (a
    streamed one put together from its events); `streamed`: it came as `text/event-stream`, with
    `events` data events (`data: [DONE]` not counted) and `done` when `data: [DONE]` ended it."""

    request: dict[str, Any]
    status: int = 0
    response: dict[str, Any] | None = None
    forced: str | None = None
    content_type: str = ""
    streamed: bool = False
    events: int = 0
    done: bool = False
    error: str | None = None  # what the server reported in its stream, when it did

    @property
    def asked_to_stream(self) -> bool:
        return bool(self.request.get("stream"))

    @property
    def eventless(self) -> bool:
        """A streamed answer that ended before its first event (llama-cpp-python's failure)."""
        return self.streamed and self.events == 0 and self.error is None

    def _message(self) -> dict[str, Any]:
        return ((self.response or {}).get("choices") or [{}])[0].get("message") or {}

    @property
    def tool_calls(self) -> list[str]:
        return [c.get("function", {}).get("name", "") for c in self._message().get("tool_calls") or []]

    @property
    def call_ids(self) -> list[str]:
        return [c.get("id", "") for c in self._message().get("tool_calls") or []]

    @property
    def finish_reason(self) -> str | None:
        return ((self.response or {}).get("choices") or [{}])[0].get("finish_reason")

    @property
    def offers_tools(self) -> bool:
        return bool(self.request.get("tools"))

    def text(self) -> str:
        """Everything the request carries, as one string."""
        return json.dumps(self.request.get("messages"), ensure_ascii=False)

    def system(self) -> str:
        return "\n".join(
            m.get("content") or "" for m in self.request.get("messages") or () if m.get("role") == "system"
        )

    def sends_tool_result(self) -> bool:
        return any(m.get("role") == "tool" for m in self.request.get("messages") or ())


@dataclasses.dataclass
class _Call:
    id: str = ""
    name: str = ""
    arguments: str = ""


class StreamRecord:
    """A chat completion put together from the server-sent events of a stream, fed as they pass.

    Text deltas are joined; tool calls are kept by `index`, with the first id and name a call
    carries (llama-cpp-python repeats both in every chunk of a forced call) and its arguments
    joined; a fresh id with a name at an index seen already is the next call (Ollama numbers every
    call 0). `data: {"error": ...}` and an `error:` field are the server failing in its stream."""

    def __init__(self) -> None:
        self.events = 0
        self.done = False
        self.error: str | None = None
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""
        self._data: list[str] = []
        self._text: list[str] = []
        self._calls: list[_Call] = []
        self._slots: dict[int, int] = {}
        self._finish: str | None = None
        self._usage: Any = None

    def feed(self, piece: bytes) -> None:
        text = self._pending + self._decoder.decode(piece)
        lines = text.split("\n")
        self._pending = lines.pop()  # no end of line yet: the next piece carries the rest
        for line in lines:
            self._line(line.removesuffix("\r"))

    def close(self) -> None:
        rest = self._pending + self._decoder.decode(b"", final=True)
        self._pending = ""
        if rest:
            self._line(rest.removesuffix("\r"))
        self._line("")  # a last event without its blank line

    def _line(self, line: str) -> None:
        if line.startswith("data:"):
            self._data.append(line[5:].removeprefix(" "))
        elif line.startswith("error:"):
            self.error = line[6:].strip()[:500]
        elif not line and self._data:
            event, self._data = "\n".join(self._data), []
            self._event(event)

    def _event(self, event: str) -> None:
        if event.strip() == DONE:
            self.done = True
            return
        self.events += 1
        try:
            chunk = json.loads(event)
        except ValueError:
            self.error = "an event that is not JSON"
            return
        if not isinstance(chunk, dict):
            self.error = "an event that is not a JSON object"
            return
        if chunk.get("error") is not None:
            self.error = json.dumps(chunk["error"], ensure_ascii=False)[:500]
        if chunk.get("usage"):
            self._usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if delta.get("content"):
                self._text.append(delta["content"])
            for position, call in enumerate(delta.get("tool_calls") or ()):
                self._call(call, position)
            if choice.get("finish_reason") is not None:
                self._finish = choice["finish_reason"]

    def _call(self, delta: dict[str, Any], position: int) -> None:
        index = delta.get("index", position)
        function = delta.get("function") or {}
        slot = self._slots.get(index)
        current = self._calls[slot] if slot is not None else None
        if (
            current is not None
            and delta.get("id")
            and current.id
            and delta["id"] != current.id
            and function.get("name")
        ):
            current = None
        if current is None:
            current = _Call()
            self._slots[index] = len(self._calls)
            self._calls.append(current)
        current.id = current.id or delta.get("id") or ""
        current.name = current.name or function.get("name") or ""
        arguments = function.get("arguments")
        if arguments is not None:
            current.arguments += arguments if isinstance(arguments, str) else json.dumps(arguments)

    def completion(self) -> dict[str, Any]:
        """The stream as the one chat completion it is."""
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self._text) or None}
        if self._calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in self._calls
            ]
        completion: dict[str, Any] = {
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": self._finish}],
        }
        if self._usage is not None:
            completion["usage"] = self._usage
        return completion


class WireTap:
    """A proxy on 127.0.0.1 in front of the model server: passes everything on unchanged and as it
    arrives, records each chat completion, and, when `force` names a tool, sets `tool_choice` to it on
    the next request offering tools (streamed or not; the request is otherwise the companion's own)."""

    def __init__(self, upstream: str, *, timeout: float) -> None:
        self.upstream = upstream.rstrip("/")
        self.timeout = timeout
        self.exchanges: list[Exchange] = []
        self.force: str | None = None
        self.base_url = ""
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        # auto_decompress off: the bytes passed on are the server's own, whatever their encoding.
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout), auto_decompress=False)
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/v1/{path:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.base_url = f"http://127.0.0.1:{port}/v1"

    async def aclose(self) -> None:
        """Stop serving; safe to call twice."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        path = request.match_info["path"]
        body = await request.read()
        exchange = None
        if request.method == "POST" and path == "chat/completions":
            payload = json.loads(body)
            forced = None
            if self.force and payload.get("tools"):
                forced, self.force = self.force, None
                payload["tool_choice"] = {"type": "function", "function": {"name": forced}}
                body = json.dumps(payload).encode()
            exchange = Exchange(payload, forced=forced)
            self.exchanges.append(exchange)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        # The record reads the answer's bytes: asked for as they are (no server here compresses anyway).
        headers["Accept-Encoding"] = "identity"
        url = f"{self.upstream}/{path}" + (f"?{request.query_string}" if request.query_string else "")
        try:
            sent = await self._session.request(request.method, url, data=body or None, headers=headers)
        except aiohttp.ClientConnectionError:
            # The server closed the connection without an answer (uvicorn does so after a streamed
            # handler failed, and the next request on that kept-alive connection meets it): the
            # companion's side is closed without an answer too, so it meets exactly what it would
            # meet talking to the server directly (httpx's RemoteProtocolError, which it retries).
            if exchange is not None:
                exchange.error = "the server closed the connection without an answer"
            if request.transport is not None:
                request.transport.close()
            return web.Response(status=502)  # never written: the connection is closed already
        async with sent as upstream:
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for name, value in upstream.headers.items():
                if name.lower() not in _HOP:
                    response.headers.add(name, value)
            if upstream.content_length is not None:
                response.content_length = upstream.content_length  # framed as the server framed it
            content_type = upstream.headers.get("Content-Type", "")
            record = StreamRecord() if content_type.startswith("text/event-stream") else None
            if exchange is not None:
                exchange.status, exchange.content_type = upstream.status, content_type
                exchange.streamed = record is not None
            await response.prepare(request)
            whole = bytearray()
            try:
                async for piece in upstream.content.iter_any():
                    # Recorded before it is passed on: once the companion has read the answer (it may
                    # stop at `data: [DONE]`, before the body's end), the record holds all of it.
                    if record is None:
                        whole += piece
                    else:
                        record.feed(piece)
                    if exchange is not None:
                        _note(exchange, record, whole)
                    await response.write(piece)
            finally:
                if exchange is not None and record is not None:
                    record.close()
                    _note(exchange, record, whole)
            await response.write_eof()
            return response


def _note(exchange: Exchange, record: StreamRecord | None, whole: bytearray) -> None:
    """The answer so far as the checks read it: the JSON body once it parses, or the stream put together."""
    if record is None:
        try:
            exchange.response = json.loads(whole)
        except ValueError:
            exchange.response = None
        return
    exchange.events, exchange.done, exchange.error = record.events, record.done, record.error
    exchange.response = record.completion()
