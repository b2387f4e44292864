"""Recorded streamed shapes of OpenAI, llama.cpp's server, Ollama and vLLM (issue 24, point 1).

What a server sends to `"stream": true` on /v1/chat/completions: server-sent events, each a
`chat.completion.chunk` after `data: `, then `data: [DONE]`. Each stream here is the shape the server
documents or was recorded sending, with its source beside it: field names, nesting, nulls, absent
keys, the order of the chunks, where the usage and the finish reason go, how an error arrives and
how the stream ends are the server's. What is ours: the words of a text delta and where a text is
cut into deltas, the tool's name and arguments (`recall`, a tool the Companion offers, where the
source called its own tool), and token counts where the source had none. The non-streamed shapes
are in tests/helpers/server_shapes.py; the streaming code that reads these is
adapters/llm/streaming.py.

An event is a str (the JSON after `data: `; a blank line follows it on the wire) or bytes sent as
they are (a `:` comment, an `error:` field). `StreamShape.script` queues one on a FakeOpenAIServer.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from tests.helpers.fake_openai import FakeOpenAIServer, ScriptedResponse


def _json(value: dict[str, Any]) -> str:
    # Every server here writes compact JSON (encoding/json, nlohmann's dump(-1), pydantic, OpenAI).
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@dataclasses.dataclass(frozen=True)
class StreamShape:
    """One recorded stream and the completion it is: `text`, `calls` as (id, name, arguments),
    `finish` (None: the stream fails, the answer never finished), `usage` as (prompt, completion)."""

    name: str
    events: tuple[str | bytes, ...]
    text: str = ""
    calls: tuple[tuple[str, str, str], ...] = ()
    finish: str | None = "stop"
    usage: tuple[int, int] | None = None
    done: bool = True  # `data: [DONE]` ends the stream

    def script(self, server: FakeOpenAIServer, *, pause: float = 0.0, cut_after: int | None = None) -> None:
        server.reply_stream(self.events, pause=pause, done=self.done, cut_after=cut_after)

    @property
    def deltas(self) -> list[str]:
        """The text deltas in order (for the partial texts a sink must see grow)."""
        out = []
        for event in self.events:
            if isinstance(event, bytes):
                continue
            chunk = json.loads(event)
            for choice in chunk.get("choices") or ():
                content = (choice.get("delta") or {}).get("content")
                if content:
                    out.append(content)
        return out


def _shape(name: str, chunks: list[dict[str, Any] | str | bytes], **kwargs: Any) -> StreamShape:
    events = tuple(_json(c) if isinstance(c, dict) else c for c in chunks)
    return StreamShape(name, events, **kwargs)


# --- OpenAI (api.openai.com/v1/chat/completions) --------------------------------------------------------
# Recorded from gpt-4.1-2025-04-14 in coder/aibridge's fixtures (fixtures/openai/error.txtar at
# c5af6523, fixtures/openai/chatcompletions/single_builtin_tool.txtar at 732f3d23): every chunk has
# `service_tier`, `system_fingerprint`, `logprobs: null`, `finish_reason: null` and, with
# `stream_options.include_usage`, `usage: null`; the first delta carries the role (and `refusal`), the
# finish reason comes in a chunk of its own with an empty delta, and the usage in a last chunk whose
# `choices` is `[]` (as the API reference documents `include_usage`:
# https://platform.openai.com/docs/api-reference/chat/create#chat-create-stream_options).

_OPENAI_HEAD = {
    "id": "chatcmpl-BwoiPTGRbKkY5rncfaM0s9KtWrq5N",
    "object": "chat.completion.chunk",
    "created": 1753357673,
    "model": "gpt-4.1-2025-04-14",
    "service_tier": "default",
    "system_fingerprint": "fp_51e1070cf2",
}
_OPENAI_USAGE = {
    "prompt_tokens": 60,
    "completion_tokens": 15,
    "total_tokens": 75,
    "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
    "completion_tokens_details": {
        "reasoning_tokens": 0,
        "audio_tokens": 0,
        "accepted_prediction_tokens": 0,
        "rejected_prediction_tokens": 0,
    },
}


def _openai(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    return {**_OPENAI_HEAD, "choices": [choice], "usage": None}


_OPENAI_USAGE_CHUNK = {**_OPENAI_HEAD, "choices": [], "usage": _OPENAI_USAGE}
_OPENAI_WORDS = ["Lentil", " soup", " is", " a", " good", " idea", " tonight", "."]

OPENAI_TEXT = _shape(
    "openai-text",
    [
        _openai({"role": "assistant", "content": "", "refusal": None}),
        *(_openai({"content": word}) for word in _OPENAI_WORDS),
        _openai({}, "stop"),
        _OPENAI_USAGE_CHUNK,
    ],
    text="".join(_OPENAI_WORDS),
    usage=(60, 15),
)

OPENAI_LENGTH = _shape(
    "openai-length",
    [
        _openai({"role": "assistant", "content": "", "refusal": None}),
        *(_openai({"content": word}) for word in _OPENAI_WORDS[:4]),
        _openai({}, "length"),  # max_tokens reached (the API reference's finish reasons)
        _OPENAI_USAGE_CHUNK,
    ],
    text="".join(_OPENAI_WORDS[:4]),
    finish="length",
    usage=(60, 15),
)

# single_builtin_tool.txtar: the first delta holds the id, type and name with `arguments: ""` beside
# `content: null`; every later fragment holds only the index and more of the arguments.
_RECALL_PIECES = ['{"', "query", '":"', "soup", " recipe", '"}']

OPENAI_TOOL_CALL = _shape(
    "openai-tool-call",
    [
        _openai(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_HjeqP7YeRkoNj0de9e3U4X4B",
                        "type": "function",
                        "function": {"name": "recall", "arguments": ""},
                    }
                ],
                "refusal": None,
            }
        ),
        *(_openai({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}) for piece in _RECALL_PIECES),
        _openai({}, "tool_calls"),
        _OPENAI_USAGE_CHUNK,
    ],
    calls=(("call_HjeqP7YeRkoNj0de9e3U4X4B", "recall", '{"query":"soup recipe"}'),),
    finish="tool_calls",
    usage=(60, 15),
)

# Two calls in one answer: a first delta with the role alone, then the fragments of the recording
# above, the second call at index 1 (the API reference: `index` numbers the calls of a choice; its
# opening fragment carries its own id and name).
OPENAI_TWO_CALLS = _shape(
    "openai-two-calls",
    [
        _openai({"role": "assistant", "content": None, "refusal": None}),
        _openai(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_HjeqP7YeRkoNj0de9e3U4X4B",
                        "type": "function",
                        "function": {"name": "recall", "arguments": ""},
                    }
                ]
            }
        ),
        *(_openai({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}) for piece in _RECALL_PIECES),
        _openai(
            {
                "tool_calls": [
                    {
                        "index": 1,
                        "id": "call_KjzAbhiZC6nk81tQzL7pwlpc",
                        "type": "function",
                        "function": {"name": "current_time", "arguments": ""},
                    }
                ]
            }
        ),
        _openai({"tool_calls": [{"index": 1, "function": {"arguments": "{}"}}]}),
        _openai({}, "tool_calls"),
        _OPENAI_USAGE_CHUNK,
    ],
    calls=(
        ("call_HjeqP7YeRkoNj0de9e3U4X4B", "recall", '{"query":"soup recipe"}'),
        ("call_KjzAbhiZC6nk81tQzL7pwlpc", "current_time", "{}"),
    ),
    finish="tool_calls",
    usage=(60, 15),
)

# The fragments as OpenAI's function-calling guide prints `delta.tool_calls` while streaming
# (https://platform.openai.com/docs/guides/function-calling#streaming): every field of a later
# fragment present and null (`id`, `name`, `type`), as some servers send them on the wire.
_GUIDE_PIECES = ['{"', "location", '":"', "Paris", ",", " France", '"}']

OPENAI_GUIDE_NULLS = _shape(
    "openai-guide-nulls",
    [
        _openai({"role": "assistant", "content": None, "refusal": None}),
        _openai(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_DdmO9pD3xa9XTPNJ32zg2hcA",
                        "function": {"arguments": "", "name": "get_weather"},
                        "type": "function",
                    }
                ]
            }
        ),
        *(
            _openai(
                {"tool_calls": [{"index": 0, "id": None, "function": {"arguments": piece, "name": None}, "type": None}]}
            )
            for piece in _GUIDE_PIECES
        ),
        _openai({}, "tool_calls"),
        _OPENAI_USAGE_CHUNK,
    ],
    calls=(("call_DdmO9pD3xa9XTPNJ32zg2hcA", "get_weather", '{"location":"Paris, France"}'),),
    finish="tool_calls",
    usage=(60, 15),
)

# error.txtar: three text deltas, then the error OpenAI sends mid-stream as a `data:` event (no
# `object`, no `choices`), and the body ends without `data: [DONE]`.
OPENAI_ERROR_MIDSTREAM = _shape(
    "openai-error-midstream",
    [
        _openai({"role": "assistant", "content": "", "refusal": None}),
        _openai({"content": "The"}),
        _openai({"content": " question"}),
        _openai({"content": ' "'}),
        '{"error": {"message": "The server had an error while processing your request. Sorry about that!", '
        '"type": "server_error"}}',
    ],
    finish=None,
    done=False,
)

# 400 to `"stream": true` from a model that cannot stream (o1 in 2024; recorded in
# ChatGPTNextWeb/NextChat#5410, animalnots/BetterChatGPT-PLUS#62): the same request without
# `stream` is answered.
OPENAI_STREAM_UNSUPPORTED: dict[str, Any] = {
    "error": {
        "message": "Unsupported value: 'stream' does not support true with this model. "
        "Only the default (false) value is supported.",
        "type": "invalid_request_error",
        "param": "stream",
        "code": "unsupported_value",
    }
}


def stream_unsupported() -> ScriptedResponse:
    return ScriptedResponse(status=400, body=OPENAI_STREAM_UNSUPPORTED)


# Keep-alive comments: OpenRouter (an OpenAI-compatible router) "occasionally sends comments to
# prevent connection timeouts", `: OPENROUTER PROCESSING` (https://openrouter.ai/docs/api-reference/streaming),
# here before the first chunk and between two; the chunks are OpenAI's above.
KEEPALIVE = b": OPENROUTER PROCESSING\n\n"
OPENROUTER_KEEPALIVE = _shape(
    "openrouter-keepalive",
    [
        KEEPALIVE,
        KEEPALIVE,
        _openai({"role": "assistant", "content": "", "refusal": None}),
        *(_openai({"content": word}) for word in _OPENAI_WORDS[:3]),
        KEEPALIVE,
        *(_openai({"content": word}) for word in _OPENAI_WORDS[3:]),
        _openai({}, "stop"),
        _OPENAI_USAGE_CHUNK,
    ],
    text="".join(_OPENAI_WORDS),
    usage=(60, 15),
)


# --- llama.cpp's server (llama-server, /v1/chat/completions) -------------------------------------------
# ggml-org/llama.cpp tools/server: server_task_result_cmpl_partial::to_json_oaicompat_chat (a first
# delta `{"role": "assistant", "content": null}`, then one chunk per diff of the parsed message) and
# server_task_result_cmpl_final::to_json_oaicompat_chat_stream (a chunk with an empty delta and the
# finish reason, no `logprobs` key, `finish_reason` before `index`); keys in the order nlohmann's
# ordered_json keeps. The head (id, model, build fingerprint, created) is a capture from llama-server
# b6097 serving gpt-oss:20b (g0t4/ask-openai.nvim, lua/ask-openai/rewrites/harmony/NOTES.md), whose
# last chunk carries `usage` and `timings` beside the finish reason: llama.cpp builds of 2025 put
# them there whatever `stream_options` says.

_LLAMA_HEAD = {
    "created": 1754524122,
    "id": "chatcmpl-yPk7z9nC22CofOlh100qQdHVEDMNYCb1",
    "model": "gpt-oss:20b",
    "system_fingerprint": "b6097-9515c613",
    "object": "chat.completion.chunk",
}
_LLAMA_USAGE = {"completion_tokens": 247, "prompt_tokens": 1085, "total_tokens": 1332}
_LLAMA_TIMINGS = {
    "prompt_n": 1085,
    "prompt_ms": 203.378,
    "prompt_per_token_ms": 0.18744516129032257,
    "prompt_per_second": 5334.893646313762,
    "predicted_n": 247,
    "predicted_ms": 933.63,
    "predicted_per_token_ms": 3.7798785425101213,
    "predicted_per_second": 264.5587652496171,
}


def _llama(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"choices": [{"finish_reason": finish, "index": 0, "delta": delta}], **_LLAMA_HEAD, **extra}


_LLAMA_WORDS = ["Hello", "!", " 👋", " How", " can", " I", " assist", " you", " today", "?"]

LLAMA_TEXT = _shape(
    "llama.cpp-text",
    [
        _llama({"role": "assistant", "content": None}),
        *(_llama({"content": word}) for word in _LLAMA_WORDS),
        _llama({}, "stop", usage=_LLAMA_USAGE, timings=_LLAMA_TIMINGS),
    ],
    text="".join(_LLAMA_WORDS),
    usage=(1085, 247),
)

# Later builds honour `stream_options.include_usage`: the finish chunk without usage, then (as in
# to_json_oaicompat_chat_stream's `if (include_usage)`) a chunk with `choices: []`, the usage, and the
# timings on that last chunk.
LLAMA_USAGE_CHUNK = _shape(
    "llama.cpp-usage-chunk",
    [
        _llama({"role": "assistant", "content": None}),
        *(_llama({"content": word}) for word in _LLAMA_WORDS),
        _llama({}, "stop"),
        {"choices": [], **_LLAMA_HEAD, "usage": _LLAMA_USAGE, "timings": _LLAMA_TIMINGS},
    ],
    text="".join(_LLAMA_WORDS),
    usage=(1085, 247),
)

# A tool call (started with --jinja): common_chat_msg_diff_to_json_oaicompat writes `index`, then `id`
# and `type` in the diff that names the call, and always `function.arguments` (more of them in each
# later diff); the finish reason is "tool_calls".
LLAMA_TOOL_CALL = _shape(
    "llama.cpp-tool-call",
    [
        _llama({"role": "assistant", "content": None}),
        _llama(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "wNNXOWiXBrPULt9QgkYpCF3tyOmTdDsk",
                        "type": "function",
                        "function": {"name": "recall", "arguments": ""},
                    }
                ]
            }
        ),
        *(_llama({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}) for piece in _RECALL_PIECES),
        _llama({}, "tool_calls", usage=_LLAMA_USAGE, timings=_LLAMA_TIMINGS),
    ],
    calls=(("wNNXOWiXBrPULt9QgkYpCF3tyOmTdDsk", "recall", '{"query":"soup recipe"}'),),
    finish="tool_calls",
    usage=(1085, 247),
)

# An error while streaming, current builds: handle_completions_impl writes
# `format_oai_sse(json {{"error", res_json}})` (res_json from format_error_response: code, message,
# type) and ends the stream there, without `data: [DONE]`. The message is the one
# common_chat_msg_diff::compute_diffs (common/chat.cpp) throws while streaming a tool call; later
# builds append the calls' names and arguments to it, so an error's text may quote the model.
LLAMA_ERROR_MIDSTREAM = _shape(
    "llama.cpp-error-midstream",
    [
        _llama({"role": "assistant", "content": None}),
        *(_llama({"content": word}) for word in _LLAMA_WORDS[:3]),
        {"error": {"code": 500, "message": "Invalid diff: now finding less tool calls!", "type": "server_error"}},
    ],
    finish=None,
    done=False,
)

# The same in builds of early 2025 (examples/server/server.cpp at 03d4bccb685f1fff604c56abe4cddf0348c26417,
# handle_completions_impl): `server_sent_event(sink, "error", error_data)` writes an `error:` field, not
# `data:`, and `data: [DONE]` follows it, with status 200.
LLAMA_ERROR_FIELD = _shape(
    "llama.cpp-error-field",
    [
        _llama({"role": "assistant", "content": None}),
        *(_llama({"content": word}) for word in _LLAMA_WORDS[:3]),
        b'error: {"code":500,"message":"Invalid diff: now finding less tool calls!","type":"server_error"}\n\n',
    ],
    finish=None,
)

# Such a build's answer to a streamed request over the context: the error of LLAMA_TOO_LONG
# (tests/adapters/test_model_link.py) in that `error:` field, before any chunk, then `data: [DONE]`.
LLAMA_TOO_LONG_FIELD = _shape(
    "llama.cpp-too-long-field",
    [
        b'error: {"code":400,"message":"the request exceeds the available context size, try increasing it",'
        b'"type":"exceed_context_size_error"}\n\n'
    ],
    finish=None,
)


# --- Ollama (its OpenAI-compatible endpoint, http://localhost:11434/v1/chat/completions) -------------------
# ollama/ollama openai/openai.go at 634c416645790c84dfc80849b05f84b3853b127f (ToChunk: every delta
# carries `role` and `content`, `tool_calls` only when there are some, `finish_reason` is null until
# the last chunk and "tool_calls" once a call was sent; `usage` is omitted) and middleware/openai.go at
# 5dbb81b72c4b61b737e4970db711f7718e4efcc6 (ChatWriter: with `include_usage`, the last chunk again
# with `choices: []` and the usage, then `data: [DONE]`). Recorded text chunks of
# qwen2.5-coder:7b-instruct-q8_0 (g0t4/ask-openai.nvim, lua/ask-openai/backends/oai_chat.notes.md):
# the head below, `{"role":"assistant","content":"."}`, and a last delta `"content": ""` with "stop".

_OLLAMA_HEAD = {
    "id": "chatcmpl-209",
    "object": "chat.completion.chunk",
    "created": 1743021818,
    "model": "qwen2.5-coder:7b-instruct-q8_0",
    "system_fingerprint": "fp_ollama",
}
_OLLAMA_USAGE = {"prompt_tokens": 31, "completion_tokens": 9, "total_tokens": 40}


def _ollama(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {**_OLLAMA_HEAD, "choices": [{"index": 0, "delta": {"role": "assistant", **delta}, "finish_reason": finish}]}


_OLLAMA_WORDS = ["Try", " a", " red", " lentil", " soup", " with", " cumin", "."]
_OLLAMA_USAGE_CHUNK = {**_OLLAMA_HEAD, "choices": [], "usage": _OLLAMA_USAGE}

OLLAMA_TEXT = _shape(
    "ollama-text",
    [
        *(_ollama({"content": word}) for word in _OLLAMA_WORDS),
        _ollama({"content": ""}, "stop"),
        _OLLAMA_USAGE_CHUNK,
    ],
    text="".join(_OLLAMA_WORDS),
    usage=(31, 9),
)

# Tool calls come whole, one chunk each, `arguments` as JSON text (json.Marshal of the parsed object),
# `content: ""` beside them: recorded from qwen2.5-coder on /v1 (g0t4/ask-openai.nvim,
# lua/ask-openai/backends/ollama/notes/sses.md, two calls at index 0 and 1 with their ids), then the
# finish reason in a chunk of its own.
OLLAMA_TOOL_CALLS = _shape(
    "ollama-tool-calls",
    [
        _ollama(
            {
                "content": "",
                "tool_calls": [
                    {
                        "id": "call_wteop8bt",
                        "index": 0,
                        "type": "function",
                        "function": {"name": "recall", "arguments": '{"query":"soup recipe"}'},
                    }
                ],
            }
        ),
        _ollama(
            {
                "content": "",
                "tool_calls": [
                    {
                        "id": "call_rk2xye1l",
                        "index": 1,
                        "type": "function",
                        "function": {"name": "recall", "arguments": '{"query":"lentils"}'},
                    }
                ],
            }
        ),
        _ollama({"content": ""}, "tool_calls"),
        _OLLAMA_USAGE_CHUNK,
    ],
    calls=(
        ("call_wteop8bt", "recall", '{"query":"soup recipe"}'),
        ("call_rk2xye1l", "recall", '{"query":"lentils"}'),
    ),
    finish="tool_calls",
    usage=(31, 9),
)

# The same from Ollama 0.20.2 to 0.20.4 (ollama/ollama#15457, "tool_calls index is always 0 for
# multiple tool calls"; vercel/ai#14277 tells them apart by their ids): both calls at index 0.
OLLAMA_TOOL_CALLS_INDEX_0 = dataclasses.replace(
    OLLAMA_TOOL_CALLS,
    name="ollama-tool-calls-index-0",
    events=tuple(
        event.replace('"index":1', '"index":0') for event in OLLAMA_TOOL_CALLS.events if isinstance(event, str)
    ),
)

# A model failing mid-answer: server/routes.go's streamResponse writes `{"error": "..."}` into the
# response once content went out (status 200 already sent), and the /v1 ChatWriter, seeing 200,
# converts it as one more api.ChatResponse: a chunk with an empty `content`, no finish reason and no
# model name (the error has none). The body then ends, without `data: [DONE]` (written only after a
# response that is `done`).
OLLAMA_ERROR_MIDSTREAM = _shape(
    "ollama-error-midstream",
    [
        *(_ollama({"content": word}) for word in _OLLAMA_WORDS[:4]),
        {**_ollama({"content": ""}), "model": ""},
    ],
    finish=None,
    done=False,
)


# --- vLLM (vllm serve, its OpenAI-compatible server) --------------------------------------------------------
# Recorded from vLLM 0.8.5.post1 serving meta-llama/llama-4-scout-17b-16e-instruct (vllm-project/vllm#19650):
# a first delta `{"role":"assistant","content":""}`, then `{"content": ...}`, each choice with
# `logprobs: null` and `finish_reason: null`. The last chunk and the usage chunk are those of
# chat_completion_stream_generator (vllm/entrypoints/openai/serving_chat.py; chat_completion/serving.py
# at 006c49d485f9ca479bf4989cbb694d0ac02f44b5): the finish reason with the legacy `stop_reason`, and
# with `include_usage` a chunk of `choices: []` and the usage, nulls dropped (`exclude_none`).

_VLLM_HEAD = {
    "id": "chatcmpl-0c0dd0fa4fae4544998222ce6edde854",
    "object": "chat.completion.chunk",
    "created": 1749904312,
    "model": "meta-llama/llama-4-scout-17b-16e-instruct",
}
_VLLM_USAGE_CHUNK = {
    **_VLLM_HEAD,
    "choices": [],
    "usage": {"prompt_tokens": 77, "total_tokens": 138, "completion_tokens": 61},
}


def _vllm(delta: dict[str, Any], finish: str | None = None, **choice: Any) -> dict[str, Any]:
    body = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish, **choice}
    return {**_VLLM_HEAD, "choices": [body]}


_VLLM_WORDS = ["The", " capital", " of", " Japan", " is", " Tokyo", "."]

VLLM_TEXT = _shape(
    "vllm-text",
    [
        _vllm({"role": "assistant", "content": ""}),
        *(_vllm({"content": word}) for word in _VLLM_WORDS),
        _vllm({"content": ""}, "stop", stop_reason=None),
        _VLLM_USAGE_CHUNK,
    ],
    text="".join(_VLLM_WORDS),
    usage=(77, 61),
)

# vLLM 0.9.0 (the same issue): each text delta also carries `"tool_calls": []`, and the choice has no
# `logprobs` and no `finish_reason` key until the last chunk. An empty list of tool calls is no call.
VLLM_090_TEXT = _shape(
    "vllm-0.9.0-text",
    [
        _vllm({"role": "assistant", "content": ""}),
        *(
            {**_VLLM_HEAD, "choices": [{"index": 0, "delta": {"content": word, "tool_calls": []}}]}
            for word in _VLLM_WORDS
        ),
        {
            **_VLLM_HEAD,
            "choices": [{"index": 0, "delta": {"content": "", "tool_calls": []}, "finish_reason": "stop"}],
        },
        _VLLM_USAGE_CHUNK,
    ],
    text="".join(_VLLM_WORDS),
    usage=(77, 61),
)

# A tool call (--enable-auto-tool-choice --tool-call-parser hermes): the parser's first DeltaToolCall
# has `id` ("chatcmpl-tool-" and hex), `type`, `index` and `function: {"name"}` only
# (DeltaFunctionCall(name=...).model_dump(exclude_none=True)); later ones `index` and
# `function.arguments`; the last fragment may come in the chunk with the finish reason, which is
# "tool_calls" for tool_choice "auto".
VLLM_TOOL_CALL = _shape(
    "vllm-tool-call",
    [
        _vllm({"role": "assistant", "content": ""}),
        _vllm(
            {
                "tool_calls": [
                    {
                        "id": "chatcmpl-tool-ca99dda515524c6abe47d1ea22813507",
                        "type": "function",
                        "index": 0,
                        "function": {"name": "recall"},
                    }
                ]
            }
        ),
        *(_vllm({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}) for piece in _RECALL_PIECES[:-1]),
        _vllm(
            {"tool_calls": [{"index": 0, "function": {"arguments": _RECALL_PIECES[-1]}}]},
            "tool_calls",
            stop_reason=None,
        ),
        _VLLM_USAGE_CHUNK,
    ],
    calls=(("chatcmpl-tool-ca99dda515524c6abe47d1ea22813507", "recall", '{"query":"soup recipe"}'),),
    finish="tool_calls",
    usage=(77, 61),
)

# An error while generating: the generator catches it and yields
# `create_streaming_error_response(...)`, json.dumps of ErrorResponse(error=ErrorInfo(message, type,
# param, code)) (vllm/entrypoints/openai/engine/serving.py at 00bd1493b3e82d6c13c68ee8a0e1c5a96707e190;
# "Internal server error" is GenerationError's message), then `data: [DONE]` all the same.
VLLM_ERROR_MIDSTREAM = _shape(
    "vllm-error-midstream",
    [
        _vllm({"role": "assistant", "content": ""}),
        *(_vllm({"content": word}) for word in _VLLM_WORDS[:3]),
        json.dumps(
            {"error": {"message": "Internal server error", "type": "InternalServerError", "param": None, "code": 500}}
        ),
    ],
    finish=None,
)

# The usage chunk with `"choices": null`: reported of vLLM by the Rust crate openai-interface 0.12.0
# (src/chat/create/response.rs: "Some OpenAI-compatible backends (e.g. vLLM) terminate the stream with
# a usage-only chunk whose `choices` is `null`"); not seen in vLLM's own code above.
VLLM_NULL_CHOICES = dataclasses.replace(
    VLLM_TEXT,
    name="vllm-null-choices",
    events=(*VLLM_TEXT.events[:-1], _json({**_VLLM_USAGE_CHUNK, "choices": None})),
)


# --- by kind -------------------------------------------------------------------------------------------------

ANSWERS = (
    OPENAI_TEXT,
    OPENAI_LENGTH,
    OPENAI_TOOL_CALL,
    OPENAI_TWO_CALLS,
    OPENAI_GUIDE_NULLS,
    OPENROUTER_KEEPALIVE,
    LLAMA_TEXT,
    LLAMA_USAGE_CHUNK,
    LLAMA_TOOL_CALL,
    OLLAMA_TEXT,
    OLLAMA_TOOL_CALLS,
    OLLAMA_TOOL_CALLS_INDEX_0,
    VLLM_TEXT,
    VLLM_090_TEXT,
    VLLM_TOOL_CALL,
    VLLM_NULL_CHOICES,
)
TEXT_ANSWERS = tuple(shape for shape in ANSWERS if shape.text and not shape.calls)
CALLS = tuple(shape for shape in ANSWERS if shape.calls)
# Streams in which the server reports an error, or that end before the answer did.
FAILURES = (
    OPENAI_ERROR_MIDSTREAM,
    LLAMA_ERROR_MIDSTREAM,
    LLAMA_ERROR_FIELD,
    OLLAMA_ERROR_MIDSTREAM,
    VLLM_ERROR_MIDSTREAM,
)
