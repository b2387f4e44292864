"""The model link streaming (issue 24, point 1): the real OpenAICompatibleProvider and httpx against the
fake model server on 127.0.0.1, replaying the recorded streams of tests/helpers/stream_shapes.py.

Each stream is assembled into the completion it is; the partial sink sees the text grow and a tool call
begin, never its arguments; a server that does not stream (or refuses a streamed request that it answers
without streaming) is used without streaming for the rest of the run after one warning; a stream that
fails is a ProviderError and is never asked again (its answer may be on screen already); the timeout
bounds each wait between events, not the answer; and nothing the model wrote reaches a log line or an
exception message.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import AsyncIterator

import pytest

from adapters.llm.openai_compat import OpenAICompatibleProvider
from bot.bootstrap import normal_preview
from core.delivery.streams import StreamPacing
from core.turn.companion import Companion
from core.values import copy
from core.values.errors import (
    ProviderBadResponse,
    ProviderError,
    ProviderRejected,
    ProviderRequestTooLong,
    ProviderUnavailable,
)
from core.values.model import (
    ChatMessage,
    CompletionRequest,
    ConversationKey,
    ImageInput,
    InboundMessage,
    Partial,
    Reply,
    ToolSpec,
)
from tests.adapters.test_openai_provider import ask, full_text
from tests.helpers.boot import USER, boot_companion
from tests.helpers.chat import all_rows
from tests.helpers.fake_openai import FakeOpenAIServer, ScriptedResponse, completion_json, stream_completion
from tests.helpers.fakes import FakeStreamer
from tests.helpers.logs import logging_policy
from tests.helpers.media import png_with
from tests.helpers.stream_shapes import (
    ANSWERS,
    CALLS,
    FAILURES,
    KEEPALIVE,
    LLAMA_ERROR_FIELD,
    LLAMA_TOO_LONG_FIELD,
    OLLAMA_ERROR_MIDSTREAM,
    OLLAMA_TOOL_CALLS_INDEX_0,
    OPENAI_TEXT,
    TEXT_ANSWERS,
    VLLM_090_TEXT,
    StreamShape,
    stream_unsupported,
)
from tests.helpers.waiting import wait_for

RECALL = ToolSpec(
    name="recall",
    description="Search earlier conversations, notes and memory.",
    parameters={"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
)
BY_NAME = pytest.mark.parametrize("shape", ANSWERS, ids=[s.name for s in ANSWERS])
CANARY = "STREAMCANARY-7c1e"
PROVIDER_LOG = "adapters.llm.openai_compat"
PROVIDER_LOGS = (PROVIDER_LOG, "adapters.llm.learned")  # the provider, and what it learns of its server


@pytest.fixture
async def server() -> AsyncIterator[FakeOpenAIServer]:
    async with FakeOpenAIServer(strict=True) as fake:  # strict as llama.cpp's server
        yield fake


class Sink:
    """A partial sink that records every partial answer, and how many events the server had sent then."""

    def __init__(self, server: FakeOpenAIServer | None = None) -> None:
        self.server = server
        self.partials: list[Partial] = []
        self.sent_then: list[int] = []

    async def __call__(self, partial: Partial) -> None:
        self.partials.append(partial)
        if self.server is not None:
            self.sent_then.append(self.server.events_sent)

    @property
    def texts(self) -> list[str]:
        return [p.text for p in self.partials]


def asked(shape: StreamShape):
    return ask(tools=(RECALL,)) if shape.calls else ask()


def streamed(body: dict) -> bool:
    return body.get("stream") is True and body.get("stream_options") == {"include_usage": True}


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name in PROVIDER_LOGS and r.levelno >= logging.WARNING]


# --- each recorded stream is the completion it is ----------------------------------------------------------


@BY_NAME
async def test_each_recorded_stream_is_assembled_into_its_completion(server, provider, shape: StreamShape) -> None:
    shape.script(server)

    completion = await provider.complete(asked(shape), partial=Sink())

    assert completion.text == shape.text
    assert [(c.id, c.name, c.arguments) for c in completion.tool_calls] == list(shape.calls)
    assert completion.truncated == (shape.finish == "length")
    assert (completion.prompt_tokens, completion.completion_tokens) == shape.usage
    assert streamed(server.requests[0]) and len(server.requests) == 1
    assert provider.streams(tools=bool(shape.calls))


@pytest.mark.parametrize("shape", TEXT_ANSWERS, ids=[s.name for s in TEXT_ANSWERS])
async def test_the_partial_text_grows_delta_by_delta(server, provider, shape: StreamShape) -> None:
    sink = Sink()
    shape.script(server)

    await provider.complete(ask(), partial=sink)

    grown = list(itertools.accumulate(shape.deltas))
    assert sink.texts == grown and grown[-1] == shape.text
    assert not any(p.calling for p in sink.partials)


@pytest.mark.parametrize("shape", CALLS, ids=[s.name for s in CALLS])
async def test_a_tool_call_begins_once_and_its_arguments_never_reach_the_sink(
    server, provider, shape: StreamShape
) -> None:
    sink = Sink()
    shape.script(server)

    completion = await provider.complete(asked(shape), partial=sink)

    assert completion.tool_calls
    assert sink.partials == [Partial("", calling=True)]  # once, when the first call began; no name, no arguments


async def test_an_empty_list_of_tool_calls_beside_text_is_no_tool_call(server, provider) -> None:
    # vLLM 0.9.0 sends `"tool_calls": []` with every text delta.
    sink = Sink()
    VLLM_090_TEXT.script(server)

    completion = await provider.complete(ask(tools=(RECALL,)), partial=sink)

    assert completion.tool_calls == () and completion.text == VLLM_090_TEXT.text
    assert not any(p.calling for p in sink.partials) and sink.texts[-1] == VLLM_090_TEXT.text


async def test_ollamas_calls_all_numbered_0_stay_two_calls(server, provider) -> None:
    OLLAMA_TOOL_CALLS_INDEX_0.script(server)

    completion = await provider.complete(ask(tools=(RECALL,)), partial=Sink())

    assert [(c.id, c.arguments) for c in completion.tool_calls] == [
        ("call_wteop8bt", '{"query":"soup recipe"}'),
        ("call_rk2xye1l", '{"query":"lentils"}'),
    ]


async def test_keep_alive_comments_are_skipped(server, provider) -> None:
    server.reply_stream([KEEPALIVE, *OPENAI_TEXT.events, KEEPALIVE])

    completion = await provider.complete(ask(), partial=Sink())

    assert completion.text == OPENAI_TEXT.text


async def test_a_stream_that_ended_as_an_answer_leaves_its_connection_for_the_next_request(server, provider) -> None:
    """`data: [DONE]` is not the body's end: the link reads on to it, so that the pool keeps the connection
    (a connection made again every turn costs a handshake a turn, a TLS one with a remote server)."""
    for number in range(3):
        server.reply_text(f"answer {number}")
        completion = await provider.complete(ask(), partial=Sink())
        assert completion.text == f"answer {number}"

    assert all(streamed(body) for body in server.requests)
    assert len(server.connections) == 3 and len(set(server.connections)) == 1


async def test_a_stream_that_goes_on_after_its_answer_is_answered_and_its_connection_dropped(server, provider) -> None:
    """What comes after `data: [DONE]` is read up to a bound: a server that goes on sending keeps
    neither the answer waiting nor its connection in the pool."""
    chunks = tuple(json.dumps(chunk) for chunk in stream_completion(completion_json("the answer"), include_usage=True))
    more = b": " + b"x" * 100_000 + b"\n\n"  # past the 64 KiB read after the answer
    server.script(ScriptedResponse(events=(*chunks, b"data: [DONE]\n\n", more), pause=0.0))
    completion = await provider.complete(ask(), partial=Sink())
    assert completion.text == "the answer"

    server.reply_text("the next answer")
    assert (await provider.complete(ask(), partial=Sink())).text == "the next answer"
    assert len(set(server.connections)) == 2  # the first connection was dropped, not handed out again


# --- the fake model's own streams: a token rate, tool-call deltas in pieces -------------------------------------


async def test_a_model_streaming_at_a_token_rate_is_shown_while_it_writes(server, provider) -> None:
    server.token_seconds = 0.01  # a fake model writing a hundred tokens a second
    words = [f"word{n}" for n in range(30)]
    server.reply_text(" ".join(words), prompt_tokens=40, completion_tokens=30)
    sink = Sink(server)

    completion = await provider.complete(ask(), partial=sink)

    assert completion.text == " ".join(words)
    assert (completion.prompt_tokens, completion.completion_tokens) == (40, 30)
    assert len(sink.partials) == len(words)  # one chunk per word, each shown
    assert all(b.startswith(a) for a, b in itertools.pairwise(sink.texts))
    total = server.events_sent
    assert sink.sent_then[0] < total / 2  # the first words were shown while the rest was still to come


async def test_a_model_streaming_a_tool_call_in_pieces_shows_its_words_then_only_that_it_calls(
    server, provider
) -> None:
    server.token_seconds = 0.005
    secret = {"query": f"{CANARY} in the arguments"}
    server.reply_tool_call("recall", secret, call_id="call_p", text="Let me look that up.")
    sink = Sink()

    completion = await provider.complete(ask(tools=(RECALL,)), partial=sink)

    [call] = completion.tool_calls
    assert (call.id, call.name, json.loads(call.arguments)) == ("call_p", "recall", secret)
    assert completion.text == "Let me look that up."
    words = [p for p in sink.partials if not p.calling]
    assert [p.text for p in words][-1] == "Let me look that up."
    assert sink.partials[len(words) :] == [Partial("Let me look that up.", calling=True)]
    assert all(CANARY not in p.text and "recall" not in p.text for p in sink.partials)


# --- a server that does not stream ---------------------------------------------------------------------------


async def test_a_server_answering_a_streamed_request_in_one_piece_is_not_asked_to_stream_again(
    server, provider, caplog
) -> None:
    server.streaming = False  # it answers `stream: true` with application/json
    server.reply_text("first, whole")
    server.reply_text("second, whole")
    caplog.set_level(logging.DEBUG)
    sink = Sink()

    first = await provider.complete(ask(), partial=sink)
    second = await provider.complete(ask(), partial=sink)

    assert (first.text, second.text) == ("first, whole", "second, whole")
    assert streamed(server.requests[0])
    assert "stream" not in server.requests[1] and "stream_options" not in server.requests[1]
    assert sink.partials == []  # the whole reply goes out as any unstreamed one
    [warning] = warnings_of(caplog)
    assert "does not stream" in warning and "in one piece" in warning
    assert not provider.streams(tools=False)
    assert "stream" not in json.loads(await provider.request_body(ask(), streamed=True))


async def test_a_streamed_request_refused_with_a_4xx_the_unstreamed_one_does_not_meet_stops_streaming(
    server, provider, caplog
) -> None:
    server.stream_refusal = stream_unsupported()  # OpenAI's 400 to `stream: true` from a model that cannot stream
    server.reply_text("answered without streaming")
    server.reply_text("and again")
    caplog.set_level(logging.DEBUG)
    sink = Sink()

    first = await provider.complete(ask(), partial=sink)
    second = await provider.complete(ask(), partial=sink)

    assert (first.text, second.text) == ("answered without streaming", "and again")
    assert [streamed(r) for r in server.requests] == [True, False, False]  # refused once, never asked again
    assert sink.partials == []
    [warning] = warnings_of(caplog)
    assert "does not stream" in warning and "400" in warning
    assert provider.not_streaming_because(tools=False) == "it failed a streamed request with 400"


async def test_a_4xx_the_unstreamed_request_meets_too_is_not_held_against_streaming(server, provider, caplog) -> None:
    server.stream_refusal = ScriptedResponse(status=400, body={"error": {"message": "bad temperature"}})
    server.reply_status(400, message="bad temperature")
    caplog.set_level(logging.DEBUG)

    with pytest.raises(ProviderRejected):
        await provider.complete(ask(), partial=Sink())

    assert [streamed(r) for r in server.requests] == [True, False]
    assert provider.streams(tools=False) and warnings_of(caplog) == []


async def test_image_input_refused_while_streaming_is_left_out_and_the_answer_still_streams(
    server, provider, caplog
) -> None:
    server.accept_images = False  # a text-only model behind COMPANION_LLM_VISION=true
    OPENAI_TEXT.script(server)
    request = CompletionRequest((ChatMessage("user", "what is this?", images=(ImageInput("image/png", png_with()),)),))
    caplog.set_level(logging.DEBUG)
    sink = Sink()

    completion = await provider.complete(request, partial=sink)

    assert completion.text == OPENAI_TEXT.text and sink.texts[-1] == OPENAI_TEXT.text
    first, second = server.requests
    assert streamed(first) and streamed(second)  # asked again at once, streamed, without the image
    assert isinstance(first["messages"][0]["content"], list) and isinstance(second["messages"][0]["content"], str)
    [warning] = warnings_of(caplog)
    assert "refuses image input" in warning
    assert provider.streams(tools=False) and not provider.images_accepted


# --- failures mid-stream -------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", FAILURES, ids=[s.name for s in FAILURES])
async def test_a_stream_that_fails_is_a_bad_response_and_is_not_asked_again(server, provider, shape) -> None:
    sink = Sink()
    shape.script(server)
    server.reply_text("never asked for")

    # The server's error is said as such; Ollama's failed model only ends its stream unfinished.
    said = "ended after 5 chunks, before the answer did" if shape is OLLAMA_ERROR_MIDSTREAM else "reported an error"
    with pytest.raises(ProviderBadResponse, match=said):
        await provider.complete(ask(), partial=sink)

    assert len(server.requests) == 1 and server.pending == 1
    assert sink.texts == list(itertools.accumulate(shape.deltas))  # what was shown until then
    assert provider.streams(tools=False)  # a server that streams, and failed


async def test_an_error_field_followed_by_done_is_a_failure_not_a_shorter_answer(server, provider) -> None:
    # llama.cpp of early 2025: `error: {...}` then `data: [DONE]`, status 200.
    assert LLAMA_ERROR_FIELD.done
    LLAMA_ERROR_FIELD.script(server)

    with pytest.raises(ProviderBadResponse, match="reported an error after 4 chunks"):
        await provider.complete(ask(), partial=Sink())


async def test_done_before_any_finish_reason_is_a_failure(server, provider) -> None:
    # Ollama's stream of a failed model, here with a `data: [DONE]` after all: still no answer.
    OLLAMA_ERROR_MIDSTREAM.script(server)
    server.forget_script()
    server.reply_stream(list(OLLAMA_ERROR_MIDSTREAM.events), done=True)

    with pytest.raises(ProviderBadResponse, match="ended after 5 chunks, before the answer did"):
        await provider.complete(ask(), partial=Sink())


async def test_a_request_over_the_context_reported_in_the_stream_is_too_long(server, provider) -> None:
    LLAMA_TOO_LONG_FIELD.script(server)

    with pytest.raises(ProviderRequestTooLong) as caught:
        await provider.complete(ask(), partial=Sink())

    assert "exceeds" not in str(caught.value)  # classified by the server's words, said in ours
    assert provider.streams(tools=False) and len(server.requests) == 1


async def test_a_connection_dropped_mid_stream_is_unavailable_and_not_asked_again(server, provider) -> None:
    sink = Sink()
    OPENAI_TEXT.script(server, cut_after=4)
    server.reply_text("never asked for")

    with pytest.raises(ProviderUnavailable, match="broke off its answer") as caught:
        await provider.complete(ask(), partial=sink)

    assert sink.texts == ["Lentil", "Lentil soup", "Lentil soup is"]  # shown before the drop
    assert len(server.requests) == 1 and server.pending == 1  # no retry: it would show the answer twice
    assert "RemoteProtocolError" in str(caught.value)


async def test_a_finished_answer_whose_stream_ends_without_done_is_read(server, provider) -> None:
    # No source here omits `data: [DONE]` after a finish reason; the finish reason is what counts.
    server.reply_stream(list(OPENAI_TEXT.events), done=False)

    completion = await provider.complete(ask(), partial=Sink())

    assert completion.text == OPENAI_TEXT.text and completion.prompt_tokens == 60


async def test_an_event_that_is_no_chunk_after_words_were_shown_is_a_bad_response(server, provider) -> None:
    server.reply_stream([*OPENAI_TEXT.events[:3], '{"choices": [{"index": 0, "delta": {"content": "cut'])

    with pytest.raises(ProviderBadResponse, match="not a chat completion chunk"):
        await provider.complete(ask(), partial=Sink())


# --- the timeout bounds each wait, not the answer ----------------------------------------------------------------


@pytest.fixture
async def impatient(server) -> AsyncIterator[OpenAICompatibleProvider]:
    provider = OpenAICompatibleProvider(server.base_url, model="test-model", timeout=0.5, max_retries=0)
    try:
        yield provider
    finally:
        await provider.aclose()


async def test_a_slow_steady_stream_longer_than_the_timeout_is_read_to_its_end(server, impatient) -> None:
    OPENAI_TEXT.script(server, pause=0.15)  # 11 events 0.15 s apart: about 1.5 s, three times the timeout
    sink = Sink()

    completion = await impatient.complete(ask(), partial=sink)

    assert completion.text == OPENAI_TEXT.text and len(sink.partials) == len(OPENAI_TEXT.deltas)


async def test_keep_alive_comments_keep_a_silent_stream_alive(server, impatient) -> None:
    # A model thinking for about 1.5 s before its first word, the server saying so every 0.3 s.
    server.reply_stream([*(KEEPALIVE,) * 5, *OPENAI_TEXT.events], pause=0.3)

    completion = await impatient.complete(ask(), partial=Sink())

    assert completion.text == OPENAI_TEXT.text


async def test_a_stream_silent_for_longer_than_the_timeout_is_unavailable(server, impatient) -> None:
    OPENAI_TEXT.script(server, pause=1.5)

    with pytest.raises(ProviderUnavailable, match=r"stopped sending its answer for 0\.5 s"):
        await impatient.complete(ask(), partial=Sink())

    assert len(server.requests) == 1


# --- valid Unicode, however a server cuts it -------------------------------------------------------------------


def escaped_delta(content_json: str, finish: str | None = None) -> str:
    """A chunk whose content is written as JSON escapes, as a server with ensure_ascii sends it."""
    finish_json = "null" if finish is None else f'"{finish}"'
    return f'{{"choices":[{{"index":0,"delta":{{"content":"{content_json}"}},"finish_reason":{finish_json}}}]}}'


async def test_a_surrogate_pair_split_over_two_deltas_is_joined_and_a_lone_one_replaced(server, provider) -> None:
    server.reply_stream(
        [
            escaped_delta("smile \\ud83d"),  # the pair's first half ends one delta ...
            escaped_delta("\\ude00 then"),  # ... and its second opens the next
            escaped_delta(" a cut \\ud83d"),  # a model cut mid-emoji: a lone half
            escaped_delta("", "stop"),
        ]
    )
    sink = Sink()

    completion = await provider.complete(ask(), partial=sink)

    assert completion.text == "smile \U0001f600 then a cut \ufffd"
    assert sink.texts == ["smile ", "smile \U0001f600 then", "smile \U0001f600 then a cut "]
    for text in [*sink.texts, completion.text]:
        text.encode("utf-8")  # every text shown or stored can be sent and written


async def test_line_and_paragraph_separators_written_raw_in_a_delta_are_words_of_the_answer(server, provider) -> None:
    # JSON lets a string hold U+2028, U+2029 and U+0085 unescaped (llama.cpp's server writes them so, as
    # json.dumps(ensure_ascii=False) does): an event's line ends at \n, \r\n or \r only.
    words = "first\u2028second\u2029third\u0085fourth"
    chunk = {"choices": [{"index": 0, "delta": {"content": words}, "finish_reason": "stop"}]}
    server.reply_stream([json.dumps(chunk, ensure_ascii=False)])

    completion = await provider.complete(ask(), partial=Sink())

    assert completion.text == words


# --- nothing the model wrote in a log or an exception ------------------------------------------------------------


def _canary_stream(*tail: str | bytes) -> list[str | bytes]:
    chunk = {"choices": [{"index": 0, "delta": {"content": f"{CANARY} in the words"}, "finish_reason": None}]}
    return [json.dumps(chunk), *tail]


CANARY_FAILURES = {
    "error-event": (
        _canary_stream(json.dumps({"error": {"message": f"diff failed at {CANARY}", "type": "server_error"}})),
        {},
    ),
    "error-field": (
        _canary_stream(f'error: {{"code":500,"message":"{CANARY}","type":"server_error"}}\n\n'.encode()),
        {},
    ),
    "no-chunk": (_canary_stream(f'{{"choices": [{{"delta": {{"content": "{CANARY}'), {}),
    "no-finish": (_canary_stream(), {"done": False}),
    "dropped": (_canary_stream(*OPENAI_TEXT.events), {"cut_after": 3}),
}


@pytest.mark.parametrize("failure", CANARY_FAILURES, ids=list(CANARY_FAILURES))
async def test_no_delta_text_reaches_a_log_line_or_an_exception_when_a_stream_fails(
    server, provider, caplog, failure
) -> None:
    events, options = CANARY_FAILURES[failure]
    server.reply_stream(events, **options)
    caplog.set_level(logging.DEBUG)

    with logging_policy("DEBUG"), pytest.raises(ProviderError) as caught:
        await provider.complete(ask(), partial=Sink())

    assert CANARY not in full_text(caught.value)  # the message, its causes and their tracebacks
    assert CANARY not in "\n".join(r.getMessage() for r in caplog.records)


async def test_no_delta_text_reaches_a_log_line_when_a_stream_succeeds(server, provider, caplog) -> None:
    server.token_seconds = 0.001
    server.reply_tool_call("recall", {"query": CANARY}, call_id=f"call-{CANARY}", text=f"{CANARY} words first")
    caplog.set_level(logging.DEBUG)

    with logging_policy("DEBUG"):
        completion = await provider.complete(ask(tools=(RECALL,)), partial=Sink())

    assert CANARY in completion.text and CANARY in completion.tool_calls[0].arguments
    assert PROVIDER_LOG in {r.name for r in caplog.records}  # the provider did log, at DEBUG
    assert CANARY not in "\n".join(r.getMessage() for r in caplog.records)


# --- through the core: a streamed reply on a platform that shows it ------------------------------------------------

QUICK = StreamPacing(edit_seconds=0.05, first_seconds=0.02)  # the shipped pacing is one edit a second
_ids = itertools.count(1)


@pytest.fixture
def telegram() -> FakeStreamer:
    return FakeStreamer("telegram")


@pytest.fixture
async def streaming_companion(stores, provider, clock, passphrase_hash, telegram) -> AsyncIterator[Companion]:
    """A companion whose replies on Telegram are shown while written, its model the real provider."""
    # Bursts off: each message is its own turn (the gateway tests keep the shipped window).
    companion = await boot_companion(
        stores,
        provider,
        clock,
        passphrase_hash,
        (telegram,),
        outbox_options={"pacing": QUICK},
        burst_seconds=0.0,
    )
    companion.outbox.register_streamer(telegram)
    try:
        yield companion
    finally:
        await companion.drain()


async def tell(companion: Companion, text: str) -> Reply:
    message = InboundMessage("telegram", USER, USER, text, is_direct=True, message_id=f"m{next(_ids)}", user_name="Ann")
    reply = await companion.handle(message)
    assert reply is not None and reply.delivery_id is not None and reply.conversation_id is not None
    companion.outbox.hand_over(reply.conversation_id, reply.delivery_id)  # what an adapter does
    return reply


async def test_a_dropped_stream_leaves_the_shown_words_replaced_by_the_failure_line_once(
    streaming_companion, server, telegram, stores
) -> None:
    words = [f"word{n}" for n in range(40)]
    chunk = {"choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": None}]}
    events = [json.dumps({**chunk, "choices": [{**chunk["choices"][0], "delta": {"content": f"{w} "}}]}) for w in words]
    server.reply_stream(events, pause=0.02, cut_after=30)
    server.reply_text("never asked for")

    await tell(streaming_companion, "tell me a long story")
    await wait_for(lambda: telegram.sent)

    shown = [text for _, text in telegram.posts_shown + telegram.edits]
    assert any("word0 word1 word2" in text for text in shown)  # the words were shown ...
    assert list(telegram.messages.values()) == [copy.PROVIDER_FAILED]  # ... then replaced by the failure line
    assert len(server.requests) == 1 and server.pending == 1  # asked once: nothing shown twice
    assert await all_rows(stores, "SELECT status FROM deliveries") == [("sent",)]


async def test_the_context_preview_of_a_streamed_platform_is_the_streamed_request_byte_for_byte(
    streaming_companion, server, stores
) -> None:
    server.reply_stream(OPENAI_TEXT.events)
    await tell(streaming_companion, "Hello! I like cooking with lentils.")
    conversation = await stores.timeline.conversation_at(ConversationKey("telegram", USER))
    assert conversation is not None
    upcoming = "What should we cook tonight?"

    preview = await normal_preview(streaming_companion).of(conversation, upcoming)
    sent = len(server.raw_requests)
    server.reply_stream(OPENAI_TEXT.events)
    await tell(streaming_companion, upcoming)

    assert server.raw_requests[sent] == preview.body
    assert preview.body is not None and streamed(json.loads(preview.body))


@pytest.mark.parametrize("streams", ["never", "only-without-tools"])
async def test_the_context_preview_stops_asking_to_stream_once_the_server_does_not(
    streaming_companion, server, stores, streams
) -> None:
    if streams == "never":
        server.streaming = False
    else:
        server.streams_with_tools = False  # llama-cpp-python's chatml-function-calling: a turn's request offers tools
    server.script(completion_json("whole"))
    await tell(streaming_companion, "Hello! I like cooking with lentils.")
    conversation = await stores.timeline.conversation_at(ConversationKey("telegram", USER))
    assert conversation is not None

    preview = await normal_preview(streaming_companion).of(conversation, "And now?")
    sent = len(server.raw_requests)
    await tell(streaming_companion, "And now?")

    assert server.raw_requests[sent:] == [preview.body]  # asked once, unstreamed, as the page said
    assert preview.body is not None
    body = json.loads(preview.body)
    assert body["tools"] and "stream" not in body


async def test_a_streamed_reply_ends_as_the_whole_answer_asked_for_once(streaming_companion, server, telegram) -> None:
    OPENAI_TEXT.script(server, pause=0.05)

    await tell(streaming_companion, "soup?")
    await wait_for(lambda: telegram.sent)

    assert list(telegram.messages.values()) == [OPENAI_TEXT.text]  # one message, its final edit the answer
    assert len(telegram.posts_shown) == 1 and len(server.requests) == 1


async def test_a_request_over_the_window_streaming_no_event_is_answered_with_half_the_window_still_streamed(
    streaming_companion, server, telegram, provider
) -> None:
    # llama-cpp-python: a streamed request over the model's window ends with no event, and the same
    # request unstreamed is refused as too long. One long prompt must not turn streaming off.
    for n in range(6):
        await tell(streaming_companion, f"story part {n}: " + "once upon a time " * 80)
    server.window_bytes = len(server.raw_requests[-1]) - 500  # the next full window is over it, half of it not
    server.reply_text("the answer, streamed")  # short: it goes out whole, streamed or not

    await tell(streaming_companion, "and what did I tell you?")
    await wait_for(lambda: "the answer, streamed" in [part for _, part, _ in telegram.sent])

    first, unstreamed, halved = [json.loads(raw) for raw in server.raw_requests[-3:]]
    assert [streamed(first), "stream" in unstreamed, streamed(halved)] == [True, False, True]
    assert len(server.raw_requests[-1]) < server.window_bytes < len(server.raw_requests[-3])
    assert provider.streams(tools=True) and provider.streams(tools=False)


async def test_a_stream_with_tools_that_finishes_without_words_is_asked_again_without_tools_still_streamed(
    streaming_companion, server, telegram, provider
) -> None:
    # llama-cpp-python with tools and tool_choice "auto", when its model chose `message:`: a stream of
    # three events, no text, finish_reason "stop". An answer, but no reply: asked again without tools.
    def chunk(delta: dict, finish: str | None = None) -> str:
        return json.dumps(
            {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        )

    server.reply_stream([chunk({"role": "assistant"}), chunk({"content": ""}), chunk({}, "stop")])
    server.reply_text("words at last")

    await tell(streaming_companion, "hello")
    await wait_for(lambda: "words at last" in [part for _, part, _ in telegram.sent])

    asked = [json.loads(raw) for raw in server.raw_requests]
    assert [(streamed(body), bool(body.get("tools"))) for body in asked] == [(True, True), (True, False)]
    assert provider.streams(tools=True)  # a stream that finished is no failure of streaming
