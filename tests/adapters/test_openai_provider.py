"""OpenAICompatibleProvider against a real FakeOpenAIServer on 127.0.0.1."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import socket
import traceback
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.llm.images import data_url
from adapters.llm.openai_compat import OpenAICompatibleProvider
from core.values.errors import (
    ProviderBadResponse,
    ProviderError,
    ProviderRateLimited,
    ProviderRejected,
    ProviderServerError,
    ProviderUnavailable,
)
from core.values.model import ChatMessage, CompletionRequest, ImageInput, ToolCall, ToolSpec
from tests.helpers.media import png_with

CANARY = "canary-7f3a9 the user's private words"

WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


def ask(text: str = "hello", **kwargs: object) -> CompletionRequest:
    return CompletionRequest(messages=(ChatMessage("system", "be kind"), ChatMessage("user", text)), **kwargs)


def compact_json(value: object) -> bytes:
    """`value` as the provider's bodies are written: compact JSON, non-ASCII as it is, UTF-8."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def full_text(exc: BaseException) -> str:
    """The exception as a traceback would print it, causes included."""
    return "".join(traceback.format_exception(exc))


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- replies and the wire format -------------------------------------------------


async def test_plain_reply_becomes_a_completion_with_usage(server, provider) -> None:
    server.reply_text("hi there", prompt_tokens=11, completion_tokens=2)

    completion = await provider.complete(ask())

    assert completion.text == "hi there"
    assert completion.tool_calls == ()
    assert (completion.prompt_tokens, completion.completion_tokens) == (11, 2)


async def test_request_carries_model_messages_and_bearer_key_without_unoffered_tools(server, provider) -> None:
    await provider.complete(ask("hello"))

    assert server.requests == [
        {
            "model": "test-model",
            "messages": [{"role": "system", "content": "be kind"}, {"role": "user", "content": "hello"}],
            "max_tokens": 1024,  # the provider's default cap, always sent
        }
    ]
    assert server.request_headers[0]["Authorization"] == "Bearer sk-test"
    assert server.request_headers[0]["Content-Type"] == "application/json"


async def test_request_body_is_compact_json_and_its_size_is_exposed(server, provider) -> None:
    await provider.complete(ask("hello", temperature=0.2, max_tokens=50))

    raw = server.raw_requests[0]
    assert b": " not in raw and b", " not in raw
    assert provider.last_request_bytes == len(raw)
    assert server.requests[0]["temperature"] == 0.2
    assert server.requests[0]["max_tokens"] == 50


async def test_the_body_is_the_requests_json_byte_for_byte_whatever_its_messages(provider) -> None:
    # The body is written in pieces (messages of role and text alone directly, each tool's JSON kept
    # between requests): what it holds is still exactly what json.dumps writes of the request.
    call = ToolCall("call_1", "get_weather", '{"city":"Oslo"}')
    image = ImageInput("image/png", png_with())
    request = ask(
        'quotes " and \\ and\nlines, caf\u00e9 \U0001f600, \u2028 \x00 \x1f',
        tools=(WEATHER,),
        temperature=0.5,
    )
    request = dataclasses.replace(
        request,
        messages=(
            *request.messages,
            ChatMessage("user", None),
            ChatMessage("assistant", None, tool_calls=(call,)),
            ChatMessage("tool", "12 degrees", tool_call_id="call_1"),
            ChatMessage("user", "what is this?", images=(image,)),
            ChatMessage("user", "the last words"),
        ),
    )
    expected = {
        "model": "test-model",
        "messages": [
            {"role": "system", "content": "be kind"},
            {"role": "user", "content": request.messages[1].content},
            {"role": "user", "content": ""},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": call.arguments},
                    }
                ],
            },
            {"role": "tool", "content": "12 degrees", "tool_call_id": "call_1"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is this?"},
                    {"type": "image_url", "image_url": {"url": data_url(image)}},
                ],
            },
            {"role": "user", "content": "the last words"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": WEATHER.name,
                    "description": WEATHER.description,
                    "parameters": WEATHER.parameters,
                },
            }
        ],
        "tool_choice": "auto",
        "temperature": 0.5,
        "max_tokens": 1024,
    }
    streamed = {**expected, "stream": True, "stream_options": {"include_usage": True}}

    for _ in range(2):  # the second time with the tool's JSON as written the first
        assert await provider.request_body(request) == compact_json(expected)
        assert await provider.request_body(request, streamed=True) == compact_json(streamed)


@given(
    texts=st.lists(st.tuples(st.sampled_from(["system", "user", "assistant", 'r\u00f4le "']), st.text()), max_size=6),
    model=st.text(),
)
def test_a_request_of_any_texts_is_sent_as_its_json(texts, model) -> None:
    provider = OpenAICompatibleProvider("http://127.0.0.1:1/v1", model=model)
    request = CompletionRequest(tuple(ChatMessage(role, text) for role, text in texts))
    expected = {
        "model": model,
        "messages": [{"role": role, "content": text} for role, text in texts],
        "max_tokens": 1024,
    }
    try:
        wanted: bytes | str = compact_json(expected)
    except UnicodeEncodeError as exc:  # a lone surrogate: no UTF-8 body of it either
        wanted = str(exc)
    try:
        body: bytes | str = asyncio.run(provider.request_body(request))
    except UnicodeEncodeError as exc:
        body = str(exc)
    assert body == wanted


async def test_a_tool_changed_since_the_last_request_is_sent_as_it_is_now(provider) -> None:
    parameters = {"type": "object", "properties": {"city": {"type": "string"}}}

    async def sent(tool: ToolSpec) -> bytes:
        body = await provider.request_body(ask(tools=(tool,)))
        return compact_json(json.loads(body)["tools"][0]["function"])

    assert await sent(ToolSpec("get_weather", "Weather.", parameters)) == compact_json(
        {"name": "get_weather", "description": "Weather.", "parameters": parameters}
    )
    parameters["properties"]["days"] = {"type": "integer"}  # its schema changed in place
    assert b'"days":{"type":"integer"}' in await sent(ToolSpec("get_weather", "Weather.", parameters))
    assert b'"description":"Rain and sun."' in await sent(ToolSpec("get_weather", "Rain and sun.", parameters))
    # Other parameters of the same value, in another order: written in theirs.
    reordered = {"properties": parameters["properties"], "type": "object"}
    assert b'"parameters":{"properties":' in await sent(ToolSpec("get_weather", "Rain and sun.", reordered))


async def test_the_tools_json_kept_is_bounded(provider) -> None:
    tools = tuple(ToolSpec(f"tool_{n}", "A tool.", {"type": "object"}) for n in range(300))
    await provider.request_body(ask(tools=tools))
    assert len(provider._tools_written) <= 256


async def test_no_authorization_header_without_an_api_key(server) -> None:
    provider = OpenAICompatibleProvider(server.base_url + "/")  # a trailing slash is tolerated
    try:
        await provider.complete(ask())
    finally:
        await provider.aclose()

    assert "Authorization" not in server.request_headers[0]
    assert server.requests[0]["model"] == "default"


async def test_offered_tools_are_sent_as_functions(server, provider) -> None:
    await provider.complete(ask(tools=(WEATHER,)))

    assert server.requests[0]["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather for a city.",
                "parameters": WEATHER.parameters,
            },
        }
    ]


async def test_tool_call_round_trip_sends_the_tool_result_back(server, provider) -> None:
    server.reply_tool_call("get_weather", '{"city":"Oslo"}', call_id="call_42")
    server.reply_text("It is 3 degrees in Oslo.")
    first = ask("weather in Oslo?", tools=(WEATHER,))

    asked = await provider.complete(first)

    assert asked.text == ""
    [call] = asked.tool_calls
    assert (call.id, call.name, json.loads(call.arguments)) == ("call_42", "get_weather", {"city": "Oslo"})

    second = CompletionRequest(
        messages=(
            *first.messages,
            ChatMessage("assistant", None, tool_calls=asked.tool_calls),
            ChatMessage("tool", '{"temp_c":3}', tool_call_id=call.id),
        ),
        tools=(WEATHER,),
    )
    answer = await provider.complete(second)

    assert answer.text == "It is 3 degrees in Oslo."
    sent = server.requests[1]["messages"]
    assert sent[2] == {
        "role": "assistant",
        "content": "",  # never null: llama.cpp's server refuses that
        "tool_calls": [
            {"id": "call_42", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'}}
        ],
    }
    assert sent[3] == {"role": "tool", "content": '{"temp_c":3}', "tool_call_id": "call_42"}


async def test_tool_arguments_sent_as_an_object_become_json_text(server, provider) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
    server.script({"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [call]}}]})

    completion = await provider.complete(ask(tools=(WEATHER,)))

    assert json.loads(completion.tool_calls[0].arguments) == {"city": "Oslo"}
    assert completion.prompt_tokens is None  # usage is optional


# --- retries ------------------------------------------------------------------------


async def test_429_is_retried_after_the_retry_after_seconds(server, provider, sleep) -> None:
    server.reply_status(429, headers={"Retry-After": "2"})
    server.reply_text("after the wait")

    completion = await provider.complete(ask())

    assert completion.text == "after the wait"
    assert sleep.delays == [2.0]
    assert len(server.requests) == 2


async def test_retry_after_as_an_http_date_is_honoured_and_capped(server, sleep) -> None:
    provider = OpenAICompatibleProvider(server.base_url, max_retry_after=5.0)
    provider._sleep = sleep
    soon = format_datetime(datetime.now(UTC) + timedelta(seconds=3), usegmt=True)
    late = format_datetime(datetime.now(UTC) + timedelta(hours=1), usegmt=True)
    server.reply_status(429, headers={"Retry-After": soon})
    server.reply_status(429, headers={"Retry-After": late})
    try:
        await provider.complete(ask())
    finally:
        await provider.aclose()

    assert 1.0 < sleep.delays[0] <= 3.0
    assert sleep.delays[1] == 5.0


async def test_persistent_429_raises_rate_limited_after_bounded_attempts(server, sleep) -> None:
    provider = OpenAICompatibleProvider(server.base_url, max_retries=2, backoff=0.5)
    provider._sleep = sleep
    for _ in range(3):
        server.reply_status(429)
    try:
        with pytest.raises(ProviderRateLimited, match="429") as caught:
            await provider.complete(ask())
    finally:
        await provider.aclose()

    assert len(server.requests) == 3
    assert sleep.delays == [0.5, 1.0]  # exponential backoff without Retry-After
    assert server.base_url in str(caught.value)


async def test_502_then_success_returns_the_reply(server, provider, sleep) -> None:
    server.reply_status(502)
    server.reply_text("recovered")

    completion = await provider.complete(ask())

    assert completion.text == "recovered"
    assert len(server.requests) == 2
    assert sleep.delays == [0.5]


async def test_a_plain_500_is_a_server_error_and_not_retried(server, provider, sleep) -> None:
    server.reply_status(500, message="internal error")
    server.reply_text("never asked for")

    with pytest.raises(ProviderServerError) as caught:
        await provider.complete(ask())

    assert caught.value.status == 500
    assert len(server.requests) == 1
    assert sleep.delays == []


async def test_persistent_503_raises_server_error_after_bounded_attempts(server, sleep) -> None:
    provider = OpenAICompatibleProvider(server.base_url, max_retries=3, backoff=0.1)
    provider._sleep = sleep
    for _ in range(10):
        server.reply_status(503)
    try:
        with pytest.raises(ProviderServerError) as caught:
            await provider.complete(ask())
    finally:
        await provider.aclose()

    assert len(server.requests) == 4
    assert sleep.delays == [0.1, 0.2, 0.4]
    message = str(caught.value)
    assert "503" in message and server.base_url in message and "4 attempts" in message
    assert "\n" not in message


async def test_a_server_slower_than_the_timeout_raises_unavailable_without_a_retry(server, sleep) -> None:
    provider = OpenAICompatibleProvider(server.base_url, timeout=0.2, max_retries=1)
    provider._sleep = sleep
    server.reply_delay(5.0)
    server.reply_delay(5.0)
    try:
        with pytest.raises(ProviderUnavailable, match=r"did not answer within 0\.2 s") as caught:
            await provider.complete(ask())
    finally:
        await provider.aclose()

    assert len(server.requests) == 1  # the timeout bounds the whole call: no time is left to retry
    assert server.base_url in str(caught.value)


async def test_a_hang_up_is_retried(server, provider, sleep) -> None:
    server.reply_disconnect()
    server.reply_text("second time lucky")

    completion = await provider.complete(ask())

    assert completion.text == "second time lucky"
    assert len(sleep.delays) == 1


async def test_connection_refused_raises_unavailable_naming_the_server(sleep) -> None:
    base_url = f"http://127.0.0.1:{closed_port()}/v1"
    provider = OpenAICompatibleProvider(base_url, max_retries=2)
    provider._sleep = sleep
    try:
        with pytest.raises(ProviderUnavailable, match="could not reach") as caught:
            await provider.complete(ask())
    finally:
        await provider.aclose()

    assert base_url in str(caught.value)
    assert len(sleep.delays) == 2


# --- answers that are not completions, and refusals ---------------------------------


async def test_malformed_json_raises_bad_response_with_a_clear_message(server, provider) -> None:
    server.reply_raw(b"not json")

    with pytest.raises(ProviderBadResponse) as caught:
        await provider.complete(ask())

    message = str(caught.value)
    assert message.startswith(
        f"the model server at {server.base_url} answered with something that is not a chat completion"
    )
    assert "JSON" in message
    assert len(server.requests) == 1  # a bad answer is not retried


async def test_json_without_choices_raises_bad_response_naming_the_field(server, provider) -> None:
    server.script({"object": "chat.completion", "choices": []})

    with pytest.raises(ProviderBadResponse, match="choices"):
        await provider.complete(ask())


async def test_401_raises_rejected_naming_the_status_and_server_message(server, provider) -> None:
    server.reply_status(401, message="Incorrect API key provided")

    with pytest.raises(ProviderRejected) as caught:
        await provider.complete(ask())

    assert caught.value.status == 401
    message = str(caught.value)
    assert "401" in message and "Incorrect API key provided" in message and server.base_url in message
    assert len(server.requests) == 1  # a refusal is not retried


async def test_ollama_style_string_error_is_reported(server, provider) -> None:
    server.reply_status(404, body={"error": "model 'nope' not found"})

    with pytest.raises(ProviderRejected, match="model 'nope' not found"):
        await provider.complete(ask())


# --- privacy: the message text never reaches errors or logs -------------------------


@pytest.mark.parametrize(
    "script",
    [
        pytest.param(lambda s: s.reply_status(401), id="401"),
        pytest.param(lambda s: [s.reply_status(503) for _ in range(2)], id="503"),
        pytest.param(lambda s: s.reply_raw(b"<html>oops</html>"), id="not-json"),
        pytest.param(lambda s: s.reply_raw(json.dumps({"reply": CANARY}).encode()), id="echoing-bad-shape"),
        pytest.param(lambda s: [s.reply_delay(5.0) for _ in range(2)], id="timeout"),
    ],
)
async def test_errors_and_logs_never_contain_the_message_text(server, sleep, caplog, script) -> None:
    caplog.set_level(logging.DEBUG)
    provider = OpenAICompatibleProvider(server.base_url, timeout=0.2, max_retries=1)
    provider._sleep = sleep
    script(server)
    try:
        with pytest.raises(ProviderError) as caught:
            await provider.complete(ask(CANARY))
    finally:
        await provider.aclose()

    assert CANARY.encode() in server.raw_requests[0]  # it was really sent
    assert CANARY not in full_text(caught.value)
    assert caplog.records
    for record in caplog.records:
        assert CANARY not in record.getMessage()


async def test_successful_exchange_logs_sizes_but_not_the_message_text(server, provider, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    server.reply_text(f"you said {CANARY}")

    completion = await provider.complete(ask(CANARY))

    assert CANARY in completion.text
    assert any(str(provider.last_request_bytes) in record.getMessage() for record in caplog.records)
    for record in caplog.records:
        assert CANARY not in record.getMessage()


async def test_a_server_error_message_quoting_the_request_is_withheld(server, provider) -> None:
    server.reply_status(400, message=f"cannot process '{CANARY}'")

    with pytest.raises(ProviderRejected) as caught:
        await provider.complete(ask(CANARY))

    assert "400" in str(caught.value)
    assert "withheld" in str(caught.value)
    assert CANARY not in full_text(caught.value)


# --- lifecycle -----------------------------------------------------------------------


async def test_aclose_is_safe_to_call_twice(server) -> None:
    provider = OpenAICompatibleProvider(server.base_url)
    await provider.complete(ask())

    await provider.aclose()
    await provider.aclose()


async def test_aclose_before_any_request_is_safe() -> None:
    provider = OpenAICompatibleProvider("http://127.0.0.1:1/v1")

    await provider.aclose()
    await provider.aclose()


def test_a_base_url_without_a_scheme_is_refused_at_construction() -> None:
    with pytest.raises(ValueError, match="base_url"):
        OpenAICompatibleProvider("127.0.0.1:11434/v1")
