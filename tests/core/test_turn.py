"""The turn pipeline: persistence order, ordering, concurrency, tools, rolling summary."""

from __future__ import annotations

import asyncio

from bot.bootstrap import build_companion
from core.memory.context import ContextBudget
from core.values import copy
from core.values.model import Completion, ToolCall
from tests.helpers.chat import all_rows, conversation_of, say
from tests.helpers.fakes import FakeProvider


async def test_user_message_is_stored_before_the_provider_is_called(companion, provider, stores):
    provider.fail_all = True
    reply = await say(companion, "remember this line")
    assert reply.text == copy.PROVIDER_FAILED
    rows = await all_rows(stores, "SELECT role, text FROM messages WHERE kind = 'chat'")
    assert rows == [("user", "remember this line")]


async def test_reply_is_persisted_and_handed_back(companion, provider, stores):
    reply = await say(companion, "hello")
    assert reply.text == "reply 1"
    rows = await all_rows(stores, "SELECT role, text, mode, capture FROM messages ORDER BY id")
    assert rows == [("user", "hello", "normal", "pending"), ("assistant", "reply 1", "normal", "pending")]


async def test_provider_request_holds_persona_then_history_in_order(companion, provider):
    await say(companion, "first")
    await say(companion, "second")
    messages = provider.last_reply_request().messages
    assert messages[0].role == "system" and copy.DEFAULT_PERSONA in messages[0].content
    assert [(m.role, m.content) for m in messages[1:]] == [
        ("user", "first"),
        ("assistant", "reply 1"),
        ("user", "second"),
    ]


async def test_turns_of_one_conversation_are_strictly_ordered(companion, provider):
    provider.delay = 0.01
    await asyncio.gather(*(say(companion, f"message {i}") for i in range(5)))
    # Each request saw every earlier message and its reply: no two turns overlapped.
    for n, request in enumerate(provider.replies()):
        users = [m.content for m in request.messages if m.role == "user"]
        assistants = [m for m in request.messages if m.role == "assistant"]
        assert len(users) == n + 1 and len(assistants) == n


class BarrierProvider(FakeProvider):
    """Answers only once two requests are in flight at the same time."""

    def __init__(self) -> None:
        super().__init__()
        self.in_flight = 0
        self.both = asyncio.Event()

    async def complete(self, request):
        self.in_flight += 1
        if self.in_flight >= 2:
            self.both.set()
        await asyncio.wait_for(self.both.wait(), 5)
        return await super().complete(request)


async def test_different_conversations_run_concurrently(stores, clock):
    from core.turn.config import CompanionConfig

    provider = BarrierProvider()
    config = CompanionConfig(allowed_accounts=frozenset({"telegram:1", "telegram:2"}))
    companion = build_companion(stores, provider, config, clock=clock)
    await companion.start()
    # Would time out if the second conversation waited for the first.
    replies = await asyncio.gather(
        say(companion, "a", platform="telegram", chat="1", user="1"),
        say(companion, "b", platform="telegram", chat="2", user="2"),
    )
    assert all(r.text.startswith("reply") for r in replies)


async def test_tool_call_round_trip_runs_the_tool_and_feeds_the_result_back(companion, provider):
    provider.script = [
        Completion("", (ToolCall("call_1", "current_time", "{}"),)),
        Completion("It is late."),
    ]
    reply = await say(companion, "what time is it?")
    assert reply.text == "It is late."
    second = provider.requests[1].messages
    assert second[-2].role == "assistant" and second[-2].tool_calls[0].name == "current_time"
    assert second[-1].role == "tool" and second[-1].tool_call_id == "call_1"
    assert second[-1].content and not second[-1].content.startswith("error")


async def test_tool_rounds_are_bounded(make_companion, provider):
    companion = await make_companion(max_tool_rounds=2)
    provider.script = [Completion("", (ToolCall(f"c{i}", "current_time", "{}"),)) for i in range(10)]
    provider.script.append(Completion("done"))  # never reached if rounds were unbounded
    await say(companion, "loop")
    # two rounds with tools, then one last request offered no tools at all
    assert len(provider.requests) == 3
    assert provider.requests[-1].tools == ()


async def test_a_tool_the_model_was_not_offered_is_not_run(companion, provider):
    provider.script = [Completion("", (ToolCall("c1", "format_disk", "{}"),)), Completion("ok")]
    await say(companion, "hi")
    assert provider.requests[1].messages[-1].content.startswith("error: no tool named 'format_disk'")


async def test_rolling_summary_folds_older_messages_and_advances_the_watermark(make_companion, provider, stores):
    companion = await make_companion(budget=ContextBudget(total_tokens=400, fold_min=4, fold_batch=8))
    for i in range(30):
        await say(companion, f"message number {i} " + "x" * 60)
        await companion.drain()  # let background folds finish
    conversation = await conversation_of(companion)
    summary = await stores.timeline.normal_summary(conversation.id)
    assert summary is not None and summary.watermark > 0
    last = provider.last_reply_request()
    assert any(copy.SUMMARY_HEADER in (m.content or "") for m in last.messages)


async def test_each_message_is_folded_into_the_summary_exactly_once(make_companion, provider, stores):
    companion = await make_companion(budget=ContextBudget(total_tokens=400, fold_min=4, fold_batch=8))
    for i in range(30):
        await say(companion, f"message number {i} " + "x" * 60)
        await companion.drain()  # let background folds finish
    folds = [
        r.messages[-1].content.partition("Conversation to fold in:\n")[2]
        for r in provider.requests
        if r.purpose == "summary"
    ]
    folded = [line for body in folds for line in body.splitlines() if line.startswith("Person: ")]
    assert len(folds) >= 2 and folded  # several folds ran, each taking messages
    assert len(folded) == len(set(folded)), "a message was summarised again"
    # The watermark stands at the last message folded: everything after it is still to fold.
    conversation = await conversation_of(companion)
    watermark = (await stores.timeline.normal_summary(conversation.id)).watermark
    (last_folded,) = (await all_rows(stores, "SELECT max(id) FROM messages WHERE text = ?", (folded[-1][8:],)))[0]
    assert watermark >= last_folded


async def test_visible_history_is_never_empty_when_messages_follow_the_watermark(make_companion, provider):
    # Seed 000, incident two: double trimming emptied the window on every turn.
    companion = await make_companion(budget=ContextBudget(total_tokens=300, fold_min=2, fold_batch=4))
    for i in range(25):
        await say(companion, f"turn {i} " + "y" * 80)
        await companion.drain()
        request = provider.last_reply_request()
        users = [m.content for m in request.messages if m.role == "user"]
        assert users and users[-1].startswith(f"turn {i}")


async def test_covered_material_is_subtracted_exactly_once(make_companion, provider, stores, clock):
    from core.values.model import Summary

    companion = await make_companion(budget=ContextBudget(total_tokens=100_000))
    for i in range(6):
        await say(companion, f"m{i}")
    conversation = await conversation_of(companion)
    ids = [r[0] for r in await all_rows(stores, "SELECT id FROM messages WHERE role='user' ORDER BY id")]
    # The summary covers everything up to and including the third user message.
    await stores.timeline.save_summary(conversation.id, Summary("covered", ids[2]), clock.now())
    await say(companion, "m6")
    users = [m.content for m in provider.last_reply_request().messages if m.role == "user"]
    assert users == ["m3", "m4", "m5", "m6"]  # nothing covered shown, nothing uncovered missing


async def test_a_message_larger_than_the_budget_is_shortened_not_dropped(make_companion, provider):
    companion = await make_companion(budget=ContextBudget(total_tokens=256))
    await say(companion, "z" * 10_000)
    users = [m.content for m in provider.last_reply_request().messages if m.role == "user"]
    assert len(users) == 1 and users[0].startswith("zzz") and users[0].endswith(copy.SHORTENED_MARKER)


async def test_unknown_user_is_refused_once_and_nothing_is_stored(companion, stores):
    first = await say(companion, "hi", platform="telegram", chat="9", user="9")
    second = await say(companion, "hi again", platform="telegram", chat="9", user="9")
    assert first.text == copy.NOT_ALLOWED and second is None
    assert await all_rows(stores, "SELECT count(*) FROM messages") == [(0,)]
    assert await all_rows(stores, "SELECT count(*) FROM accounts") == [(0,)]
