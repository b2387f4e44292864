"""Streamed chat completions: server-sent events read from an httpx response, deltas assembled.

The shapes read are those of OpenAI, llama.cpp's server, Ollama and vLLM, recorded with their
sources in tests/helpers/stream_shapes.py: `data:` lines of `chat.completion.chunk` objects, each
choice carrying a `delta` (text in `content`; tool calls in `tool_calls`, by `index`, the first
fragment with the id and name, later ones with more of the arguments; Ollama sends a whole call
at once, and some Ollama versions number every call of a batch 0), a `finish_reason` in the last
chunk of the choice, `usage` in that chunk (llama.cpp builds of 2025, beside its `timings`) or in a
last chunk with no choices (OpenAI, Ollama, vLLM and later llama.cpp, asked with
`stream_options.include_usage`), `:` comments as keep-alives, and `data: [DONE]`. A `data:` object
with an `error` is the server failing mid-stream (OpenAI, llama.cpp, vLLM; vLLM sends `data: [DONE]`
after it), and so is an `error:` field (llama.cpp builds of early 2025, also followed by `data:
[DONE]`). An answer is only complete with its finish reason: a stream that ends (with or without
`data: [DONE]`) before one came is a failure, never a shorter answer (Ollama ends its stream that way
when the model fails mid-answer).

Nothing here logs or raises with the text of a delta: `StreamFailed` carries counts and kinds.
"""

from __future__ import annotations

import asyncio
import codecs
import json
import logging
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from core.ports.model import PartialSink
from core.values.model import Completion, Partial, ToolCall

log = logging.getLogger(__name__)

_SURROGATE = re.compile("[\ud800-\udfff]")
DONE = "[DONE]"


class StreamFailed(Exception):
    """The stream was not a chat completion stream, or the server reported an error in it; the
    message says which, in our words (never the server's text). `reported`: the error the server
    sent, as one string of its message, type and code, for classification only (never shown)."""

    def __init__(self, message: str, *, reported: str = "") -> None:
        super().__init__(message)
        self.reported = reported


# --- the chunk shape (hide_input_in_errors: a validation error never quotes a delta) -----------------


class _Wire(BaseModel):
    model_config = ConfigDict(hide_input_in_errors=True)


class _FunctionDelta(_Wire):
    name: str | None = None
    arguments: str | dict[str, Any] | None = None


class _ToolCallDelta(_Wire):
    index: int | None = None
    id: str | None = None
    function: _FunctionDelta | None = None


class _Delta(_Wire):
    content: str | None = None
    tool_calls: list[_ToolCallDelta] | None = None


class _ChunkChoice(_Wire):
    index: int = 0
    delta: _Delta | None = None
    finish_reason: str | None = None


class _Usage(_Wire):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class _Chunk(_Wire):
    # vLLM may send the usage-only chunk with `"choices": null`; OpenAI's and Ollama's is `[]`.
    choices: list[_ChunkChoice] | None = None
    usage: _Usage | None = None
    error: Any = None


# --- assembly ------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Call:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class StreamAssembly:
    """The answer of one streamed completion, put together from its chunks (choice 0 only: the
    companion never asks for more than one)."""

    def __init__(self) -> None:
        self.text = ""  # the answer so far, always valid Unicode (see `_add_text`)
        self._held = ""  # a high surrogate ending the last delta: its pair may open the next one
        self.finish_reason: str | None = None
        self.usage: _Usage | None = None
        self.chunks = 0
        self._calls: list[_Call] = []
        self._slots: dict[int, int] = {}  # a delta's index -> its call in `_calls`

    @property
    def calling(self) -> bool:
        return bool(self._calls)

    def add(self, chunk: _Chunk) -> tuple[bool, bool]:
        """Take one chunk. Returns (the text grew, the first tool call began)."""
        self.chunks += 1
        if chunk.usage is not None:
            self.usage = chunk.usage
        grew = began = False
        for choice in chunk.choices or ():
            if choice.index != 0:
                continue
            delta = choice.delta
            if delta is not None and delta.content:
                before = len(self.text)
                self._add_text(delta.content)
                grew = grew or len(self.text) > before
            if delta is not None and delta.tool_calls:
                began = not self._calls
                for position, call in enumerate(delta.tool_calls):
                    self._add_call(call, position)
            if choice.finish_reason is not None:
                self.finish_reason = choice.finish_reason
        return grew, began and bool(self._calls)

    def _add_text(self, content: str) -> None:
        # JSON may carry a surrogate pair as two escapes, and a server may split the pair over two
        # deltas; a lone one (a model cut mid-emoji) cannot be encoded at all. So a pair is joined up
        # again, a lone surrogate becomes U+FFFD, and a high one ending a delta waits for the next.
        text, self._held = self._held + content, ""
        if "\ud800" <= text[-1] <= "\udbff":
            text, self._held = text[:-1], text[-1]
        self.text += valid_unicode(text)

    def _add_call(self, delta: _ToolCallDelta, position: int) -> None:
        index = delta.index if delta.index is not None else position
        function = delta.function or _FunctionDelta()
        slot = self._slots.get(index)
        current = self._calls[slot] if slot is not None else None
        # A whole new call at an index seen already (some Ollama versions number every call of a
        # batch 0): a fresh id with a name is the next call, not more of this one.
        if current is not None and delta.id and current.id and delta.id != current.id and function.name:
            current = None
        if current is None:
            current = _Call()
            self._slots[index] = len(self._calls)
            self._calls.append(current)
        if delta.id and not current.id:
            current.id = delta.id
        if function.name and not current.name:
            current.name = function.name
        if function.arguments is not None:
            current.arguments.append(arguments_text(function.arguments))

    def completion(self) -> Completion:
        tool_calls = tuple(
            ToolCall(
                id=call.id or f"call_{index}",
                name=valid_unicode(call.name),
                arguments=valid_unicode("".join(call.arguments)),
            )
            for index, call in enumerate(self._calls)
            if call.name
        )
        usage = self.usage or _Usage()
        return Completion(
            text=self.text + valid_unicode(self._held),
            tool_calls=tool_calls,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            truncated=self.finish_reason == "length",
        )


# The answer is read at most this often: a reply is shown at most once a second, and a wake-up and
# socket read for every token (20-60 a second) cost more of the process's CPU than the rest of
# the reply. Between reads the server's events wait in the socket's buffer and arrive together.
READ_GAP = 0.3
# What ends a line of an event stream: \r\n, \r or \n, and nothing else (str.splitlines also ends one at
# U+2028, U+2029, U+0085 ..., which a JSON string may hold unescaped: llama.cpp's server writes them so).
_LINE_END = re.compile(r"\r\n|\r|\n")
# A read that returned sooner than this found its bytes already received (no wait for the server).
BUFFERED = 0.002


async def paced_lines(
    chunks: AsyncIterator[bytes],
    *,
    gap: float = READ_GAP,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    monotonic: Callable[[], float] = time.monotonic,
) -> AsyncGenerator[str, None]:
    """The lines of a server-sent event stream (UTF-8; `\\n`, `\\r\\n` or `\\r` ends a line). After a
    read that had to wait for the server, the next one waits `gap` seconds, so that the events
    sent meanwhile are read together; what was already there is read at once."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pending = ""
    asked = monotonic()
    async for chunk in chunks:
        waited = monotonic() - asked > BUFFERED
        text = pending + decoder.decode(chunk)
        # The last piece is a line without its end yet ("" after one); a lone \r ending the text may be
        # the first half of a \r\n, so it waits with that piece for the next read.
        held = "\r" if text.endswith("\r") else ""
        *lines, pending = _LINE_END.split(text[: len(text) - len(held)])
        pending += held
        for line in lines:
            yield line
        if waited:
            await sleep(gap)
        asked = monotonic()
    pending += decoder.decode(b"", final=True)
    if pending:  # the body ended inside a line: that line, without a lone \r
        yield pending.removesuffix("\r")


async def read_stream(lines: AsyncIterator[str], partial: PartialSink) -> StreamAssembly:
    """Read server-sent events until `data: [DONE]` (or the end of the body), handing `partial` the
    answer so far after each chunk that added to it.

    Raises:
        StreamFailed: an event was not a chat completion chunk, the server sent an error, or the
            stream ended (with or without `data: [DONE]`) before the answer's finish reason.
    """
    assembly = StreamAssembly()
    data: list[str] = []
    error: list[str] = []
    async for line in lines:
        if line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
            continue
        if line.startswith("error:"):  # llama.cpp's `error: {...}` field (builds of early 2025)
            error.append(line[6:].removeprefix(" "))
            continue
        if line.strip() or not (data or error):
            continue  # `event:`, `id:`, `retry:` and `:` comments (keep-alives) say nothing we use
        if error:
            raise StreamFailed(
                f"the server reported an error after {assembly.chunks} chunks", reported=_reported("\n".join(error))
            )
        event, data = "\n".join(data), []
        if event.strip() == DONE:
            return _finished(assembly)
        await _take(assembly, event, partial)
    if error:
        raise StreamFailed(
            f"the server reported an error after {assembly.chunks} chunks", reported=_reported("\n".join(error))
        )
    if data and "\n".join(data).strip() != DONE:
        await _take(assembly, "\n".join(data), partial)  # a last event without its blank line
    return _finished(assembly)


def _finished(assembly: StreamAssembly) -> StreamAssembly:
    if assembly.finish_reason is None:
        raise StreamFailed(f"the stream ended after {assembly.chunks} chunks, before the answer did")
    return assembly


async def _take(assembly: StreamAssembly, event: str, partial: PartialSink) -> None:
    try:
        chunk = _Chunk.model_validate_json(event)
    except ValidationError:
        chunk = _parse_leniently(event)
    if chunk.error is not None:
        raise StreamFailed(
            f"the server reported an error after {assembly.chunks} chunks", reported=_error_text(chunk.error)
        )
    grew, began = assembly.add(chunk)
    if began:
        await partial(Partial(assembly.text, calling=True))
    elif grew and not assembly.calling:
        await partial(Partial(assembly.text))


def _parse_leniently(event: str) -> _Chunk:
    """Valid JSON may carry a lone surrogate escape (a model cut mid-emoji), which pydantic's parser
    refuses and Python's accepts; anything else is no chunk."""
    try:
        value = json.loads(event)
        return _Chunk.model_validate(value)
    except (ValueError, ValidationError):
        raise StreamFailed("the server sent an event that is not a chat completion chunk") from None


def _reported(payload: str) -> str:
    try:
        value: Any = json.loads(payload)
    except ValueError:
        return payload[:1000]
    return _error_text(value.get("error", value) if isinstance(value, dict) else value)


def _error_text(error: Any) -> str:
    """An error object's message, type and code as one string (classification only): the shapes of
    OpenAI and vLLM (`{"message", "type", "param", "code"}`), llama.cpp (`{"code", "message", "type"}`)
    and a bare string."""
    if isinstance(error, dict):
        return " ".join(str(error[key]) for key in ("message", "type", "code") if error.get(key) is not None)
    return str(error)[:1000]


def valid_unicode(text: str) -> str:
    """`text` with its surrogate pairs joined into their characters and each lone surrogate as U+FFFD."""
    if not _SURROGATE.search(text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def arguments_text(arguments: str | dict[str, Any]) -> str:
    """A tool call's arguments as JSON text; some servers (older Ollama) send an object."""
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, separators=(",", ":"), ensure_ascii=False)
