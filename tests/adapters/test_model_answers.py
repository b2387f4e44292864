"""What the person sees when the model's answer or the server's tool support is not what a reply needs
(issue 25): tool syntax never shown as an answer, and a server without tools still answers."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import pytest

from adapters.llm.openai_compat import OpenAICompatibleProvider
from bot.bootstrap import build_companion
from core.turn.config import CompanionConfig
from core.values import copy
from core.values.errors import ProviderRejected, ProviderToolsUnsupported
from tests.adapters.test_openai_provider import WEATHER, ask
from tests.helpers.chat import all_rows, say
from tests.helpers.fake_openai import FakeOpenAIServer, ScriptedResponse
from tests.helpers.server_shapes import VLLM_AUTO_TOOL_CHOICE_DISABLED

# What the known servers send back as text when their parser missed the model's call (the first is
# what llama-cpp-python's chatml-function-calling handed back from SmolLM2-135M in issue 25's run).
UNPARSED_CALLS = {
    "llama-cpp-python chatml-function-calling": 'functions.remember: { "text": "I like green tea" }',
    "the same, without arguments": "functions.list_goals:",
    "two calls in a row": 'functions.list_goals:\nfunctions.remember:\n{"text": "tea"}',
    "Hermes / Qwen": '<tool_call>\n{"name": "remember", "arguments": {"text": "tea"}}\n</tool_call>',
    "Llama 3.1 built-in": '<|python_tag|>{"name": "remember", "parameters": {"text": "tea"}}<|eom_id|>',
    "Llama 3.1 custom": '<function=remember>{"text": "tea"}</function>',
    "Llama 3.2 pythonic": '[remember(text="tea")]',
    "Mistral": '[TOOL_CALLS] [{"name": "remember", "arguments": {"text": "tea"}}]',
    "JSON in a fence": '```json\n{"name": "remember", "arguments": {"text": "tea"}}\n```',
    "cut off at max_tokens": 'functions.remember: { "text": "I like gr',
}
# Ollama with a model whose template has no tools (recorded in ollama/ollama#6027, 400).
OLLAMA_NO_TOOLS = {
    "error": {"message": "stablelm2:latest does not support tools", "type": "api_error", "param": None, "code": None}
}
# llama.cpp's server started without --jinja (its handler throws a runtime_error: 500, server_error).
LLAMA_CPP_NO_JINJA = {"error": {"code": 500, "message": "tools param requires --jinja flag", "type": "server_error"}}
REFUSALS = {"ollama": (400, OLLAMA_NO_TOOLS), "llama.cpp": (500, LLAMA_CPP_NO_JINJA)}


@pytest.fixture
async def server() -> AsyncIterator[FakeOpenAIServer]:
    async with FakeOpenAIServer(strict=True) as fake:
        yield fake


async def stored_texts(stores) -> list[str]:
    return [row[0] for row in await all_rows(stores, "SELECT text FROM messages")]


# --- never tool syntax as an answer ------------------------------------------------------------


@pytest.mark.parametrize("shape", sorted(UNPARSED_CALLS))
async def test_an_answer_that_is_only_an_unparsed_tool_call_is_asked_again_without_tools(
    server, linked, stores, shape
) -> None:
    server.reply_text(UNPARSED_CALLS[shape])
    server.reply_text("Noted: you like green tea.")

    reply = await say(linked, "I like green tea")

    assert reply.text == "Noted: you like green tea."
    first, second = server.requests
    assert first["tools"] and "tools" not in second and "tool_choice" not in second
    assert second["messages"] == first["messages"]  # the syntax is not fed back as the model's words
    assert not any(UNPARSED_CALLS[shape] in text for text in await stored_texts(stores))


async def test_tool_syntax_again_without_tools_gives_an_honest_line_and_stores_no_syntax(
    server, linked, stores
) -> None:
    server.reply_text('functions.remember: { "text": "tea" }')
    server.reply_text("functions.remember:")

    reply = await say(linked, "I like green tea")

    assert reply.text == copy.MODEL_ANSWER_UNUSABLE
    assert len(server.requests) == 2
    assert not any("functions." in text for text in await stored_texts(stores))
    assert "I like green tea" in await stored_texts(stores)  # the person's message is kept


async def test_an_empty_answer_while_tools_were_offered_is_asked_again_without_tools(server, linked) -> None:
    server.reply_text("")
    server.reply_text("Hello! I am your companion.")

    reply = await say(linked, "hello")

    assert reply.text == "Hello! I am your companion."
    assert [bool(r.get("tools")) for r in server.requests] == [True, False]


async def test_tool_syntax_after_a_real_tool_round_is_asked_again_without_tools(server, linked) -> None:
    server.reply_tool_call("current_time", "{}", call_id="call_t")
    server.reply_text('<tool_call>\n{"name": "current_time", "arguments": {}}\n</tool_call>')
    server.reply_text("It is Thursday.")

    reply = await say(linked, "what day is it?")

    assert reply.text == "It is Thursday."
    assert [bool(r.get("tools")) for r in server.requests] == [True, True, False]
    assert server.requests[2]["messages"][-1]["role"] == "tool"  # the tool's result is kept for the answer


@pytest.mark.parametrize(
    "text",
    [
        "Sure! I can remember that you like tea.",
        "functions.remember: is how I would store it, but I'd rather just tell you: tea is lovely.",
        'You could write {"name": "tea"} in your notes.',
        "print(remember)",
    ],
)
async def test_a_reply_that_only_mentions_a_tool_is_sent_as_it_is(server, linked, text) -> None:
    server.reply_text(text)

    reply = await say(linked, "hello")

    assert reply.text == text
    assert len(server.requests) == 1


# --- a server that takes no tools ------------------------------------------------------------------


@pytest.mark.parametrize("server_kind", sorted(REFUSALS))
async def test_a_server_refusing_tools_is_answered_without_them_from_then_on_with_one_warning(
    server, linked, caplog, server_kind
) -> None:
    status, body = REFUSALS[server_kind]
    server.script(ScriptedResponse(status=status, body=body))
    server.reply_text("Hello there.")
    server.reply_text("Hello again.")

    with caplog.at_level(logging.WARNING):
        first = await say(linked, "hello?")
        second = await say(linked, "and again?")

    assert (first.text, second.text) == ("Hello there.", "Hello again.")
    assert server.requests[0]["tools"]
    assert all("tools" not in r for r in server.requests[1:])
    warnings = [r for r in caplog.records if "refuses requests that offer tools" in r.getMessage()]
    assert len(warnings) == 1


async def test_help_says_memory_works_through_the_commands_once_tools_were_refused(server, linked) -> None:
    before = await say(linked, "/help")
    server.script(ScriptedResponse(status=400, body=OLLAMA_NO_TOOLS))
    server.reply_text("Hello there.")
    await say(linked, "hello?")

    after = await say(linked, "/help")

    assert copy.TOOLS_OFF_NOTE not in before.text
    assert copy.TOOLS_OFF_NOTE in after.text


async def test_with_tools_off_by_setting_no_request_offers_tools_and_help_says_so(
    server, stores, clock, passphrase_hash, provider
) -> None:
    companion = build_companion(
        stores, provider, CompanionConfig(passphrase_hash=passphrase_hash, tools=False), clock=clock
    )
    await companion.start()
    try:
        await say(companion, "remember that I like tea")
        help_reply = await say(companion, "/help")
        remembered = await say(companion, "/remember I like tea")
    finally:
        await companion.drain()

    assert "tools" not in server.requests[0] and "tool_choice" not in server.requests[0]
    assert copy.TOOLS_OFF_NOTE in help_reply.text
    assert "tea" in remembered.text  # the command works without the model


def test_the_llm_tools_setting_reaches_the_companion() -> None:
    from bot.bootstrap import companion_config
    from bot.settings import Settings

    assert companion_config(Settings(_env_file=None, llm_tools="false")).tools is False
    assert companion_config(Settings(_env_file=None)).tools is True


async def test_a_tools_refusal_is_its_own_kind_only_when_tools_were_offered(server, provider) -> None:
    server.script(ScriptedResponse(status=400, body=VLLM_AUTO_TOOL_CHOICE_DISABLED))
    server.script(ScriptedResponse(status=400, body=OLLAMA_NO_TOOLS))

    with pytest.raises(ProviderToolsUnsupported):
        await provider.complete(ask(tools=(WEATHER,)))
    with pytest.raises(ProviderRejected) as plain:
        await provider.complete(ask())

    assert not isinstance(plain.value, ProviderToolsUnsupported)


async def test_a_forced_tool_is_sent_as_a_named_tool_choice(server) -> None:
    from dataclasses import replace

    provider = OpenAICompatibleProvider(server.base_url, timeout=5.0)
    try:
        await provider.complete(replace(ask(tools=(WEATHER,)), force_tool="get_weather"))
    finally:
        await provider.aclose()

    assert server.requests[0]["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
