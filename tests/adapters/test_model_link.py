"""The model link against a server as strict as llama.cpp's: tools, caps, retries and honest failure words."""

from __future__ import annotations

import logging
import socket
from collections.abc import AsyncIterator

import pytest

from adapters.llm.openai_compat import OpenAICompatibleProvider
from bot.bootstrap import build_companion
from core.memory.context import summary_request
from core.privacy.transition import TransitionLine
from core.turn.config import CompanionConfig
from core.values import copy
from core.values.errors import (
    ProviderError,
    ProviderRateLimited,
    ProviderRejected,
    ProviderRequestTooLong,
)
from core.values.model import ChatMessage, CompletionRequest, ToolCall

# Helpers of the provider tests; the `provider` and `sleep` fixtures (tests/adapters/conftest.py) run over this
# module's strict `server`.
from tests.adapters.test_openai_provider import WEATHER, ask
from tests.conftest import PASSPHRASE
from tests.helpers.chat import all_rows, say
from tests.helpers.fake_openai import (
    FakeOpenAIServer,
    ScriptedResponse,
    completion_json,
)
from tests.helpers.logs import logging_policy

# What llama.cpp's server answers to a message whose content is null.
LLAMA_NULL_CONTENT = {
    "error": {
        "code": 500,
        "message": "[json.exception.type_error.302] type must be string, but is null",
        "type": "server_error",
    }
}
LLAMA_TOO_LONG = {
    "error": {
        "code": 400,
        "message": "the request exceeds the available context size, try increasing it",
        "type": "exceed_context_size_error",
    }
}


@pytest.fixture
async def server() -> AsyncIterator[FakeOpenAIServer]:
    async with FakeOpenAIServer(strict=True) as fake:
        yield fake


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def stored_user_texts(stores) -> list[str]:
    return [row[0] for row in await all_rows(stores, "SELECT text FROM messages WHERE role = 'user'")]


# --- requests as a strict server wants them --------------------------------------------


async def test_a_full_tool_loop_against_a_strict_server_calls_the_tool(server, linked, stores) -> None:
    server.reply_tool_call("current_time", "{}", call_id="call_t")
    server.reply_text("It is a fine Thursday.")

    reply = await say(linked, "what time is it?")

    assert reply.text == "It is a fine Thursday."
    assert len(server.requests) == 2
    assert server.tools_in_effect == [True, True]
    sent = server.requests[1]["messages"]
    assert sent[-2]["role"] == "assistant" and sent[-2]["content"] == ""
    assert sent[-2]["tool_calls"][0]["function"]["name"] == "current_time"
    assert sent[-1]["role"] == "tool" and sent[-1]["tool_call_id"] == "call_t"
    assert not sent[-1]["content"].startswith("error")  # the tool really ran


async def test_no_message_content_is_null_on_the_wire(server, provider) -> None:
    call = ToolCall("c1", "get_weather", '{"city":"Oslo"}')
    request = ask("weather?", tools=(WEATHER,))
    request = CompletionRequest(
        (*request.messages, ChatMessage("assistant", None, (call,)), ChatMessage("tool", None, tool_call_id="c1")),
        tools=(WEATHER,),
    )

    await provider.complete(request)

    assert b'"content":null' not in server.raw_requests[0]
    assert all(isinstance(m["content"], str) for m in server.requests[0]["messages"])


async def test_tool_choice_is_auto_whenever_tools_are_offered(server, provider) -> None:
    await provider.complete(ask(tools=(WEATHER,)))
    await provider.complete(ask())

    assert server.requests[0]["tool_choice"] == "auto"
    assert "tool_choice" not in server.requests[1] and "tools" not in server.requests[1]
    assert server.tools_in_effect == [True, False]


async def test_max_tokens_is_always_sent(server, provider) -> None:
    await provider.complete(ask())
    await provider.complete(ask(max_tokens=50))

    assert [r["max_tokens"] for r in server.requests] == [1024, 50]


async def test_the_fold_and_the_transition_line_have_their_own_small_caps(server, provider, linked) -> None:
    await provider.complete(summary_request("", []))
    await TransitionLine(provider, "generated")()

    fold, transition = (r["max_tokens"] for r in server.requests)
    assert fold < 1024 and transition < 1024


def test_the_configured_max_tokens_reaches_the_provider() -> None:
    from bot.bootstrap import build_provider
    from bot.settings import Settings

    settings = Settings(_env_file=None, llm_base_url="http://127.0.0.1:1/v1", llm_max_tokens=64)

    assert build_provider(settings)._max_tokens == 64


# --- answers: cut off, repaired ---------------------------------------------------------


async def test_a_reply_cut_off_at_the_token_limit_ends_with_a_visible_marker(server, linked) -> None:
    body = completion_json("Once upon a time there was")
    body["choices"][0]["finish_reason"] = "length"
    server.script(body)

    reply = await say(linked, "tell me a story")

    assert reply.text == "Once upon a time there was" + copy.CUT_OFF_MARKER


async def test_a_complete_reply_has_no_cut_off_marker(server, linked) -> None:
    server.reply_text("The end.")

    reply = await say(linked, "tell me a story")

    assert copy.CUT_OFF_MARKER not in reply.text


async def test_a_lone_surrogate_escape_in_the_reply_is_repaired(server, provider) -> None:
    server.reply_raw(
        b'{"choices":[{"message":{"role":"assistant","content":"cut mid-emoji \\ud83d"},"finish_reason":"stop"}]}'
    )

    completion = await provider.complete(ask())

    assert completion.text == "cut mid-emoji \ufffd"


# --- retries ------------------------------------------------------------------------------


async def test_a_500_validation_error_is_not_retried(server, provider, sleep) -> None:
    server.reply_status(500, body=LLAMA_NULL_CONTENT)
    server.reply_text("never asked for")

    with pytest.raises(ProviderRejected) as caught:
        await provider.complete(ask())

    assert caught.value.status == 500
    assert len(server.requests) == 1
    assert sleep.delays == []


@pytest.mark.parametrize("status", [400, 404, 422])
async def test_a_4xx_is_not_retried(server, provider, sleep, status) -> None:
    server.reply_status(status)
    server.reply_text("never asked for")

    with pytest.raises(ProviderRejected):
        await provider.complete(ask())

    assert len(server.requests) == 1


@pytest.mark.parametrize("status", [408, 429, 502, 503, 504])
async def test_transient_statuses_are_retried(server, provider, sleep, status) -> None:
    server.reply_status(status)
    server.reply_text("second time")

    completion = await provider.complete(ask())

    assert completion.text == "second time"
    assert len(server.requests) == 2


async def test_a_retry_after_past_the_deadline_is_not_waited_for(server, sleep) -> None:
    provider = OpenAICompatibleProvider(server.base_url, timeout=5.0, max_retry_after=600.0)
    provider._sleep = sleep
    server.reply_status(429, headers={"Retry-After": "60"})
    server.reply_text("too late")
    try:
        with pytest.raises(ProviderRateLimited):
            await provider.complete(ask())
    finally:
        await provider.aclose()

    assert len(server.requests) == 1
    assert sleep.delays == []


async def test_a_hanging_server_is_answered_once_after_the_timeout(server, stores, clock, passphrase_hash) -> None:
    provider = OpenAICompatibleProvider(server.base_url, timeout=0.3, max_retries=3)
    for _ in range(4):
        server.reply_delay(30.0)
    companion = build_companion(stores, provider, CompanionConfig(passphrase_hash=passphrase_hash), clock=clock)
    await companion.start()
    try:
        reply = await say(companion, "are you there?")
    finally:
        await companion.drain()
        await provider.aclose()

    assert reply.text == copy.PROVIDER_FAILED
    assert len(server.requests) == 1
    assert await stored_user_texts(stores) == ["are you there?"]


async def test_retries_stop_at_the_deadline_of_the_whole_call(server) -> None:
    # Six retries allowed, each answer 0.2 s away: only the 0.5 s deadline can stop them early.
    provider = OpenAICompatibleProvider(server.base_url, timeout=0.5, max_retries=6, backoff=0.01)
    for _ in range(7):
        server.script(ScriptedResponse(status=503, body={"error": {"message": "loading model"}}, delay=0.2))
    try:
        with pytest.raises(ProviderError):
            await provider.complete(ask())
    finally:
        await provider.aclose()

    assert len(server.requests) <= 3


# --- honest failure words; the message is kept in every case ------------------------------


async def test_a_refused_api_key_names_the_setting(server, linked, stores) -> None:
    server.reply_status(401, message="Invalid API Key")

    reply = await say(linked, "hello?")

    assert reply.text == copy.PROVIDER_KEY_REFUSED
    assert "COMPANION_LLM_API_KEY" in reply.text
    assert await stored_user_texts(stores) == ["hello?"]


@pytest.mark.parametrize(
    "script",
    [
        pytest.param(lambda s: s.reply_status(400, body=LLAMA_TOO_LONG), id="llama.cpp-400"),
        pytest.param(lambda s: s.reply_status(413), id="413"),
        pytest.param(
            lambda s: s.reply_status(400, message="This model's maximum context length is 4096 tokens"), id="openai-400"
        ),
    ],
)
async def test_a_request_too_long_for_the_model_says_so(server, linked, stores, script) -> None:
    script(server)
    script(server)  # the retry with half the window is too long as well

    reply = await say(linked, "a very long message")

    assert reply.text == copy.PROVIDER_TOO_LONG
    assert len(server.requests) == 2
    assert await stored_user_texts(stores) == ["a very long message"]


async def test_a_too_long_error_is_its_own_kind(server, provider) -> None:
    server.reply_status(400, body=LLAMA_TOO_LONG)

    with pytest.raises(ProviderRequestTooLong):
        await provider.complete(ask())


async def test_a_failing_model_server_says_it_failed(server, linked, stores) -> None:
    server.reply_status(500, body=LLAMA_NULL_CONTENT)

    reply = await say(linked, "hi")

    assert reply.text == copy.PROVIDER_SERVER_FAILED
    assert await stored_user_texts(stores) == ["hi"]


async def test_an_unreachable_model_server_says_unreachable(stores, clock, passphrase_hash, sleep) -> None:
    provider = OpenAICompatibleProvider(f"http://127.0.0.1:{closed_port()}/v1", timeout=5.0, max_retries=1)
    provider._sleep = sleep
    companion = build_companion(stores, provider, CompanionConfig(passphrase_hash=passphrase_hash), clock=clock)
    await companion.start()
    try:
        reply = await say(companion, "anyone?")
    finally:
        await companion.drain()
        await provider.aclose()

    assert reply.text == copy.PROVIDER_FAILED
    assert "couldn't reach" in reply.text
    assert await stored_user_texts(stores) == ["anyone?"]


def test_every_failure_has_its_own_words() -> None:
    words = {copy.PROVIDER_FAILED, copy.PROVIDER_KEY_REFUSED, copy.PROVIDER_TOO_LONG, copy.PROVIDER_SERVER_FAILED}
    assert len(words) == 4


async def test_a_llama_cpp_reply_with_the_legacy_function_call_beside_tool_calls_runs_the_tool(
    server, linked, stores
) -> None:
    # The shape llama.cpp's server answers with: `content: null`, `tool_calls`, and the
    # deprecated `function_call` repeating the first call (recorded from its documented output).
    call = {"id": "call_l", "type": "function", "function": {"name": "current_time", "arguments": "{}"}}
    body = completion_json(None, tool_calls=[call])
    body["choices"][0]["message"]["function_call"] = {"name": "current_time", "arguments": "{}"}
    server.script(body)
    server.reply_text("Thursday, as it happens.")

    reply = await say(linked, "what day is it?")

    assert reply.text == "Thursday, as it happens."
    tool = server.requests[1]["messages"][-1]
    assert tool["role"] == "tool" and tool["tool_call_id"] == "call_l" and not tool["content"].startswith("error")


# --- logs ------------------------------------------------------------------------------


async def test_no_model_produced_string_of_a_private_turn_reaches_the_log_at_any_level(server, linked, caplog) -> None:
    # Everything the server makes up for a private turn is a canary: ids, model name, finish reason, text.
    canaries = {
        "completion": "chatcmpl-LOGCANARY-completion",
        "call": "call-LOGCANARY-toolcall",
        "model": "model-LOGCANARY-name",
        "finish": "finish-LOGCANARY-reason",
        "text": "LOGCANARY the words of a private answer",
    }
    call = {"id": canaries["call"], "type": "function", "function": {"name": "current_time", "arguments": "{}"}}
    asking = completion_json(None, tool_calls=[call], model=canaries["model"])
    answer = completion_json(canaries["text"], model=canaries["model"])
    for body in (asking, answer):
        body["id"] = canaries["completion"]
    answer["choices"][0]["finish_reason"] = canaries["finish"]
    await say(linked, f"/private {PASSPHRASE}")
    server.script(asking, answer)
    caplog.set_level(logging.DEBUG)

    with logging_policy("DEBUG"):  # COMPANION_LOG_LEVEL=DEBUG: every logger at DEBUG but the libraries' floors
        reply = await say(linked, "what time is it?")

    assert reply.text == canaries["text"] and not server.pending  # the private turn ran, tool call and all
    lines = "\n".join(record.getMessage() for record in caplog.records)
    assert "adapters.llm.openai_compat" in {record.name for record in caplog.records}  # the provider logged
    for canary in canaries.values():
        assert canary not in lines
