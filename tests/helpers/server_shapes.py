"""Recorded response shapes of OpenAI, Ollama's and vLLM's Chat Completions endpoints (issue 11, items 1 and 8).

Each body is the shape the server documents or was recorded sending, with its source beside it: every
field name, nesting, null and type is the server's. What is ours: the tool's name and arguments in a tool
call (`current_time`, `{}`, a tool the Companion offers), and some message texts and model names,
shortened or translated. Where a shape could not be sourced it is None, with the reason; no field here is
made up. llama.cpp's shapes live in tests/adapters/test_model_link.py.

`ServerShapes.script_*` queue the bodies on a FakeOpenAIServer; `copy.deepcopy` keeps the constants intact.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from tests.helpers.fake_openai import FakeOpenAIServer, ScriptedResponse

# --- OpenAI (api.openai.com/v1/chat/completions) ---------------------------------------------------------

# The "Default" example of POST /v1/chat/completions in the API reference
# (https://platform.openai.com/docs/api-reference/chat/create; the same example is in
# openai/openai-openapi, openapi.yaml): `refusal`, `annotations`, `logprobs`, `service_tier` and
# `usage.prompt_tokens_details` / `completion_tokens_details`.
OPENAI_PLAIN: dict[str, Any] = {
    "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
    "object": "chat.completion",
    "created": 1741569952,
    "model": "gpt-4.1-2025-04-14",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Hello! How can I assist you today?",
                "refusal": None,
                "annotations": [],
            },
            "logprobs": None,
            "finish_reason": "stop",
        }
    ],
    "usage": {
        "prompt_tokens": 19,
        "completion_tokens": 10,
        "total_tokens": 29,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    },
    "service_tier": "default",
}

# The "Functions" example of the same reference page (openai/openai-openapi, openapi.yaml):
# `content: null` beside `tool_calls`, `arguments` as JSON text, `finish_reason: "tool_calls"`.
OPENAI_TOOL_CALL: dict[str, Any] = {
    "id": "chatcmpl-abc123",
    "object": "chat.completion",
    "created": 1699896916,
    "model": "gpt-4o-mini",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_abc123",
                        "type": "function",
                        "function": {"name": "current_time", "arguments": "{}"},
                    }
                ],
            },
            "logprobs": None,
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {
        "prompt_tokens": 82,
        "completion_tokens": 17,
        "total_tokens": 99,
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    },
}

# The chat completion object example of the API reference
# (https://platform.openai.com/docs/api-reference/chat/object, as published in late 2024), which carries
# `system_fingerprint`; `finish_reason` is "length", which the reference documents as "the maximum number
# of tokens specified in the request was reached" (the example itself says "stop"; the text is ours).
OPENAI_LENGTH: dict[str, Any] = {
    "id": "chatcmpl-123456",
    "object": "chat.completion",
    "created": 1728933352,
    "model": "gpt-4o-2024-08-06",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Hi there! How can I", "refusal": None},
            "logprobs": None,
            "finish_reason": "length",
        }
    ],
    "usage": {
        "prompt_tokens": 19,
        "completion_tokens": 10,
        "total_tokens": 29,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    },
    "system_fingerprint": "fp_6b68a8204b",
}

# 400 for a request over the model's context, as OpenAI sends it (recorded in
# https://github.com/ChatGPTNextWeb/NextChat/issues/2358; the same body in
# https://github.com/mckaywrigley/chatbot-ui/issues/102 and chathub-dev/chathub#126).
OPENAI_TOO_LONG: dict[str, Any] = {
    "error": {
        "message": (
            "This model's maximum context length is 16385 tokens. However, your messages resulted in "
            "16468 tokens. Please reduce the length of the messages."
        ),
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}

# 401 for a wrong API key (recorded in https://github.com/chatanywhere/GPT_API_free/issues/62, the key
# already masked by OpenAI; the same body in continuedev/continue#10294).
OPENAI_KEY_REFUSED: dict[str, Any] = {
    "error": {
        "message": (
            "Incorrect API key provided: sk-VKMIs***************************************wjh3. "
            "You can find your API key at https://platform.openai.com/account/api-keys."
        ),
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_api_key",
    }
}

# --- Ollama (its OpenAI-compatible endpoint, http://localhost:11434/v1/chat/completions) --------------------
# The shapes are ollama/ollama's openai/openai.go (ChatCompletion, Choice, Message, ToolCall, Usage and
# ToChatCompletion) at commit 634c416645790c84dfc80849b05f84b3853b127f: `system_fingerprint` is always
# "fp_ollama", the id is "chatcmpl-" and a number below 1000 (middleware/openai.go), a message has no
# `refusal`, and usage has no details.

# A plain reply as ToChatCompletion writes it (`"content"` is always present, `tool_calls` and
# `reasoning` are omitted when empty).
OLLAMA_PLAIN: dict[str, Any] = {
    "id": "chatcmpl-174",
    "object": "chat.completion",
    "created": 1764405566,
    "model": "qwen3:8b",
    "system_fingerprint": "fp_ollama",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Hello! How can I help you today?"},
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 16, "completion_tokens": 24, "total_tokens": 40},
}

# A tool call: Ollama's tool calls carry an `index` (openai.go ToolCall; added for ollama/ollama#7881),
# an id of "call_" and eight characters (recorded as "call_lbcjwr0u" and "call_mmmf8pcj" in published
# stream captures), `arguments` as JSON text (json.Marshal of the parsed arguments), `content` "" rather
# than null (the field has no omitempty and the server clears the text of a tool call), a `reasoning`
# field from a thinking model, and `finish_reason` "tool_calls" (ollama/ollama#5995).
OLLAMA_TOOL_CALL: dict[str, Any] = {
    "id": "chatcmpl-140",
    "object": "chat.completion",
    "created": 1764405570,
    "model": "qwen3:8b",
    "system_fingerprint": "fp_ollama",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "",
                "reasoning": "The person asks for the time; the current_time tool gives it.",
                "tool_calls": [
                    {
                        "id": "call_mmmf8pcj",
                        "index": 0,
                        "type": "function",
                        "function": {"name": "current_time", "arguments": "{}"},
                    }
                ],
            },
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {"prompt_tokens": 133, "completion_tokens": 91, "total_tokens": 224},
}

# num_predict (our max_tokens) reached: Ollama's done_reason "length" becomes finish_reason "length"
# (ToChatCompletion passes DoneReason through; recorded as "finish_reason":"length" in a published
# qwen3:32b capture of /v1/chat/completions).
OLLAMA_LENGTH: dict[str, Any] = {
    "id": "chatcmpl-774",
    "object": "chat.completion",
    "created": 1768062791,
    "model": "qwen3:32b",
    "system_fingerprint": "fp_ollama",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Once upon a time there was"},
            "finish_reason": "length",
        }
    ],
    "usage": {"prompt_tokens": 15, "completion_tokens": 20, "total_tokens": 35},
}

# Context overflow: NOT SOURCEABLE as an error. Ollama truncates a prompt longer than num_ctx instead of
# refusing it (server/routes.go: `truncate := req.Truncate == nil || *req.Truncate`), and the OpenAI-
# compatible request (openai.go ChatCompletionRequest) has no `truncate` field to turn that off, so
# /v1/chat/completions answers 200 with the oldest messages dropped. The tests check that such a 200 is
# taken as an ordinary reply.
OLLAMA_TOO_LONG: dict[str, Any] | None = None

# Bad API key: a local Ollama checks no key at all ("No authentication is required when accessing Ollama's
# API locally", https://docs.ollama.com/api/authentication). ollama.com answers a refused key with 401 and
# the documented error format `{"error": "..."}` (https://docs.ollama.com/api/errors; api/types.go
# AuthorizationError, whose text is "unauthorized", as seen in continuedev/continue#11405). Whether
# ollama.com/v1 wraps it the way the local /v1 middleware wraps errors is not documented.
OLLAMA_KEY_REFUSED: dict[str, Any] = {"error": "unauthorized"}

# Any other failure on /v1: middleware/openai.go (commit 5dbb81b72c4b61b737e4970db711f7718e4efcc6)
# keeps the handler's status and rewrites its `{"error": "..."}` as openai.NewError(500, ...): type
# "api_error", `param` and `code` null. The message is the one the handler gives for a model that is not
# pulled (server/routes.go, status 404).
OLLAMA_MODEL_MISSING: dict[str, Any] = {
    "error": {
        "message": 'model "qwen3:8b" not found, try pulling it first',
        "type": "api_error",
        "param": None,
        "code": None,
    }
}

# --- vLLM (vllm serve, its OpenAI-compatible server) ---------------------------------------------------------
# The shapes are vllm-project/vllm's vllm/entrypoints/openai/protocol.py (ChatCompletionResponse,
# ChatCompletionResponseChoice with its "legacy" `stop_reason`, ChatMessage with `reasoning_content`,
# UsageInfo, `prompt_logprobs`, `kv_transfer_params`), serialised with every field, nulls included, as
# vLLM 0.10 servers were recorded answering in published deployment guides (a GKE gateway tutorial
# serving gemma-7b, llm-d's quickstart, a gpt-oss-120b setup with `reasoning_content` filled in).
# vLLM's docs note that `reasoning_content` is being renamed `reasoning` (docs/features/reasoning_outputs.md).

# A plain reply of a reasoning model: `reasoning_content` beside `content`, `tool_calls: []`.
VLLM_PLAIN: dict[str, Any] = {
    "id": "chatcmpl-bcd524af9a884fc88fba39f6b6a94551",
    "object": "chat.completion",
    "created": 1769329277,
    "model": "openai/gpt-oss-120b",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "The capital of Japan is Tokyo.",
                "refusal": None,
                "annotations": None,
                "audio": None,
                "function_call": None,
                "tool_calls": [],
                "reasoning_content": "A straightforward factual question. Answer: Tokyo.",
            },
            "logprobs": None,
            "finish_reason": "stop",
            "stop_reason": None,
        }
    ],
    "service_tier": None,
    "system_fingerprint": None,
    "usage": {"prompt_tokens": 77, "total_tokens": 138, "completion_tokens": 61, "prompt_tokens_details": None},
    "prompt_logprobs": None,
    "kv_transfer_params": None,
}

# A tool call (a server started with --enable-auto-tool-choice and a --tool-call-parser): the id is
# "chatcmpl-tool-" and hex (protocol.py ToolCall, random_tool_call_id), `content` null,
# `finish_reason` "tool_calls" (recorded as such in published vLLM probes).
VLLM_TOOL_CALL: dict[str, Any] = {
    "id": "chatcmpl-d0c68c86be0641129cffa5053c0c217e",
    "object": "chat.completion",
    "created": 1744513664,
    "model": "Qwen/Qwen3-8B",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": None,
                "refusal": None,
                "annotations": None,
                "audio": None,
                "function_call": None,
                "tool_calls": [
                    {
                        "id": "chatcmpl-tool-ca99dda515524c6abe47d1ea22813507",
                        "type": "function",
                        "function": {"name": "current_time", "arguments": "{}"},
                    }
                ],
                "reasoning_content": None,
            },
            "logprobs": None,
            "finish_reason": "tool_calls",
            "stop_reason": None,
        }
    ],
    "service_tier": None,
    "system_fingerprint": None,
    "usage": {"prompt_tokens": 83, "total_tokens": 100, "completion_tokens": 17, "prompt_tokens_details": None},
    "prompt_logprobs": None,
    "kv_transfer_params": None,
}

# max_tokens reached (recorded from a vLLM server with "max_tokens": 50, llm-d's quickstart).
VLLM_LENGTH: dict[str, Any] = {
    "id": "chatcmpl-ebda7f789d434895afec746173e2a4ce",
    "object": "chat.completion",
    "created": 1755679402,
    "model": "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Alright, the user said hello and I should ask them how they are doing or what they need",
                "refusal": None,
                "annotations": None,
                "audio": None,
                "function_call": None,
                "tool_calls": [],
                "reasoning_content": None,
            },
            "logprobs": None,
            "finish_reason": "length",
            "stop_reason": None,
        }
    ],
    "service_tier": None,
    "system_fingerprint": None,
    "usage": {"prompt_tokens": 7, "total_tokens": 57, "completion_tokens": 50, "prompt_tokens_details": None},
    "prompt_logprobs": None,
    "kv_transfer_params": None,
}

# 400 for a request over max_model_len: vLLM counts max_tokens in ("...in the completion"). The flat body
# with `"object": "error"` is vLLM up to 0.10 (recorded in llamastack/llama-stack discussion #981, now
# ogx-ai/ogx#4534; the same body in vllm-project/vllm#4667).
VLLM_TOO_LONG_FLAT: dict[str, Any] = {
    "object": "error",
    "message": (
        "This model's maximum context length is 6048 tokens. However, you requested 6616 tokens "
        "(568 in the messages, 6048 in the completion). Please reduce the length of the messages or completion."
    ),
    "type": "BadRequestError",
    "param": None,
    "code": 400,
}
# Later vLLM nests it as OpenAI does: protocol.py ErrorResponse(error=ErrorInfo(message, type, param,
# code: int)) at commit 0052bed36509c7a5a2d8e48265334e40cf2f5a0e.
VLLM_TOO_LONG: dict[str, Any] = {
    "error": {
        "message": VLLM_TOO_LONG_FLAT["message"],
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
}

# 401 from `vllm serve --api-key` (or VLLM_API_KEY): the AuthenticationMiddleware of
# vllm/entrypoints/openai/api_server.py answers `JSONResponse(content={"error": "Unauthorized"},
# status_code=401)` to every /v1 path whose Authorization header is not "Bearer <key>".
VLLM_KEY_REFUSED: dict[str, Any] = {"error": "Unauthorized"}

# 400 when tools come with tool_choice "auto" to a server started without --enable-auto-tool-choice
# and --tool-call-parser (serving_chat.py; the message is recorded in many deployments, e.g. NVIDIA
# NeMo Retriever's troubleshooting guide), in the nested shape of current vLLM.
VLLM_AUTO_TOOL_CHOICE_DISABLED: dict[str, Any] = {
    "error": {
        "message": '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
}


# --- the shapes by server ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ServerShapes:
    """One server's recorded answers; `too_long` is None where the server documents no such error."""

    name: str
    plain: dict[str, Any]
    tool_call: dict[str, Any]
    length: dict[str, Any]
    too_long: tuple[int, Any] | None
    key_refused: tuple[int, Any]

    @property
    def plain_text(self) -> str:
        return self.plain["choices"][0]["message"]["content"]

    @property
    def length_text(self) -> str:
        return self.length["choices"][0]["message"]["content"]

    @property
    def call_id(self) -> str:
        return self.tool_call["choices"][0]["message"]["tool_calls"][0]["id"]

    def script_plain(self, server: FakeOpenAIServer) -> None:
        server.script(copy.deepcopy(self.plain))

    def script_tool_call(self, server: FakeOpenAIServer) -> None:
        server.script(copy.deepcopy(self.tool_call))

    def script_length(self, server: FakeOpenAIServer) -> None:
        server.script(copy.deepcopy(self.length))

    def script_too_long(self, server: FakeOpenAIServer) -> None:
        assert self.too_long is not None, f"{self.name} documents no context-length error"
        status, body = self.too_long
        server.script(ScriptedResponse(status=status, body=copy.deepcopy(body)))

    def script_key_refused(self, server: FakeOpenAIServer) -> None:
        status, body = self.key_refused
        server.script(ScriptedResponse(status=status, body=copy.deepcopy(body)))


OPENAI = ServerShapes(
    "openai", OPENAI_PLAIN, OPENAI_TOOL_CALL, OPENAI_LENGTH, (400, OPENAI_TOO_LONG), (401, OPENAI_KEY_REFUSED)
)
OLLAMA = ServerShapes("ollama", OLLAMA_PLAIN, OLLAMA_TOOL_CALL, OLLAMA_LENGTH, None, (401, OLLAMA_KEY_REFUSED))
VLLM = ServerShapes("vllm", VLLM_PLAIN, VLLM_TOOL_CALL, VLLM_LENGTH, (400, VLLM_TOO_LONG), (401, VLLM_KEY_REFUSED))
SERVERS = (OPENAI, OLLAMA, VLLM)
