"""BaseProvider over any OpenAI-compatible Chat Completions server (Ollama, llama.cpp, vLLM, OpenAI, OpenRouter)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import email.utils
import json
import logging
import re
import time
from collections.abc import AsyncIterator
from typing import Any, NoReturn

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from adapters.http_client import LeanClient
from adapters.llm.images import data_url, fitted, refuses_images, without_images
from adapters.llm.learned import ServerTraits, Trait, stream_trait
from adapters.llm.streaming import StreamFailed, arguments_text, paced_lines, read_stream
from adapters.tls import shared_ssl_context
from core.ports.model import PartialSink
from core.values.errors import (
    ProviderBadResponse,
    ProviderRateLimited,
    ProviderRejected,
    ProviderRequestTooLong,
    ProviderServerError,
    ProviderToolsUnsupported,
    ProviderUnavailable,
)
from core.values.model import ChatMessage, Completion, CompletionRequest, Partial, ToolCall, ToolSpec
from core.values.retry import Attempt, RetryPolicy, retrying

log = logging.getLogger(__name__)

# Connection failures worth another try; a timeout is not among them: it means the
# whole call's deadline is spent (each attempt is given only the time that is left).
_RETRYABLE_ERRORS = (
    httpx.ConnectError,
    httpx.RemoteProtocolError,
    httpx.ReadError,
    httpx.WriteError,
)
# Statuses that say "try again": request timeout, rate limit, and a gateway or
# overloaded server. A 500 is not among them: llama.cpp answers 500 to requests it
# cannot parse, and sending the same request again cannot help.
_RETRYABLE_STATUSES = frozenset({408, 429, 502, 503, 504})
# Classification only: these patterns are matched against the server's error
# message, type and code, which never reach an exception or a log from here.
_TOO_LONG = re.compile(
    r"context.{0,24}(length|size|window|limit|exceed)|exceed.{0,40}context|too long|too many tokens", re.IGNORECASE
)
_INVALID = re.compile(
    r"invalid|type.must.be|type_error|must be a|expected|missing|required|unsupported|parse", re.IGNORECASE
)
# A server refusing a request because it offers tools (classification only, like the two above):
# vLLM started without --enable-auto-tool-choice and --tool-call-parser (400), Ollama with a model
# whose template has no tools ("... does not support tools", 400), llama.cpp's server started
# without --jinja ("tools param requires --jinja flag", 500), OpenRouter with no tool-capable
# endpoint for the model ("No endpoints found that support tool use", 404).
_TOOLS_REFUSED = re.compile(
    r"tool.choice.{0,40}(enable-auto-tool-choice|tool-call-parser)|does not support tools"
    r"|tools.{0,20}requires? --jinja|support tool use",
    re.IGNORECASE,
)
_TOOLS_REFUSED_STATUSES = frozenset({400, 404, 500})
# The finish reasons the OpenAI API documents; any other value is logged as "other", never as sent.
_FINISH_REASONS = frozenset({"stop", "length", "tool_calls", "content_filter", "function_call"})
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_SERVER_MESSAGE_LIMIT = 200
# A server message sharing a run this long with the request is taken to quote it.
_QUOTE_WINDOW = 16


# --- the response shape ----------------------------------------------------
# hide_input_in_errors: a ValidationError chained under a ProviderError must not
# carry the model's reply (which may echo the user's words) into a traceback.


class _Wire(BaseModel):
    model_config = ConfigDict(hide_input_in_errors=True)


class _Function(_Wire):
    name: str
    arguments: str | dict[str, Any] = ""


class _ToolCall(_Wire):
    id: str | None = None
    function: _Function


class _Message(_Wire):
    content: str | None = None
    tool_calls: list[_ToolCall] | None = None


class _Choice(_Wire):
    message: _Message
    finish_reason: str | None = None


class _Usage(_Wire):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class _ChatCompletion(_Wire):
    choices: list[_Choice] = Field(min_length=1)
    usage: _Usage | None = None


# --- the provider ------------------------------------------------------------


class OpenAICompatibleProvider:
    """A language model behind `POST {base_url}/chat/completions`.

    Retries connection failures, 408, 429 (honouring `Retry-After`) and 502/503/504 a
    bounded number of times, all within one deadline of `timeout` seconds for the whole
    call; every failure leaves as a `core.values.errors.ProviderError`. `max_tokens` is sent
    with every request (the request's own cap, else this default). Neither logs nor
    error messages ever contain request or reply text.

    Given a `partial` sink, a request is streamed (`stream: true`, server-sent events,
    adapters/llm/streaming.py): the deadline then bounds the wait for the answer to begin, and
    each later wait between events is bounded by `timeout` too, so a slow model's long answer is
    not cut off while it keeps coming. A streamed request that fails before anything of its answer
    was handed to the sink (a 4xx or 500, a stream that ends with no event or with an error event,
    one broken off) is sent again unstreamed: nothing was shown, so nothing doubles. When that one
    is answered (or a server answers a streamed request in one piece), requests of that shape (with
    tools, or without: adapters/llm/learned.py) are not streamed again this run, after one warning.
    Once anything was shown, a failure is never asked again.

    What it learns of the server from a private turn's request (`CompletionRequest.private`) shapes
    private requests only.
    """

    name = "openai-compatible"

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        model: str = "default",
        *,
        timeout: float = 60.0,
        max_tokens: int = 1024,
        max_retries: int = 3,
        backoff: float = 0.5,
        max_retry_after: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        url = server_url(base_url, "http://127.0.0.1:11434/v1")
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be 1 or more, not {max_tokens}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be 0 or more, not {max_retries}")
        self.model = model
        self.last_request_bytes: int | None = None
        # Parsed once: httpx would parse a str again for every request.
        self._url = httpx.URL(str(url) + "/chat/completions")
        # userinfo and query may hold credentials; messages show neither.
        self._where = f"the model server at {shown(url)}"
        self._api_key = api_key
        self._timeout = timeout
        self._max_tokens = max_tokens
        self._policy = RetryPolicy(
            attempts=max_retries + 1,
            base_delay=backoff,
            deadline=timeout,
            retryable=_worth_retrying,
            retry_after=_server_retry_after,
            max_retry_after=max_retry_after,
        )
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        self._closed = False
        self._sleep = asyncio.sleep
        # What the server refused (streaming per shape, image input), normal and private requests apart.
        self._traits = ServerTraits()
        # Each tool's JSON by its name, as last written (`_tool_json`).
        self._tools_written: dict[str, _WrittenTool] = {}

    @property
    def images_accepted(self) -> bool:
        """False once the server refused a normal request's image input (`companion doctor` reads it)."""
        return self._traits.why(Trait.IMAGES) is None

    async def aclose(self) -> None:
        """Close the HTTP client; safe to call twice."""
        self._closed = True
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    def streams(self, *, tools: bool) -> bool:
        """Whether a normal request offering tools (or not) is still streamed (`companion doctor` reads it)."""
        return self.not_streaming_because(tools=tools) is None

    def not_streaming_because(self, *, tools: bool) -> str | None:
        """Why, in our words, normal requests of that shape are no longer streamed; None while they are."""
        return self._traits.why(Trait.STREAM_WITH_TOOLS if tools else Trait.STREAM_WITHOUT_TOOLS)

    async def complete(self, request: CompletionRequest, *, partial: PartialSink | None = None) -> Completion:
        """Return one completion for `request`; with `partial`, streamed (see the class).

        Raises:
            core.values.errors.ProviderError: any failure, translated in `_raise_translated`.
        """
        request = await self._prepared(request)
        if partial is None or not self._traits.allows(stream_trait(request), request):
            return await self._complete_whole(request)
        streamed = await self._complete_streamed(request, partial)
        if isinstance(streamed, Completion):
            return streamed
        log.info(
            "a streamed request (%s) failed before its answer began (%s); sending it unstreamed",
            request.purpose,
            streamed.why,
        )
        # Raises when the unstreamed request fails too: then streaming is not what failed, and is kept.
        completion = await self._complete_whole(streamed.request)
        self._traits.refused(stream_trait(request), request, streamed.why)
        return completion

    async def _complete_whole(self, request: CompletionRequest) -> Completion:
        body = self._body(request)
        response, attempts, request = await self._post_images(body, request)
        return self._whole(response.content, attempts, request)

    async def _complete_streamed(self, request: CompletionRequest, partial: PartialSink) -> Completion | _Unstreamed:
        """Stream `request`. Returns the completion; or, when the streamed request failed before
        anything was handed to `partial` in a way the same request unstreamed may not meet, why (the
        caller sends it unstreamed). A refusal of image input is met here as without streaming:
        images are left out from then on."""
        body = self._body(request, streamed=True)
        try:
            response, attempts = await self._post(body, request, stream=True)
        except ProviderRejected as exc:
            if any(m.images for m in request.messages) and refuses_images(exc):
                self._traits.refused(Trait.IMAGES, request, "it refused image input")
                return await self._complete_streamed(without_images(request), partial)
            if isinstance(exc, ProviderRequestTooLong | ProviderToolsUnsupported) or exc.status in (401, 403):
                raise
            return _Unstreamed(f"it failed a streamed request with {exc.status}", request)
        except ProviderServerError as exc:
            # A 500 is never retried (the same request would fail the same way), so the deadline is
            # not spent; llama-cpp-python answers one when its streamed handler fails before it began.
            if exc.status != 500:
                raise
            return _Unstreamed("it failed a streamed request with 500", request)
        shown = False

        async def sink(piece: Partial) -> None:
            nonlocal shown
            shown = True
            await partial(piece)

        ended = False  # the answer ended as an answer: its connection may carry the next request
        try:
            if not response.headers.get("content-type", "").startswith("text/event-stream"):
                content = await response.aread()
                ended = True
                self._traits.refused(stream_trait(request), request, "it answered a streamed request in one piece")
                return self._whole(content, attempts, request)
            try:
                chunks = response.aiter_bytes()
                # Closed here, not left to the garbage collector: asyncio would finalize it in a task of
                # its own, woken through the loop's self-pipe (two system calls and a loop turn a reply).
                async with contextlib.aclosing(paced_lines(chunks)) as lines:
                    assembly = await read_stream(lines, sink)
                # `data: [DONE]` comes just before the body's end: read on to it, or the pool closes
                # the connection (a new handshake every turn; TLS's with a remote server).
                ended = await _read_to_end(chunks)
            except StreamFailed as exc:
                if not shown and not _TOO_LONG.search(exc.reported):
                    # llama-cpp-python's answer to `stream: true` with tools and tool_choice "auto":
                    # 200 text/event-stream and a body that ends with no event.
                    return _Unstreamed(str(exc), request)  # our words: counts and kinds only
                self._raise_stream_failed(exc, request)
            except (httpx.HTTPError, TimeoutError) as exc:
                if isinstance(exc, httpx.TimeoutException | TimeoutError):
                    # Not sent again, shown or not: headers then silence until the read timeout spent the
                    # deadline, and a model slow to begin (a long prompt on a CPU) looks just the same, so
                    # a second request would likely keep the person waiting as long again for nothing, and
                    # streaming is not held against the server.
                    raise ProviderUnavailable(
                        f"{self._where} stopped sending its answer for {self._timeout:g} s ({type(exc).__name__})"
                    ) from exc
                if not shown:
                    return _Unstreamed(
                        f"it broke off a streamed request before its answer began ({type(exc).__name__})", request
                    )
                # Not retried: the answer is on screen already, and a second one would double it.
                raise ProviderUnavailable(
                    f"{self._where} broke off its answer ({type(exc).__name__}: {_one_line(str(exc)) or 'no detail'})"
                ) from exc
        finally:
            if not ended:
                await _drop_connection(response)
            await response.aclose()
        log.debug("streamed completion (%s): %d chunks", request.purpose, assembly.chunks)
        return _logged(request, assembly.finish_reason, assembly.completion())

    def _raise_stream_failed(self, exc: StreamFailed, request: CompletionRequest) -> NoReturn:
        """A stream that failed, as a ProviderError. The error a server reports in its stream (with a
        200: llama.cpp builds of early 2025 report a request over the context that way) is classified
        as its status would be; its text stays out of the message."""
        if _TOO_LONG.search(exc.reported):
            raise ProviderRequestTooLong(
                f"{self._where} refused the request as too long for the model, in its stream", status=400
            ) from exc
        raise ProviderBadResponse(f"{self._where} streamed something that is not an answer: {exc}") from exc

    def _whole(self, content: bytes, attempts: int, request: CompletionRequest) -> Completion:
        """A chat completion in one piece (also one that a server that does not stream answered a streamed request with)."""
        try:
            parsed = _parse_completion(content)
        except ValidationError as exc:
            self._raise_translated(exc, attempts=attempts, request=request)
        choice = parsed.choices[0]
        usage = parsed.usage or _Usage()
        tool_calls = tuple(
            ToolCall(
                id=call.id or f"call_{index}",
                name=call.function.name,
                arguments=arguments_text(call.function.arguments),
            )
            for index, call in enumerate(choice.message.tool_calls or ())
        )
        return _logged(
            request,
            choice.finish_reason,
            Completion(
                text=choice.message.content or "",
                tool_calls=tool_calls,
                prompt_tokens=usage.prompt_tokens,
                completion_tokens=usage.completion_tokens,
                truncated=choice.finish_reason == "length",
            ),
        )

    async def request_body(self, request: CompletionRequest, *, streamed: bool = False) -> bytes:
        """core.ports.BaseProvider: the exact body `complete(request)` would POST now (streamed, when
        given a sink and the server still streams requests of its shape), built by the same two steps
        (`_prepared`, `_body`); nothing is sent. A refusal the server answers with later (tool_choice,
        image input, streaming) makes `complete` send once more without them."""
        prepared = await self._prepared(request)
        return self._body(prepared, streamed=streamed and self._traits.allows(stream_trait(prepared), prepared))

    async def _prepared(self, request: CompletionRequest) -> CompletionRequest:
        # Images (a vision model's input) within the size limits; none once the server refused them.
        return await fitted(request) if self._traits.allows(Trait.IMAGES, request) else without_images(request)

    def _body(self, request: CompletionRequest, *, streamed: bool = False) -> bytes:
        """The request as JSON, compact and UTF-8: `{"model", "messages", "tools", ...rest}`, byte for
        byte what `json.dumps` would write of that object (`_JSON`); the messages are written by
        `_message_json`, the tools by `_tool_json`."""
        rest = _rest_of_payload(request, self._max_tokens)
        if streamed:
            rest["stream"] = True
            # OpenAI, Ollama and vLLM send usage (what the context budget learns from) only when asked.
            rest["stream_options"] = {"include_usage": True}
        messages = ",".join([_message_json(m) for m in request.messages])
        tools = f',"tools":[{",".join([self._tool_json(t) for t in request.tools])}]' if request.tools else ""
        # `rest` always holds max_tokens: its object is never empty, so it continues the one begun here.
        return f'{{"model":{_JSON.encode(self.model)},"messages":[{messages}]{tools},{_JSON.encode(rest)[1:]}'.encode()

    def _tool_json(self, tool: ToolSpec) -> str:
        """`_tool(tool)` as `_JSON` writes it, kept from one request to the next: the same tools go with
        every turn's request, and writing their schemas took half the time spent on a body. What was
        written is used again while the tool's description is the same and its parameters the same
        object, still equal to what they were when written."""
        written = self._tools_written.get(tool.name)
        if (
            written is not None
            and written.parameters is tool.parameters
            and written.description == tool.description
            and written.snapshot == tool.parameters
        ):
            return written.text
        text = _JSON.encode(_tool(tool))
        if len(self._tools_written) >= _TOOLS_WRITTEN_KEPT:
            self._tools_written.clear()
        self._tools_written[tool.name] = _WrittenTool(
            tool.description, tool.parameters, copy.deepcopy(tool.parameters), text
        )
        return text

    async def _post_images(
        self, body: bytes, request: CompletionRequest
    ) -> tuple[httpx.Response, int, CompletionRequest]:
        """`_post`; when the server refuses image input, once more without the images (each replaced
        by a constant line telling the model it could not be read), and never images again."""
        try:
            response, attempts = await self._post(body, request)
        except ProviderRejected as exc:
            if not (any(m.images for m in request.messages) and refuses_images(exc)):
                raise
            self._traits.refused(Trait.IMAGES, request, "it refused image input")
            request = without_images(request)
            response, attempts = await self._post(self._body(request), request)
        return response, attempts, request

    def _http(self) -> httpx.AsyncClient:
        if self._closed:
            raise RuntimeError("OpenAICompatibleProvider.complete() called after aclose()")
        if self._client is None:
            headers = {"Content-Type": "application/json", "Accept": "application/json"}
            if self._api_key:
                headers["Authorization"] = f"Bearer {self._api_key}"
            self._client = LeanClient(  # adapters/http_client.py: httpx's requests, less of the loop's CPU
                headers=headers,
                timeout=httpx.Timeout(self._timeout),
                transport=self._transport,
                verify=shared_ssl_context(),  # adapters/tls.py: one CA bundle loaded per process
            )
        return self._client

    async def _post(
        self, body: bytes, request: CompletionRequest, *, stream: bool = False
    ) -> tuple[httpx.Response, int]:
        """POST `body`, retrying what is worth retrying before one deadline for the whole call;
        return the 2xx response and the attempts used. With `stream`, the response's body is not
        read yet (the caller reads it, then closes the response); a failed one is read and closed."""
        client = self._http()
        self.last_request_bytes = len(body)
        tried = 0
        started = 0.0

        async def post(attempt: Attempt) -> httpx.Response:
            nonlocal tried, started
            tried, started = attempt.number, time.perf_counter()
            remaining = attempt.remaining if attempt.remaining is not None else self._timeout
            log.debug(
                "POST chat/completions (%s) attempt %d/%d: %d bytes",
                request.purpose,
                attempt.number,
                attempt.of,
                len(body),
            )
            # httpx's timeout is per read; asyncio's bounds the attempt as a whole (a stream's
            # attempt only until its status and headers: its events are each bounded by the read timeout).
            async with asyncio.timeout(remaining):
                if not stream:
                    response = await client.post(self._url, content=body, timeout=remaining)
                else:
                    sent = client.build_request("POST", self._url, content=body, timeout=self._timeout)
                    response = await client.send(sent, stream=True)
                    if not response.is_success:
                        try:
                            await response.aread()  # the error's body, for its classification
                        finally:
                            await response.aclose()
            log.debug(
                "model server answered %d on attempt %d/%d: %s in %.0f ms",
                response.status_code,
                attempt.number,
                attempt.of,
                f"{len(response.content)} bytes" if response.is_closed else "a stream",
                (time.perf_counter() - started) * 1000,
            )
            response.raise_for_status()  # a status that says "try again" is retried as a failure
            return response

        def retrying_after(exc: Exception, attempt: Attempt, delay: float) -> None:
            if isinstance(exc, httpx.HTTPStatusError):
                log.warning(
                    "model server answered %d on attempt %d/%d; retrying in %.2f s",
                    exc.response.status_code,
                    attempt.number,
                    attempt.of,
                    delay,
                )
                return
            log.warning(
                "model server attempt %d/%d failed after %.0f ms (%s); retrying in %.2f s",
                attempt.number,
                attempt.of,
                (time.perf_counter() - started) * 1000,
                type(exc).__name__,
                delay,
            )

        try:
            response = await retrying(self._policy, post, on_retry=retrying_after, sleep=self._sleep)
        except (httpx.HTTPError, TimeoutError) as exc:
            self._raise_translated(exc, attempts=tried, request=request)
        return response, tried

    def _raise_translated(self, exc: Exception, *, attempts: int, request: CompletionRequest) -> NoReturn:
        """The one place where httpx and pydantic failures become ProviderErrors."""
        where = self._where
        tries = f"after {attempts} attempt{'s' if attempts != 1 else ''}"
        if isinstance(exc, httpx.HTTPStatusError):
            response = exc.response
            code = response.status_code
            status = f"{code} {response.reason_phrase}".strip()
            detail = _server_message(response, request)
            said = f": {detail}" if detail else ""
            if code == 429:
                raise ProviderRateLimited(f"{where} kept answering {status} (rate limited) {tries}") from exc
            if code == 408:
                raise ProviderUnavailable(f"{where} answered {status} {tries}") from exc
            if code in (401, 403):
                raise ProviderRejected(f"{where} refused the API key with {status}{said}", status=code) from exc
            error_text = _error_text(response)
            if request.tools and code in _TOOLS_REFUSED_STATUSES and _TOOLS_REFUSED.search(error_text):
                # The core decides what follows (no tools from now on); the request itself was fine.
                raise ProviderToolsUnsupported(
                    f"{where} refused a request offering tools with {status}{said}", status=code
                ) from exc
            if code == 413 or (code in (400, 500) and _TOO_LONG.search(error_text)):
                raise ProviderRequestTooLong(
                    f"{where} refused the request as too long for the model with {status}{said}", status=code
                ) from exc
            if code == 500 and _INVALID.search(error_text):
                raise ProviderRejected(
                    f"{where} refused the request as invalid with {status}{said}", status=code
                ) from exc
            if code >= 500:
                raise ProviderServerError(f"{where} answered {status} {tries}{said}", status=code) from exc
            if code >= 400:
                raise ProviderRejected(f"{where} refused the request with {status}{said}", status=code) from exc
            raise ProviderBadResponse(f"{where} answered {status} instead of a chat completion") from exc
        if isinstance(exc, (httpx.TimeoutException, TimeoutError)):
            raise ProviderUnavailable(
                f"{where} did not answer within {self._timeout:g} s ({type(exc).__name__}) {tries}"
            ) from exc
        if isinstance(exc, httpx.TransportError):
            raise ProviderUnavailable(
                f"could not reach {where} ({type(exc).__name__}: {_one_line(str(exc)) or 'no detail'}) {tries}"
            ) from exc
        if isinstance(exc, ValidationError):
            first = exc.errors(include_url=False, include_input=False)[0]
            field = ".".join(str(part) for part in first["loc"]) or "body"
            detail = f"{first['msg']}" if first["type"] == "json_invalid" else f"{field}: {first['msg']}"
            raise ProviderBadResponse(
                f"{where} answered with something that is not a chat completion: {_one_line(detail)}"
            ) from exc
        detail = f"{type(exc).__name__}: {_one_line(str(exc))}"
        raise ProviderBadResponse(f"{where} answered with something that is not a chat completion: {detail}") from exc


# --- helpers --------------------------------------------------------------------


# Tools whose JSON is kept (`_tool_json`); more (served tools coming and going) start the count again.
_TOOLS_WRITTEN_KEPT = 256


@dataclasses.dataclass(frozen=True, slots=True)
class _WrittenTool:
    """A tool's JSON as written, with what it was written from: its description, its parameters (the
    object) and their value then (a deep copy)."""

    description: str
    parameters: dict[str, Any]
    snapshot: dict[str, Any]
    text: str


@dataclasses.dataclass(frozen=True, slots=True)
class _Unstreamed:
    """A streamed request that failed before anything of its answer was shown: why, in our words,
    and the request to send unstreamed (its images left out, if the server refused them meanwhile)."""

    why: str
    request: CompletionRequest


# json.dumps(value, separators=(",", ":"), ensure_ascii=False), its encoder built once; and the
# function that encoder writes a string with (C's, as json.dumps's own).
_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
_JSON_STRING = json.encoder.encode_basestring


def _rest_of_payload(request: CompletionRequest, default_max_tokens: int) -> dict[str, Any]:
    """What a request's JSON object holds after its model, messages and tools (`_body`)."""
    payload: dict[str, Any] = {}
    if request.tools:
        # Without it llama.cpp's server (and others) leave the tools out of the prompt.
        payload["tool_choice"] = "auto"
        if request.force_tool is not None:
            payload["tool_choice"] = {"type": "function", "function": {"name": request.force_tool}}
    if request.temperature is not None:
        payload["temperature"] = request.temperature
    # Always sent: without a cap a small model can run to the end of its context.
    payload["max_tokens"] = request.max_tokens if request.max_tokens is not None else default_max_tokens
    return payload


def _message_json(message: ChatMessage) -> str:
    """`_message(message)` as `_JSON` writes it. Most messages hold a role and a text alone: those are
    written here directly, the generic encoder being slow on many small objects (81 in a turn's
    request of 80 messages of context took most of the time spent on the request's body)."""
    role, content = message.role, message.content or ""
    if message.images or message.tool_calls or role == "tool" or type(role) is not str or type(content) is not str:
        return _JSON.encode(_message(message))
    return f'{{"role":{_JSON_STRING(role)},"content":{_JSON_STRING(content)}}}'


def _message(message: ChatMessage) -> dict[str, Any]:
    # Content is always a string: llama.cpp's server answers 500 to a null content
    # (an assistant message that only carries tool calls).
    out: dict[str, Any] = {"role": message.role, "content": message.content or ""}
    if message.images:
        # Content parts only with images: servers that read text alone may refuse the list form.
        out["content"] = [
            {"type": "text", "text": message.content or ""},
            *({"type": "image_url", "image_url": {"url": data_url(image)}} for image in message.images),
        ]
    if message.tool_calls and message.role == "assistant":
        out["tool_calls"] = [
            {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
            for call in message.tool_calls
        ]
    if message.role == "tool":
        out["tool_call_id"] = message.tool_call_id
    return out


def _tool(tool: ToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
    }


def _parse_completion(content: bytes) -> _ChatCompletion:
    """Parse a response body; a lone UTF-16 surrogate escape becomes U+FFFD instead of a failure.

    Valid JSON may carry `\\ud83d` without its pair (a model cut mid-emoji); pydantic's
    parser refuses it, Python's accepts it, so the slow path runs only then.
    """
    try:
        return _ChatCompletion.model_validate_json(content)
    except ValidationError as exc:
        if exc.errors(include_url=False, include_input=False)[0]["type"] != "json_invalid":
            raise
        try:
            data = json.loads(content)
        except ValueError:
            raise exc from None
        return _ChatCompletion.model_validate(_without_lone_surrogates(data))


def _without_lone_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_without_lone_surrogates(item) for item in value]
    if isinstance(value, dict):
        return {_without_lone_surrogates(k): _without_lone_surrogates(v) for k, v in value.items()}
    return value


def _finish_reason_shown(reason: str | None) -> str:
    """`reason` as a log may show it: one of the documented values, "none" or "other"."""
    if reason is None:
        return "none"
    return reason if reason in _FINISH_REASONS else "other"


def _logged(request: CompletionRequest, finish_reason: str | None, completion: Completion) -> Completion:
    # Counts and our own words only: the completion id, tool-call ids and model name are the
    # server's strings (of a private turn too: the provider does not know the mode).
    log.debug(
        "completion (%s): finish_reason=%s, %d tool calls, prompt_tokens=%s completion_tokens=%s",
        request.purpose,
        _finish_reason_shown(finish_reason),
        len(completion.tool_calls),
        completion.prompt_tokens,
        completion.completion_tokens,
    )
    if completion.truncated:
        log.info("a completion (%s) was cut off at its token limit", request.purpose)
    return completion


# What a stream may still carry after its answer ended, read so that its connection is kept.
_AFTER_ANSWER_BYTES = 64 * 1024
_AFTER_ANSWER_SECONDS = 1.0


async def _read_to_end(chunks: AsyncIterator[bytes]) -> bool:
    """Read what is left of a stream whose answer ended (the chunked body's last chunk, as a rule
    already received); False if the server sends more than a little, or goes on past a second,
    and the caller drops the connection instead."""
    left = _AFTER_ANSWER_BYTES
    try:
        async with asyncio.timeout(_AFTER_ANSWER_SECONDS):
            async for chunk in chunks:
                left -= len(chunk)
                if left < 0:
                    return False
    except (httpx.HTTPError, TimeoutError):
        return False
    return True


async def _drop_connection(response: httpx.Response) -> None:
    """Close the connection that carried a stream which did not end as an answer, so that the pool
    never hands it out again. A server whose streamed handler failed may close it itself just after
    the body's last byte (uvicorn does, under llama-cpp-python), and the pool, not having seen that
    close yet, would give the very next request (the same request unstreamed) a dead connection:
    httpx's RemoteProtocolError, a retry's back-off, and where no retry is left (`companion doctor`'s
    probes) a failure the server never caused. A closed socket reads as expired to httpcore's pool."""
    stream = response.extensions.get("network_stream")
    if stream is not None:
        with contextlib.suppress(Exception):
            await stream.aclose()


def _worth_retrying(exc: Exception) -> bool:
    if isinstance(exc, httpx.HTTPStatusError):
        return exc.response.status_code in _RETRYABLE_STATUSES
    return isinstance(exc, _RETRYABLE_ERRORS)


def _server_retry_after(exc: Exception) -> float | None:
    if isinstance(exc, httpx.HTTPStatusError):
        return _parse_retry_after(exc.response.headers.get("Retry-After"))
    return None


def _parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP-date), or None."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # an HTTP-date is GMT by definition
        return None
    return max(0.0, when.timestamp() - time.time())


def _one_line(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _server_message(response: httpx.Response, request: CompletionRequest) -> str:
    """The server's own error message, one line and short, or "" when absent or quoting the request."""
    try:
        data = response.json()
    except ValueError:
        return ""
    message: Any = None
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict):
            message = error.get("message")
        elif isinstance(error, str):  # Ollama: {"error": "model 'x' not found"}
            message = error
        if message is None:  # vLLM: {"object": "error", "message": ...}
            message = data.get("message")
    if not isinstance(message, str):
        return ""
    said = _one_line(message)[:_SERVER_MESSAGE_LIMIT]
    if _quotes_request(said, request):
        return "(server message withheld: it quotes the request)"
    return said


def _error_text(response: httpx.Response) -> str:
    """The error body's message, type and code as one string, for classification only."""
    try:
        data = response.json()
    except ValueError:
        return response.text[:1000]
    if not isinstance(data, dict):
        return ""
    error = data.get("error")
    parts: list[Any] = [data.get("message"), data.get("type"), data.get("code")]
    if isinstance(error, dict):
        parts += [error.get("message"), error.get("type"), error.get("code")]
    else:
        parts.append(error)
    return " ".join(str(part) for part in parts if part is not None)


def _quotes_request(message: str, request: CompletionRequest) -> bool:
    texts = [m.content for m in request.messages if m.content]
    texts += [call.arguments for m in request.messages for call in m.tool_calls]
    haystack = _one_line("\n".join(texts))
    if len(message) < _QUOTE_WINDOW:
        return bool(message) and message in haystack
    return any(message[i : i + _QUOTE_WINDOW] in haystack for i in range(len(message) - _QUOTE_WINDOW + 1))


def server_url(base_url: str, example: str) -> httpx.URL:
    """An OpenAI-compatible server's base URL, without its trailing slash. Raises ValueError
    (naming `example`) unless it is an http(s) URL with a host."""
    url = httpx.URL(base_url.rstrip("/"))
    if url.scheme not in ("http", "https") or not url.host:
        raise ValueError(f"base_url must be an http(s) URL such as {example}, not {base_url!r}")
    return url


def shown(url: httpx.URL) -> str:
    """`url` as errors may name it: without credentials or query (an API key may sit there)."""
    return str(url.copy_with(username=None, password=None, query=None))
