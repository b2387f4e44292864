"""FakeOpenAIServer: a scripted OpenAI-compatible Chat Completions server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import base64
import binascii
import collections
import contextlib
import dataclasses
import inspect
import itertools
import json
import re
from collections.abc import Callable
from typing import Any

from aiohttp import BodyPartReader, web
from multidict import CIMultiDict

from tests.helpers.serving import LoopbackServer


@dataclasses.dataclass(frozen=True)
class ScriptedResponse:
    """One scripted answer. `body` is a JSON-able value or raw bytes; `delay` is waited first.

    A 200 with `body=None` means "the responder's (or default) reply, after `delay`".
    """

    status: int = 200
    body: Any = None
    headers: dict[str, str] = dataclasses.field(default_factory=dict)
    delay: float = 0.0
    content_type: str = "application/json"
    disconnect: bool = False  # hang up without answering
    # Server-sent events sent as they are to a streamed request, `pause` seconds apart: a recorded
    # stream (tests/helpers/stream_shapes.py). A str is the text after `data: ` (a blank line
    # follows it); bytes go on the wire as they are (a `:` comment, an `error:` field). None: a
    # completion `body` is streamed the way OpenAI streams it (`stream_completion`).
    events: tuple[str | bytes, ...] | None = None
    pause: float | None = None  # between events; None: the server's `token_seconds`
    done: bool = True  # `data: [DONE]` after the events (False: the body just ends there)
    cut_after: int | None = None  # the connection drops after this many events (no end of the body)


# A responder returns a completion dict, a reply text, or a ScriptedResponse (sync or async).
Responder = Callable[[dict[str, Any]], Any]


class FakeOpenAIServer(LoopbackServer):
    """A real HTTP server on 127.0.0.1 speaking the Chat Completions wire format.

    `async with FakeOpenAIServer() as server:` (or `with FakeOpenAIServer.run_in_thread()`
    for subprocess tests). Every POST to `{base_url}/chat/completions` is recorded in
    `requests` (parsed JSON), `raw_requests` (bytes) and `request_headers`; the answer is
    the next scripted one, else `responder(body)`, else `"fake reply #N"`.

    `strict=True` validates as llama.cpp's server does: a message whose `content` is not
    a string gets a 500 with its validation error (the script is not consumed), and
    `tools` are in effect only with a `tool_choice`; without one they are left out of
    the prompt, so no tool calls come back (`tools_in_effect` records each request).

    A request with `"stream": true` is answered with server-sent events, as every real server
    does: the completion cut into one chunk per word (a tool call's arguments in pieces of a few
    characters), `token_seconds` apart, the finish reason last, a usage chunk when asked with
    `stream_options.include_usage`, then `data: [DONE]`. `streaming = False` makes it a server
    that does not stream (it answers such a request in one piece); `stream_options` without
    `stream` is refused with 400, as OpenAI and vLLM refuse it. `stream_refusal`, when set, is the
    answer to every streamed request (OpenAI's 400 to `stream: true` for a model that cannot stream);
    the same request without `stream` is answered as usual. `events_sent` counts the events written.

    Two servers whose streams fail before any event, each answering the same request unstreamed as
    usual (the scripted answer is kept for it): `streams_with_tools = False` is llama-cpp-python
    0.3.36 with `--chat_format chatml-function-calling` (as measured on the real server, SmolLM2), whose
    answer to `stream: true` with `tools` and `tool_choice: "auto"` is 200 text/event-stream and a
    chunked body that ends at once (`0\r\n\r\n`: no event, no `[DONE]`; the connection then closed
    at its next request, as uvicorn closes it just after), while
    it streams a request without tools or with a forced tool_choice; `stream_closed_after_headers =
    True` closes the connection of every streamed request right after its headers. Measured on the
    same server too: `stream_usage = False` sends no usage chunk even when asked, and `window_bytes`
    makes a request body longer than it a request over the model's window, whose stream ends with no
    event (with tools or without) and which unstreamed is refused 400 as too long.
    """

    def __init__(self, model: str = "fake-model", *, strict: bool = False) -> None:
        self.model = model
        self.strict = strict
        self.streaming = True
        self.stream_refusal: ScriptedResponse | None = None
        self.streams_with_tools = True
        self.stream_closed_after_headers = False
        self.stream_usage = True
        self.window_bytes: int | None = None
        self._hang_up_next: set[asyncio.BaseTransport] = set()  # connections closed at their next request
        self.token_seconds = 0.0
        self.events_sent = 0
        self.tools_in_effect: list[bool] = []
        self.requests: list[Any] = []
        self.raw_requests: list[bytes] = []
        self.request_headers: list[CIMultiDict[str]] = []
        # The client's end of the connection each chat request came on (its address and port).
        self.connections: list[object] = []
        self.responder: Responder | None = None
        # Media: every image_url part received ((mime, bytes)), every transcription request, and
        # the answers of the next transcriptions (a text, or a ScriptedResponse for a failure).
        self.images: list[tuple[str, bytes]] = []
        self.accept_images = True  # False: a text-only model, refusing image parts as OpenAI does
        self.transcriptions: list[dict[str, Any]] = []
        self.transcripts: collections.deque[str | ScriptedResponse] = collections.deque()
        self.base_url = ""
        self.port = 0
        self._script: collections.deque[ScriptedResponse] = collections.deque()
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self._closing: asyncio.Event | None = None

    # --- scripting ---------------------------------------------------------------

    def script(self, *responses: ScriptedResponse | dict[str, Any] | str) -> None:
        """Queue answers: a ScriptedResponse, a completion dict (sent as 200) or a reply text."""
        for response in responses:
            self._script.append(_as_scripted(response))

    def reply_text(self, text: str, *, delay: float = 0.0, prompt_tokens: int = 7, completion_tokens: int = 3) -> None:
        self.script(
            ScriptedResponse(
                body=completion_json(text, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens),
                delay=delay,
            )
        )

    def reply_tool_call(
        self,
        name: str,
        arguments: str | dict[str, Any] = "{}",
        *,
        call_id: str = "call_1",
        text: str | None = None,
        delay: float = 0.0,
    ) -> None:
        """Queue an answer asking for one tool call; `arguments` is JSON text (dicts are dumped)."""
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments)
        call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        self.script(ScriptedResponse(body=completion_json(text, tool_calls=[call]), delay=delay))

    def reply_status(
        self, status: int, *, headers: dict[str, str] | None = None, body: Any = None, message: str | None = None
    ) -> None:
        """Queue an error status; the body defaults to an OpenAI-style error object."""
        if body is None:
            body = {"error": {"message": message or f"fake error {status}", "type": "fake_error", "code": status}}
        self.script(ScriptedResponse(status=status, body=body, headers=dict(headers or {})))

    def reply_raw(self, body: bytes, *, status: int = 200, content_type: str = "application/json") -> None:
        self.script(ScriptedResponse(status=status, body=body, content_type=content_type))

    def reply_delay(self, seconds: float, then: ScriptedResponse | dict[str, Any] | str | None = None) -> None:
        """Queue an answer sent after `seconds`: `then`, or the default reply."""
        if then is None:
            self.script(ScriptedResponse(body=None, delay=seconds))
        else:
            self.script(dataclasses.replace(_as_scripted(then), delay=seconds))

    def reply_stream(
        self,
        events: list[str | bytes] | tuple[str | bytes, ...],
        *,
        pause: float = 0.0,
        delay: float = 0.0,
        done: bool = True,
        cut_after: int | None = None,
    ) -> None:
        """Queue server-sent events sent as they are to a streamed request (a str is the text after
        `data: `, bytes go as they are), `pause` seconds apart, after `delay`; `data: [DONE]` follows
        them unless `done` is False; `cut_after`: the connection drops after that many events."""
        self.script(
            ScriptedResponse(body=None, events=tuple(events), pause=pause, delay=delay, done=done, cut_after=cut_after)
        )

    def reply_disconnect(self) -> None:
        """Queue a hang-up: the connection is closed without any answer."""
        self.script(ScriptedResponse(disconnect=True))

    def forget_script(self) -> None:
        """Drop the scripted answers not used yet (a test moving on to its next act)."""
        self._script.clear()

    @property
    def pending(self) -> int:
        """Scripted answers not yet used."""
        return len(self._script)

    # --- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        if self._runner is not None:
            return
        self._closing = asyncio.Event()
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat_completions)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/audio/transcriptions", self._transcriptions)
        await self._bind(app)
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    async def aclose(self) -> None:
        """Stop serving; safe to call twice."""
        runner, self._runner = self._runner, None
        if runner is None:
            return
        if self._closing is not None:
            self._closing.set()
        await runner.cleanup()

    # --- handlers ----------------------------------------------------------------

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"object": "list", "data": [{"id": self.model, "object": "model", "owned_by": "fake"}]}
        )

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        number = next(self._ids)
        if request.transport in self._hang_up_next:  # see `_stream_failing`
            request.transport.close()
            raise asyncio.CancelledError  # nothing may be written after the hang-up
        self.raw_requests.append(raw)
        self.connections.append(request.transport.get_extra_info("peername") if request.transport else None)
        self.requests.append(body)
        self.request_headers.append(CIMultiDict(request.headers))
        if not isinstance(body, dict):
            return web.json_response({"error": {"message": "request body is not a JSON object"}}, status=400)
        if not self.accept_images and _has_image_parts(body):
            return web.json_response(
                {
                    "error": {
                        "message": "Invalid content type. image_url is only supported by certain models.",
                        "type": "invalid_request_error",
                        "param": "messages.[1].content.[1].type",
                        "code": None,
                    }
                },
                status=400,
            )
        parts = _content_parts_error(body, self.images)
        if parts is not None:
            return web.json_response(
                {"error": {"message": parts, "type": "invalid_request_error", "param": "messages", "code": None}},
                status=400,
            )
        if body.get("stream_options") is not None and not body.get("stream"):
            return _openai_error("The 'stream_options' parameter is only allowed when 'stream' is enabled.", 400)
        if body.get("stream") and self.stream_refusal is not None:
            return _to_response(self.stream_refusal)
        over_window = self.window_bytes is not None and len(raw) > self.window_bytes
        if over_window and not body.get("stream"):
            return _openai_error(LLAMA_CPP_PYTHON_TOO_LONG, 400, param="messages")
        if body.get("stream") and self.streaming:
            eventless = not self.streams_with_tools and body.get("tools") and body.get("tool_choice") == "auto"
            if eventless or over_window:
                return await self._stream_failing(request, closed=False)
            if self.stream_closed_after_headers:
                return await self._stream_failing(request, closed=True)
        tools_in_effect = bool(body.get("tools")) and "tool_choice" in body
        if self.strict:
            self.tools_in_effect.append(tools_in_effect)
            if (invalid := _strict_validation_error(body)) is not None:
                return web.json_response(
                    {"error": {"code": 500, "message": invalid, "type": "server_error"}}, status=500
                )

        scripted = self._script.popleft() if self._script else None
        if scripted is None or (
            scripted.body is None and scripted.status == 200 and not scripted.disconnect and scripted.events is None
        ):
            delay = scripted.delay if scripted else 0.0
            responded = await self._respond(body, number)
            # A responder's own ScriptedResponse may carry a delay too (a model's time to answer).
            scripted = dataclasses.replace(responded, delay=max(delay, responded.delay))
        if self.strict and not tools_in_effect and scripted.status == 200 and isinstance(scripted.body, dict):
            scripted = dataclasses.replace(scripted, body=_without_tool_calls(scripted.body))
        if scripted.delay:
            await self._wait(scripted.delay)
        if scripted.disconnect:
            assert request.transport is not None
            request.transport.close()
            raise asyncio.CancelledError  # nothing may be written after the hang-up
        if body.get("stream") and self.streaming and scripted.status == 200:
            events = scripted.events
            if events is None and isinstance(scripted.body, dict) and scripted.body.get("choices"):
                usage = bool((body.get("stream_options") or {}).get("include_usage")) and self.stream_usage
                events = tuple(json.dumps(chunk) for chunk in stream_completion(scripted.body, include_usage=usage))
            if events is not None:
                pause = self.token_seconds if scripted.pause is None else scripted.pause
                return await self._stream(request, dataclasses.replace(scripted, events=events, pause=pause))
        return _to_response(scripted)

    async def _stream(self, request: web.Request, scripted: ScriptedResponse) -> web.StreamResponse:
        assert scripted.events is not None
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        try:
            for number, event in enumerate(scripted.events):
                if number == scripted.cut_after:
                    assert request.transport is not None
                    request.transport.abort()  # mid-body: the chunked encoding never ends
                    raise asyncio.CancelledError
                if number and scripted.pause:
                    await self._wait(scripted.pause)
                await response.write(event if isinstance(event, bytes) else f"data: {event}\n\n".encode())
                self.events_sent += 1
            if scripted.done:
                await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
        except ConnectionError:
            pass  # the client hung up mid-stream (its turn was cut off)
        return response

    async def _stream_failing(self, request: web.Request, *, closed: bool) -> web.StreamResponse:
        """The headers of a stream (sent at once), then: the connection closed (`closed`), or the
        chunked body's end with no event before it (llama-cpp-python's failed streamed handler)."""
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        if closed:
            assert request.transport is not None
            request.transport.abort()
            raise asyncio.CancelledError  # nothing may be written after the hang-up
        await response.write_eof()
        # uvicorn closes a connection whose ASGI app raised, a moment after the body's end: the
        # client's pool may hand it out again before it saw the close. The worst case of that race,
        # every time: the next request on this connection meets a close without an answer.
        if request.transport is not None:
            self._hang_up_next.add(request.transport)
        return response

    async def _transcriptions(self, request: web.Request) -> web.Response:
        """OpenAI's speech to text: multipart with `file` and `model` (each required: 400 without)."""
        if not request.content_type.startswith("multipart/form-data"):
            return _openai_error("Could not parse multipart form", 400)
        fields: dict[str, Any] = {}
        reader = await request.multipart()
        async for part in reader:
            if not isinstance(part, BodyPartReader):
                continue
            if part.name == "file" and part.filename:
                fields["file"] = (part.filename, part.headers.get("Content-Type", ""), bytes(await part.read()))
            elif part.name:
                fields[part.name] = await part.text()
        if not fields.get("model"):
            return _openai_error("you must provide a model parameter", 400, param="model")
        if "file" not in fields:
            return _openai_error("1 validation error for Request\nbody -> file\n  field required", 400, param="file")
        filename, content_type, data = fields["file"]
        self.transcriptions.append(
            {"model": fields["model"], "filename": filename, "content_type": content_type, "data": data, **fields}
        )
        answer = self.transcripts.popleft() if self.transcripts else f"fake transcript #{len(self.transcriptions)}"
        if isinstance(answer, ScriptedResponse):
            return _to_response(answer)
        return web.json_response({"text": answer})

    async def _respond(self, body: dict[str, Any], number: int) -> ScriptedResponse:
        if self.responder is None:
            return ScriptedResponse(body=completion_json(f"fake reply #{number}", model=self.model))
        result = self.responder(body)
        if inspect.isawaitable(result):
            result = await result
        return _as_scripted(result)

    async def _wait(self, seconds: float) -> None:
        assert self._closing is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._closing.wait(), seconds)


# llama-cpp-python's answer to an unstreamed request over the model's window (its server's error handler
# words "Requested tokens (N) exceed context window of N" as OpenAI does).
LLAMA_CPP_PYTHON_TOO_LONG = (
    "This model's maximum context length is 4096 tokens. However, you requested 5133 tokens "
    "(4109 in the messages, 1024 in the completion). Please reduce the length of the messages or completion."
)


def completion_json(
    text: str | None,
    *,
    tool_calls: list[dict[str, Any]] | None = None,
    model: str = "fake-model",
    prompt_tokens: int = 7,
    completion_tokens: int = 3,
) -> dict[str, Any]:
    """A Chat Completions response body as OpenAI sends it."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if tool_calls else "stop"}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def stream_completion(completion: dict[str, Any], *, include_usage: bool) -> list[dict[str, Any]]:
    """A Chat Completions body as OpenAI streams it (its recorded streams: tests/helpers/
    stream_shapes.py): a first chunk with the role, one chunk per word of the content, a tool
    call's id and name first and its arguments in pieces, the finish reason in a chunk of its own,
    then (asked for) the usage in a chunk with no choices."""
    head = {k: completion.get(k) for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    choice = completion["choices"][0]
    message = choice.get("message") or {}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": "" if message.get("content") is not None else None})]
    chunks += [chunk({"content": word}) for word in re.findall(r"\s*\S+\s*|\s+", message.get("content") or "")]
    for index, call in enumerate(message.get("tool_calls") or ()):
        function = call["function"]
        opening = {"index": index, "id": call["id"], "type": "function"}
        chunks.append(chunk({"tool_calls": [{**opening, "function": {"name": function["name"], "arguments": ""}}]}))
        arguments = (
            function["arguments"] if isinstance(function["arguments"], str) else json.dumps(function["arguments"])
        )
        for start in range(0, len(arguments), 4):
            piece = {"index": index, "function": {"arguments": arguments[start : start + 4]}}
            chunks.append(chunk({"tool_calls": [piece]}))
    chunks.append(chunk({}, choice.get("finish_reason") or "stop"))
    if include_usage and completion.get("usage") is not None:
        chunks.append({**head, "choices": [], "usage": completion["usage"]})
    return chunks


def _strict_validation_error(body: dict[str, Any]) -> str | None:
    """llama.cpp's answer to a message it cannot parse, or None when every content is a string
    (or, in a user message with images, a list of content parts: a multimodal server's input)."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return "[json.exception.type_error.302] type must be array, but is " + type(messages).__name__
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if (
            isinstance(content, list)
            and message.get("role") == "user"
            and any(isinstance(p, dict) and p.get("type") == "image_url" for p in content)
        ):
            continue  # validated by _content_parts_error
        if not isinstance(content, str):
            kind = "null" if content is None else type(content).__name__
            return f"[json.exception.type_error.302] type must be string, but is {kind}"
    return None


_DATA_URL = re.compile(r"^data:(image/(?:jpeg|png|webp|gif));base64,([A-Za-z0-9+/]*={0,2})$")


def _content_parts_error(body: dict[str, Any], images: list[tuple[str, bytes]]) -> str | None:
    """OpenAI's check of content parts: text parts with a string, image_url parts with a URL; a
    `data:` URL must be base64 of a supported image type. Valid images are recorded in `images`."""
    found: list[tuple[str, bytes]] = []
    for message in body.get("messages") or ():
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text":
                if not isinstance(part.get("text"), str):
                    return "Invalid type for 'messages[].content[].text': expected a string"
            elif kind == "image_url":
                url = (part.get("image_url") or {}).get("url") if isinstance(part.get("image_url"), dict) else None
                match = _DATA_URL.match(url) if isinstance(url, str) else None
                if match is None:
                    return "Invalid image URL: expected a data URL with base64 of image/jpeg, png, webp or gif"
                try:
                    found.append((match.group(1), base64.b64decode(match.group(2), validate=True)))
                except binascii.Error:
                    return "Invalid base64 image data"
            else:
                return f"Invalid value for 'messages[].content[].type': {kind!r}"
    images.extend(found)
    return None


def _has_image_parts(body: dict[str, Any]) -> bool:
    return any(
        isinstance(part, dict) and part.get("type") == "image_url"
        for message in body.get("messages") or ()
        if isinstance(message, dict) and isinstance(message.get("content"), list)
        for part in message["content"]
    )


def _openai_error(message: str, status: int, *, param: str | None = None) -> web.Response:
    return web.json_response(
        {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": None}}, status=status
    )


def _without_tool_calls(body: dict[str, Any]) -> dict[str, Any]:
    """The answer a model gives when the tools never reached its prompt: text only."""
    body = json.loads(json.dumps(body))
    for choice in body.get("choices") or ():
        message = choice.get("message") or {}
        if message.pop("tool_calls", None):
            message["content"] = message.get("content") or ""
            choice["finish_reason"] = "stop"
    return body


def _as_scripted(response: ScriptedResponse | dict[str, Any] | str) -> ScriptedResponse:
    if isinstance(response, ScriptedResponse):
        return response
    if isinstance(response, str):
        return ScriptedResponse(body=completion_json(response))
    if isinstance(response, dict):
        return ScriptedResponse(body=response)
    raise TypeError(f"cannot script a {type(response).__name__}; use ScriptedResponse, dict or str")


def _to_response(scripted: ScriptedResponse) -> web.Response:
    if isinstance(scripted.body, bytes):
        payload = scripted.body
    else:
        payload = json.dumps(scripted.body).encode()
    return web.Response(
        status=scripted.status, body=payload, headers=scripted.headers, content_type=scripted.content_type
    )
