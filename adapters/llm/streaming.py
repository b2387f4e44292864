"""Streamed chat completions: server-sent events read from an httpx response, deltas assembled.

The shapes read are those of OpenAI, llama.cpp's server, Ollama and vLLM, recorded with their
sources in tests/helpers/stream_shapes.py: `data:` lines of `chat.completion.chunk` objects, each
choice carrying a `delta` (text in `content`; tool calls in `tool_calls`, by `index`, the first
fragment with the id and name, later ones with more of the arguments; Ollama sends a whole call
at once, and some Ollama versions number every call of a batch 0), a `finish_reason` in the last
chunk of the choice, `usage` in that chunk (llama.cpp) or in a last chunk with no choices (OpenAI,
Ollama and vLLM, asked with `stream_options.include_usage`), and `data: [DONE]`. A `data:` object
with an `error` is the server failing mid-stream (llama.cpp, vLLM).

Nothing here logs or raises with the text of a delta: `StreamFailed` carries counts and kinds.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from core.ports import PartialSink
from core.values.model import Completion, Partial, ToolCall

log = logging.getLogger(__name__)

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
DONE = "[DONE]"


class StreamFailed(Exception):
    """The stream was not a chat completion stream, or the server reported an error in it;
    the message says which, in our words (never the server's text)."""


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
        self.text = ""
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
                self.text += _LONE_SURROGATE.sub("\ufffd", delta.content)
                grew = True
            if delta is not None and delta.tool_calls:
                began = not self._calls
                for position, call in enumerate(delta.tool_calls):
                    self._add_call(call, position)
            if choice.finish_reason is not None:
                self.finish_reason = choice.finish_reason
        return grew, began and bool(self._calls)

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
                name=call.name,
                arguments=_LONE_SURROGATE.sub("\ufffd", "".join(call.arguments)),
            )
            for index, call in enumerate(self._calls)
            if call.name
        )
        usage = self.usage or _Usage()
        return Completion(
            text=self.text,
            tool_calls=tool_calls,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            truncated=self.finish_reason == "length",
        )


async def read_stream(lines: AsyncIterator[str], partial: PartialSink) -> StreamAssembly:
    """Read server-sent events until `data: [DONE]` (or the end of the body after a finish reason),
    handing `partial` the answer so far after each chunk that added to it.

    Raises:
        StreamFailed: an event was not a chat completion chunk, the server sent an error, or the
            body ended before the answer did.
    """
    assembly = StreamAssembly()
    data: list[str] = []
    async for line in lines:
        if line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
            continue
        if line.strip() or not data:
            continue  # `event:`, `id:`, `retry:` and `:` comments say nothing we use
        event, data = "\n".join(data), []
        if event.strip() == DONE:
            return assembly
        await _take(assembly, event, partial)
    if data and "\n".join(data).strip() != DONE:
        await _take(assembly, "\n".join(data), partial)  # a last event without its blank line
    if assembly.finish_reason is None:
        raise StreamFailed(f"the stream ended after {assembly.chunks} chunks, before the answer did")
    return assembly


async def _take(assembly: StreamAssembly, event: str, partial: PartialSink) -> None:
    try:
        chunk = _Chunk.model_validate_json(event)
    except ValidationError:
        chunk = _parse_leniently(event)
    if chunk.error is not None:
        raise StreamFailed(f"the server reported an error after {assembly.chunks} chunks")
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


def arguments_text(arguments: str | dict[str, Any]) -> str:
    """A tool call's arguments as JSON text; some servers (older Ollama) send an object."""
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, separators=(",", ":"), ensure_ascii=False)
