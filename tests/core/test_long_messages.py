"""No conversation can be locked by one message: a conservative token estimate learned from the
server, long messages shortened in the context (stored whole), capture that gives up on a refused
request (issue 11)."""

from __future__ import annotations

from core.memory.context import ContextBudget, TokenRatio, estimate_tokens, utf8_size
from core.turn import responder
from core.turn.responder import prompt_bytes
from core.values import copy
from core.values.errors import ProviderRejected
from core.values.model import ChatMessage, Completion, CompletionRequest, ToolSpec
from tests.helpers.chat import all_rows, say


def test_the_estimate_counts_bytes_so_other_scripts_are_not_undercounted():
    english, cyrillic = "hello " * 100, "привет " * 100
    assert estimate_tokens(cyrillic) > 1.5 * estimate_tokens(english)


def test_a_size_is_the_utf8_size_whether_or_not_the_text_is_ascii():
    for text in ("hello", "привет", "mixed ж text", "a lone \ud800 surrogate", ""):
        assert utf8_size(text) == len(text.encode("utf-8", "replace"))
    request = CompletionRequest((ChatMessage("system", "hello"), ChatMessage("user", "привет")))
    assert prompt_bytes(request) == len("hello") + len("привет".encode())


def test_a_tool_schemas_size_is_never_one_kept_for_another_schema():
    schema = {"type": "object", "properties": {"text": {"type": "string"}}}
    spec = ToolSpec("remember", "Remember a fact.", schema)
    true_size = len("remember") + len("Remember a fact.") + len(repr(schema))
    # What the cache would hold had another schema lived at this address before (ids are reused).
    responder._SCHEMA_SIZES[id(schema)] = ({"type": "null"}, 1)
    try:
        assert prompt_bytes(CompletionRequest((), (spec,))) == true_size
        assert prompt_bytes(CompletionRequest((), (spec,))) == true_size  # and again, from the cache
    finally:
        responder._SCHEMA_SIZES.pop(id(schema), None)


def test_the_ratio_rises_at_once_and_falls_back_slowly():
    ratio = TokenRatio(0.5)
    ratio.observe(1000, 1100)  # the server counted more tokens than bytes
    assert ratio.value > 1.1
    ratio.observe(1000, 250)
    assert 0.9 < ratio.value < 1.2  # one cheap prompt does not undo it


async def test_an_eleven_thousand_character_message_cannot_lock_the_conversation(make_companion, provider, stores):
    companion = await make_companion(budget=ContextBudget(total_tokens=2000))
    huge = "ж" * 11_000
    await say(companion, huge)
    for text in ("and now something short", "and another"):
        await say(companion, text)
        request = provider.last_reply_request()
        sizes = sum(len((m.content or "").encode()) for m in request.messages)
        assert sizes < 2000 * 4  # within the budget at any sane tokens-per-byte
    stored = await all_rows(stores, "SELECT length(text) FROM messages WHERE role = 'user' AND length(text) > 1000")
    assert stored == [(11_000,)]  # the stored message stays whole


async def test_a_message_alone_over_the_budget_is_shortened_with_a_visible_marker(make_companion, provider):
    companion = await make_companion(budget=ContextBudget(total_tokens=600))
    await say(companion, "ж" * 5_000)
    users = [m.content for m in provider.last_reply_request().messages if m.role == "user"]
    assert len(users) == 1 and users[0].endswith(copy.SHORTENED_MARKER)
    assert estimate_tokens(users[0]) <= 600


async def test_the_window_shrinks_once_the_server_reports_costlier_tokens(make_companion, provider):
    companion = await make_companion(budget=ContextBudget(total_tokens=3000))
    for i in range(40):
        await say(companion, f"message {i} " + "x" * 180)
    before = len(provider.last_reply_request().messages)
    provider.script = [Completion("ok", prompt_tokens=20_000)]  # far more than the bytes sent
    await say(companion, "one more")
    await say(companion, "and one after")
    after = len(provider.last_reply_request().messages)
    assert after < before


async def test_capture_gives_up_on_a_refused_request_instead_of_retrying_it_forever(make_companion, provider, stores):
    companion = await make_companion()
    await say(companion, "a note-worthy day")
    provider.script = [ProviderRejected("context_length_exceeded", status=400)]
    assert await companion.capture.run_once() == 0
    assert await all_rows(stores, "SELECT count(*) FROM messages WHERE capture = 'pending'") == [(0,)]


async def test_capture_keeps_messages_pending_when_the_api_key_is_refused(make_companion, provider, stores):
    companion = await make_companion()
    await say(companion, "a note-worthy day")
    provider.script = [ProviderRejected("invalid api key", status=401)]
    await companion.capture.run_once()
    assert await all_rows(stores, "SELECT count(*) FROM messages WHERE capture = 'pending'") != [(0,)]


async def test_a_request_the_server_finds_too_long_is_retried_once_with_half_the_window(make_companion, provider):
    from core.values.errors import ProviderRequestTooLong

    companion = await make_companion(budget=ContextBudget(total_tokens=3000))
    for i in range(30):
        await say(companion, f"message {i} " + "x" * 100)
    provider.script = [ProviderRequestTooLong("context_length_exceeded", status=400)]
    reply = await say(companion, "and now?")
    first, second = provider.replies()[-2:]
    assert len(second.messages) < len(first.messages)
    assert second.messages[-1].content == "and now?"
    assert reply.text == f"reply {len(provider.requests)}"


async def test_a_request_too_long_even_at_half_the_window_gets_the_too_long_words(make_companion, provider, stores):
    from core.values.errors import ProviderRequestTooLong

    companion = await make_companion()
    provider.script = [ProviderRequestTooLong("too long", status=400), ProviderRequestTooLong("too long", status=400)]
    reply = await say(companion, "a question")
    assert reply.text == copy.PROVIDER_TOO_LONG
    assert await all_rows(stores, "SELECT count(*) FROM messages WHERE text = 'a question'") == [(1,)]
