"""A streamed request that fails before anything of its answer was shown (issue 29, point 1): the real
OpenAICompatibleProvider and httpx against the fake model server on 127.0.0.1.

It is answered by the same request unstreamed (nothing was shown, so nothing doubles); the shape that
failed (offering tools, or not) is not streamed again this run, after one warning naming what to set,
and the `/context` body says so; once anything was shown (words or a tool call's start) nothing is
asked again; headers then silence until the read timeout are not asked again either (the deadline is
spent); and what a private request taught the provider shapes private requests only (point 5).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator

import pytest

from adapters.llm.openai_compat import OpenAICompatibleProvider
from core.values.errors import ProviderRequestTooLong, ProviderServerError, ProviderUnavailable
from core.values.model import ChatMessage, CompletionRequest, ImageInput, Partial
from tests.adapters.test_model_streaming import RECALL, Sink, streamed, warnings_of
from tests.adapters.test_openai_provider import ask
from tests.helpers.fake_openai import FakeOpenAIServer, ScriptedResponse
from tests.helpers.media import png_with
from tests.helpers.stream_shapes import OPENAI_ERROR_MIDSTREAM, OPENAI_TEXT, OPENAI_TOOL_CALL, stream_unsupported


@pytest.fixture
async def server() -> AsyncIterator[FakeOpenAIServer]:
    async with FakeOpenAIServer(strict=True) as fake:  # strict as llama.cpp's server
        yield fake


def shapes(server: FakeOpenAIServer) -> list[tuple[bool, bool]]:
    """Each request the server got: (streamed, offering tools)."""
    return [(streamed(body), bool(body.get("tools"))) for body in server.requests]


def with_tools(text: str = "hello", **kwargs: object) -> CompletionRequest:
    return ask(text, tools=(RECALL,), **kwargs)


async def answers(provider: OpenAICompatibleProvider, *requests: CompletionRequest) -> tuple[list[str], Sink]:
    """Each request completed in turn with one partial sink: the answers' texts, and the sink."""
    sink = Sink()
    return [(await provider.complete(request, partial=sink)).text for request in requests], sink


# --- llama-cpp-python's chatml-function-calling: it streams only without tools ----------------------------


async def test_a_server_that_streams_only_without_tools_answers_every_request_and_streams_tools_no_more(
    server, provider, caplog
) -> None:
    server.streams_with_tools = False
    said = ["answered unstreamed", "answered unstreamed again", "streamed, without tools"]
    server.script(*said)
    caplog.set_level(logging.DEBUG)

    texts, sink = await answers(provider, with_tools(), with_tools(), ask())

    assert texts == said
    # Streamed with tools once; the same request unstreamed; tools never streamed again; without, streamed.
    assert shapes(server) == [(True, True), (False, True), (False, True), (True, False)]
    assert sink.texts == ["streamed, ", "streamed, without ", "streamed, without tools"]  # the third one only
    [warning] = warnings_of(caplog)
    assert "does not stream a request that offers tools" in warning
    assert "COMPANION_LLM_TOOLS=false" in warning and "COMPANION_STREAM_EDIT_SECONDS=off" in warning
    assert not provider.streams(tools=True) and provider.streams(tools=False)
    # What /context shows as the next request says the same of each shape.
    assert "stream" not in json.loads(await provider.request_body(with_tools(), streamed=True))
    assert json.loads(await provider.request_body(ask(), streamed=True))["stream"] is True


async def test_the_fake_llama_server_ends_its_stream_with_the_bytes_the_real_one_sends(server) -> None:
    # Measured on llama-cpp-python 0.3.36: 200 text/event-stream, chunked, the terminating chunk at once.
    server.streams_with_tools = False
    body = json.dumps(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "recall", "parameters": {"type": "object"}}}],
            "tool_choice": "auto",
            "stream": True,
        }
    ).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        writer.write(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        head = (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)).decode().lower()
        rest = await asyncio.wait_for(reader.readexactly(5), 10)
    finally:
        writer.close()
    assert head.startswith("http/1.1 200 ")
    assert "content-type: text/event-stream" in head and "transfer-encoding: chunked" in head
    assert "connection: close" not in head  # kept alive
    assert rest == b"0\r\n\r\n"


# --- every failure before anything was shown: the same request, unstreamed -------------------------------

ERROR_EVENT = OPENAI_ERROR_MIDSTREAM.events[-1]
BEFORE_ANYTHING_WAS_SHOWN = {
    "no-event": lambda s: s.reply_stream([], done=False),
    "done-alone": lambda s: s.reply_stream([], done=True),
    "a-role-then-the-end": lambda s: s.reply_stream([OPENAI_TEXT.events[0]], done=False),
    "an-error-event": lambda s: s.reply_stream([OPENAI_TEXT.events[0], ERROR_EVENT], done=False),
    "an-error-field": lambda s: s.reply_stream([b'error: {"code":500,"message":"boom","type":"server_error"}\n\n']),
    "no-chunk": lambda s: s.reply_stream(['{"choices": [{"delta": ']),
    "closed-after-headers": lambda s: setattr(s, "stream_closed_after_headers", True),
    "a-500": lambda s: setattr(s, "stream_refusal", ScriptedResponse(status=500, body={"error": {"message": "boom"}})),
    "a-400": lambda s: setattr(s, "stream_refusal", stream_unsupported()),
}


@pytest.mark.parametrize("failure", BEFORE_ANYTHING_WAS_SHOWN, ids=list(BEFORE_ANYTHING_WAS_SHOWN))
async def test_a_streamed_request_failing_before_anything_was_shown_is_answered_unstreamed_once(
    server, provider, caplog, failure
) -> None:
    BEFORE_ANYTHING_WAS_SHOWN[failure](server)
    server.script("answered unstreamed", "and the next one too")
    caplog.set_level(logging.DEBUG)

    texts, sink = await answers(provider, ask(), ask())

    assert texts == ["answered unstreamed", "and the next one too"]
    assert shapes(server) == [(True, False), (False, False), (False, False)]
    assert sink.partials == []
    [warning] = warnings_of(caplog)
    assert "does not stream" in warning and "COMPANION_STREAM_EDIT_SECONDS=off" in warning
    assert not provider.streams(tools=False) and provider.streams(tools=True)


@pytest.mark.parametrize("failure", ["a-500", "too-long"])
async def test_when_the_unstreamed_request_fails_too_streaming_is_not_held_against_the_server(
    server, provider, caplog, failure
) -> None:
    if failure == "a-500":
        server.reply_stream([], done=False)
        server.reply_status(500, message="the model crashed")
        raised: type[Exception] = ProviderServerError
    else:
        # llama-cpp-python: a request over the window streams no event, and unstreamed is refused 400.
        server.window_bytes = 10
        raised = ProviderRequestTooLong  # for the core's retry with half the window
    server.reply_text("streamed again")
    caplog.set_level(logging.DEBUG)

    with pytest.raises(raised):
        await provider.complete(ask(), partial=Sink())
    server.window_bytes = None
    later = await provider.complete(ask(), partial=Sink())

    assert later.text == "streamed again"
    assert shapes(server) == [(True, False), (False, False), (True, False)]
    assert provider.streams(tools=False) and warnings_of(caplog) == []


# --- once anything was shown, never again ---------------------------------------------------------------


async def test_a_stream_broken_after_a_tool_call_began_is_not_asked_again(server, provider) -> None:
    OPENAI_TOOL_CALL.script(server, cut_after=3)
    server.reply_text("never asked for")
    sink = Sink()

    with pytest.raises(ProviderUnavailable, match="broke off its answer"):
        await provider.complete(with_tools(), partial=sink)

    assert sink.partials == [Partial("", calling=True)]  # shown: the constant line of a tool call
    assert len(server.requests) == 1 and server.pending == 1
    assert provider.streams(tools=True)


async def test_headers_then_silence_until_the_read_timeout_is_unavailable_and_not_asked_again(server) -> None:
    # The headers go out at once; b"" writes nothing; the first words would come 1.5 s later.
    server.reply_stream([b"", *OPENAI_TEXT.events], pause=1.5)
    server.reply_text("never asked for")
    provider = OpenAICompatibleProvider(server.base_url, model="test-model", timeout=0.5, max_retries=0)
    try:
        with pytest.raises(ProviderUnavailable, match=r"stopped sending its answer for 0\.5 s"):
            await provider.complete(ask(), partial=Sink())
        assert len(server.requests) == 1 and server.pending == 1
        assert provider.streams(tools=False)  # a slow model looks the same: not held against streaming
    finally:
        await provider.aclose()


# --- point 5: what a private request taught shapes private requests only -----------------------------------


def with_an_image(*, private: bool) -> CompletionRequest:
    image = ImageInput("image/png", png_with())
    return CompletionRequest(
        (ChatMessage("system", "be kind"), ChatMessage("user", "what is this?", images=(image,))),
        tools=(RECALL,),
        private=private,
    )


async def test_what_a_private_request_taught_the_provider_shapes_private_requests_only(
    server, provider, caplog
) -> None:
    fresh = OpenAICompatibleProvider(server.base_url, api_key="sk-test", model="test-model", timeout=10.0)
    server.streams_with_tools = False
    server.accept_images = False  # a text-only model behind COMPANION_LLM_VISION=true
    caplog.set_level(logging.DEBUG)
    try:
        untaught = await fresh.request_body(with_an_image(private=False), streamed=True)

        await provider.complete(with_an_image(private=True), partial=Sink())
        # The image refused (400), streamed again without it, its stream ended with no event, then unstreamed.
        assert len(server.requests) == 3
        await provider.complete(with_an_image(private=True), partial=Sink())
        assert len(server.requests) == 4  # a private request does not fail the same way twice
        assert shapes(server)[-1] == (False, True) and "image_url" not in server.raw_requests[-1].decode()

        # A normal request is the one a provider that never met a private request would send.
        assert await provider.request_body(with_an_image(private=False), streamed=True) == untaught
        assert provider.streams(tools=True) and provider.images_accepted
        sent = len(server.requests)
        await provider.complete(with_an_image(private=False), partial=Sink())
        assert server.raw_requests[sent] == untaught
    finally:
        await fresh.aclose()
    # What normal requests taught, private ones read too; one warning for each thing refused, whoever met it.
    assert await provider.request_body(with_an_image(private=True), streamed=True) == await provider.request_body(
        with_an_image(private=False), streamed=True
    )
    assert len(warnings_of(caplog)) == 2
