"""The provider and the Companion against the recorded shapes of OpenAI, Ollama and vLLM (issue 11, items 1, 8).

The fake server is strict (content must be a string, tools count only with a `tool_choice`) and replays the
bodies of tests/helpers/server_shapes.py, each with its source. llama.cpp's shapes are in test_model_link.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from adapters.llm.openai_compat import OpenAICompatibleProvider
from core.values import copy
from core.values.errors import ProviderRejected, ProviderRequestTooLong
from tests.adapters.test_openai_provider import WEATHER, ask
from tests.helpers.chat import all_rows, say
from tests.helpers.fake_openai import FakeOpenAIServer, ScriptedResponse
from tests.helpers.server_shapes import (
    OLLAMA,
    OLLAMA_MODEL_MISSING,
    SERVERS,
    VLLM,
    VLLM_AUTO_TOOL_CHOICE_DISABLED,
    VLLM_TOO_LONG_FLAT,
    ServerShapes,
)

BY_NAME = pytest.mark.parametrize("shapes", SERVERS, ids=[s.name for s in SERVERS])
WITH_TOO_LONG = [s for s in SERVERS if s.too_long is not None]


@pytest.fixture
async def server() -> AsyncIterator[FakeOpenAIServer]:
    async with FakeOpenAIServer(strict=True) as fake:
        yield fake


async def stored_user_texts(stores) -> list[str]:
    return [row[0] for row in await all_rows(stores, "SELECT text FROM messages WHERE role = 'user'")]


# --- the provider reads each shape ------------------------------------------------------------------


@BY_NAME
async def test_a_plain_reply_is_read(server, provider, shapes: ServerShapes) -> None:
    shapes.script_plain(server)

    completion = await provider.complete(ask())

    usage = shapes.plain["usage"]
    assert completion.text == shapes.plain_text
    assert completion.tool_calls == ()
    assert (completion.prompt_tokens, completion.completion_tokens) == (
        usage["prompt_tokens"],
        usage["completion_tokens"],
    )
    assert not completion.truncated


@BY_NAME
async def test_a_tool_call_reply_is_read(server, provider, shapes: ServerShapes) -> None:
    shapes.script_tool_call(server)

    completion = await provider.complete(ask(tools=(WEATHER,)))  # strict: tool calls need tools offered

    (call,) = completion.tool_calls
    assert (call.id, call.name, call.arguments) == (shapes.call_id, "current_time", "{}")
    assert completion.text == ""  # null (OpenAI, vLLM) and "" (Ollama) alike


@BY_NAME
async def test_a_length_reply_is_marked_truncated(server, provider, shapes: ServerShapes) -> None:
    shapes.script_length(server)

    completion = await provider.complete(ask())

    assert completion.truncated and completion.text == shapes.length_text


# --- the whole turn, end to end ---------------------------------------------------------------------


@BY_NAME
async def test_the_whole_tool_loop_runs(server, linked, stores, shapes: ServerShapes) -> None:
    shapes.script_tool_call(server)
    shapes.script_plain(server)

    reply = await say(linked, "what time is it?")

    assert reply.text == shapes.plain_text
    assert len(server.requests) == 2
    assert server.tools_in_effect == [True, True]
    assert all(r["tool_choice"] == "auto" for r in server.requests)
    sent = server.requests[1]["messages"]
    assistant, tool = sent[-2], sent[-1]
    assert assistant["role"] == "assistant" and assistant["content"] == ""
    assert [c["id"] for c in assistant["tool_calls"]] == [shapes.call_id]
    assert assistant["tool_calls"][0]["function"] == {"name": "current_time", "arguments": "{}"}
    assert tool["role"] == "tool" and tool["tool_call_id"] == shapes.call_id
    assert isinstance(tool["content"], str) and tool["content"] and not tool["content"].startswith("error")
    assert all(isinstance(m["content"], str) for m in sent)
    assert await stored_user_texts(stores) == ["what time is it?"]


@BY_NAME
async def test_a_reply_cut_off_at_max_tokens_carries_the_marker(server, linked, shapes: ServerShapes) -> None:
    shapes.script_length(server)

    reply = await say(linked, "tell me a story")

    assert reply.text == shapes.length_text + copy.CUT_OFF_MARKER


@BY_NAME
async def test_a_refused_api_key_is_named_and_not_retried(server, linked, stores, sleep, shapes: ServerShapes) -> None:
    shapes.script_key_refused(server)
    shapes.script_plain(server)  # never asked for

    reply = await say(linked, "hello?")

    assert reply.text == copy.PROVIDER_KEY_REFUSED
    assert "COMPANION_LLM_API_KEY" in reply.text
    assert len(server.requests) == 1 and sleep.delays == []
    assert await stored_user_texts(stores) == ["hello?"]


@pytest.mark.parametrize("shapes", WITH_TOO_LONG, ids=[s.name for s in WITH_TOO_LONG])
async def test_a_context_overflow_is_request_too_long(server, provider, shapes: ServerShapes) -> None:
    shapes.script_too_long(server)

    with pytest.raises(ProviderRequestTooLong):
        await provider.complete(ask())

    assert len(server.requests) == 1


async def test_vllms_older_flat_error_body_is_request_too_long_as_well(server, provider) -> None:
    server.script(ScriptedResponse(status=400, body=VLLM_TOO_LONG_FLAT))

    with pytest.raises(ProviderRequestTooLong):
        await provider.complete(ask())


@pytest.mark.parametrize("shapes", WITH_TOO_LONG, ids=[s.name for s in WITH_TOO_LONG])
async def test_a_context_overflow_is_retried_once_with_half_the_window(
    server, linked, stores, shapes: ServerShapes
) -> None:
    shapes.script_too_long(server)
    shapes.script_plain(server)

    reply = await say(linked, "a long message")

    assert reply.text == shapes.plain_text
    assert len(server.requests) == 2
    assert await stored_user_texts(stores) == ["a long message"]


@pytest.mark.parametrize("shapes", WITH_TOO_LONG, ids=[s.name for s in WITH_TOO_LONG])
async def test_a_context_overflow_twice_says_too_long(server, linked, stores, shapes: ServerShapes) -> None:
    shapes.script_too_long(server)
    shapes.script_too_long(server)

    reply = await say(linked, "a very long message")

    assert reply.text == copy.PROVIDER_TOO_LONG
    assert len(server.requests) == 2
    assert await stored_user_texts(stores) == ["a very long message"]


async def test_ollama_documents_no_overflow_error_its_truncated_prompt_is_an_ordinary_reply(server, linked) -> None:
    # Ollama drops the oldest messages itself and answers 200 (see OLLAMA_TOO_LONG): nothing to retry.
    assert OLLAMA.too_long is None
    OLLAMA.script_plain(server)

    reply = await say(linked, "a long message")

    assert reply.text == OLLAMA.plain_text
    assert len(server.requests) == 1


async def test_ollamas_wrapped_error_for_a_missing_model_is_a_rejection_not_retried(server, provider, sleep) -> None:
    server.script(ScriptedResponse(status=404, body=OLLAMA_MODEL_MISSING))
    OLLAMA.script_plain(server)  # never asked for

    with pytest.raises(ProviderRejected) as caught:
        await provider.complete(ask())

    assert caught.value.status == 404
    assert "not found, try pulling it first" in str(caught.value)  # the operator's log says what to do
    assert len(server.requests) == 1 and sleep.delays == []


# --- vLLM started without --enable-auto-tool-choice -------------------------------------------------


async def test_a_vllm_without_auto_tool_choice_still_answers_without_tools(server, linked, stores) -> None:
    # Such a server refuses every request that offers tools with tool_choice "auto" (400). Failing
    # every turn would lock the companion out of its model; it answers without tools instead.
    server.script(ScriptedResponse(status=400, body=VLLM_AUTO_TOOL_CHOICE_DISABLED))
    VLLM.script_plain(server)

    reply = await say(linked, "hello?")

    assert reply.text == VLLM.plain_text
    first, second = server.requests
    assert first["tool_choice"] == "auto" and first["tools"]
    assert "tools" not in second and "tool_choice" not in second
    assert second["messages"] == first["messages"]


async def test_after_a_refused_tool_choice_no_more_tools_are_sent(server, linked) -> None:
    server.script(ScriptedResponse(status=400, body=VLLM_AUTO_TOOL_CHOICE_DISABLED))
    VLLM.script_plain(server)
    VLLM.script_plain(server)

    await say(linked, "hello?")
    reply = await say(linked, "and again?")

    assert reply.text == VLLM.plain_text
    assert len(server.requests) == 3
    assert "tools" not in server.requests[2]


async def test_a_400_that_is_not_about_tool_choice_is_not_retried_without_tools(server, provider) -> None:
    server.reply_status(400, message="temperature must be between 0 and 2")
    VLLM.script_plain(server)  # never asked for

    with pytest.raises(ProviderRejected):
        await provider.complete(ask(tools=(WEATHER,)))

    assert len(server.requests) == 1


async def test_a_tool_choice_refusal_without_tools_offered_is_an_ordinary_rejection(server) -> None:
    provider = OpenAICompatibleProvider(server.base_url, timeout=5.0)
    server.script(ScriptedResponse(status=400, body=VLLM_AUTO_TOOL_CHOICE_DISABLED))
    try:
        with pytest.raises(ProviderRejected):
            await provider.complete(ask())
    finally:
        await provider.aclose()

    assert len(server.requests) == 1
