"""What normal mode sees (`/context`, core/turn/preview.py): the preview of a conversation's next
normal-mode request is the body the model server receives next, byte for byte.

The real core, store and outbox run with the real OpenAICompatibleProvider against the fake model
server on 127.0.0.1; messages are typed through the web chat (adapters/web/chat.py), the real
turn pipeline. Private canaries sit in a private interval, the private summary and the private pad.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from adapters.llm.offline import OfflineProvider
from bot.bootstrap import normal_preview
from core.memory.context import INITIAL_TOKENS_PER_BYTE, ContextBudget
from core.values import copy
from core.values.model import ConversationKey, Summary
from tests.conftest import PASSPHRASE
from tests.helpers.fake_openai import completion_json
from tests.helpers.web_chat import web_side

CANARY = "PREVIEW-PRIVATE-CANARY"
NEXT = "What should we cook tonight?"


class ReadRecorder:
    """The real store, recording the name of every store method called through it."""

    def __init__(self, stores) -> None:
        self._store = stores
        self.calls: list[str] = []

    def __getattr__(self, name: str):
        value = getattr(self._store, name)
        if not callable(value):
            return value

        def recorded(*args, **kwargs):
            self.calls.append(name)
            return value(*args, **kwargs)

        return recorded


async def web_conversation(stores):
    conversation = await stores.timeline.conversation_at(ConversationKey("web", "owner"))
    assert conversation is not None
    return conversation


async def plant_private_memory(stores, conversation) -> None:
    """A private summary and a private pad fact with the canary, as a private fold writes them."""
    segment = await stores.modes.open_segment_of(conversation.id)
    assert segment is not None
    await stores.timeline.save_summary(
        conversation.id,
        Summary(f"they said {CANARY} in the summary", segment.anchor_message_id + 1),
        1.0,
        segment_id=segment.id,
        pad_person_id=conversation.person_id,
        pad_facts=(f"a fact of {CANARY}",),
    )


async def a_private_interval(web, stores) -> None:
    await web.chat.send(f"/private {PASSPHRASE}")
    await web.chat.send(f"something only private mode may read: {CANARY}")
    await plant_private_memory(stores, await web_conversation(stores))


def placeholder_lines(body: bytes) -> int:
    return sum(1 for m in json.loads(body)["messages"] if m["content"] == copy.PLACEHOLDER)


async def test_the_preview_is_the_next_normal_request_byte_for_byte_with_a_private_interval_in_it(
    stores, provider, server, clock, passphrase_hash
):
    async with web_side(stores, provider, clock, passphrase_hash=passphrase_hash) as web:
        await web.chat.send("Hello! I like cooking with lentils.")
        # The server counts many tokens: the budget's ratio moves off its first guess.
        server.reply_text("Lentils are great.", prompt_tokens=2500)
        await web.chat.send("Any idea for a soup?")
        await a_private_interval(web, stores)
        await web.chat.send("/normal")
        await web.chat.send("Back again, in normal mode.")
        conversation = await web_conversation(stores)

        preview = await normal_preview(web.companion).of(conversation, NEXT)
        clock.advance(600)  # nothing of the clock is in a request
        sent = len(server.raw_requests)
        await web.chat.send(NEXT)

        assert server.raw_requests[sent] == preview.body
        assert preview.body_size == len(server.raw_requests[sent])
        assert CANARY.encode() not in preview.body
        assert placeholder_lines(preview.body) == 1
        assert preview.tokens_per_byte != INITIAL_TOKENS_PER_BYTE
        assert not preview.private_now
        assert [t.name for t in preview.request.tools] == [
            t["function"]["name"] for t in server.requests[sent]["tools"]
        ]


async def test_the_preview_fits_the_window_as_the_next_turn_will_when_the_next_message_pushes_an_older_one_out(
    stores, provider, server, clock, passphrase_hash
):
    budget = ContextBudget(total_tokens=900, max_items=5, fold_min=1000)
    async with web_side(stores, provider, clock, passphrase_hash=passphrase_hash, budget=budget) as web:
        for n in range(4):
            await web.chat.send(f"message {n}: " + "words to fill the window " * 6)
        conversation = await web_conversation(stores)
        longer = NEXT + " " + "and more words " * 20

        preview = await normal_preview(web.companion).of(conversation, longer)
        sent = len(server.raw_requests)
        await web.chat.send(longer)

        assert server.raw_requests[sent] == preview.body
        assert "message 0" not in preview.body.decode()  # the window is full: its oldest went out


async def test_a_preview_asked_while_a_summary_fold_is_queued_comes_after_the_fold(
    stores, provider, server, clock, passphrase_hash
):
    holding = False
    fold_waits = asyncio.Event()
    fold_may_answer = asyncio.Event()

    async def answer(body):
        if body["messages"][0]["content"] == copy.SUMMARY_INSTRUCTION:
            if holding:
                fold_waits.set()
                await fold_may_answer.wait()
                return completion_json("SUMMARY:\nthe fold that was held\nFACTS:\n- none")
            return completion_json("SUMMARY:\nan earlier fold\nFACTS:\n- none")
        return "noted"

    server.responder = answer
    budget = ContextBudget(total_tokens=300, fold_min=2, fold_batch=8)
    async with web_side(stores, provider, clock, passphrase_hash=passphrase_hash, budget=budget) as web:
        for n in range(6):
            await web.chat.send(f"message {n}: " + "soup talk " * 12)
        holding = True
        await web.chat.send("one more about soup " * 6)
        async with asyncio.timeout(10):
            await fold_waits.wait()  # this turn queued a fold in the lane; the server holds it
        conversation = await web_conversation(stores)

        asked = asyncio.ensure_future(normal_preview(web.companion).of(conversation, NEXT))
        await asyncio.wait({asked}, timeout=0.5)  # a preview computed now would miss the fold
        fold_may_answer.set()
        preview = await asked
        sent = len(server.raw_requests)
        await web.chat.send(NEXT)

        assert (await stores.timeline.normal_summary(conversation.id)).text == "the fold that was held"
        assert server.raw_requests[sent] == preview.body
        assert b"the fold that was held" in preview.body


async def test_a_preview_taken_in_private_mode_is_normal_modes_view_and_reads_nothing_private(
    stores, provider, server, clock, passphrase_hash
):
    recorder = ReadRecorder(stores)
    async with web_side(recorder, provider, clock, passphrase_hash=passphrase_hash) as web:
        await web.chat.send("A normal hello before.")
        await a_private_interval(web, stores)
        conversation = await web_conversation(stores)
        recorder.calls.clear()

        preview = await normal_preview(web.companion).of(conversation, NEXT)

        assert preview.private_now
        text = preview.body.decode()
        assert CANARY not in text
        assert placeholder_lines(preview.body) == 1
        assert copy.PRIVATE_SYSTEM_LINE not in text and copy.PRIVATE_MEMORY_HEADER not in text
        assert "A normal hello before." in text
        assert "private_pad" not in recorder.calls and "private_summary" not in recorder.calls
        assert not ({t.name for t in preview.request.tools} <= {"current_time"})  # normal mode's tools


async def test_the_offline_provider_says_nothing_leaves_the_process_and_the_request_is_still_shown(
    stores, clock, passphrase_hash
):
    async with web_side(stores, OfflineProvider(), clock, passphrase_hash=passphrase_hash) as web:
        await web.chat.send("hello")
        conversation = await web_conversation(stores)

        preview = await normal_preview(web.companion).of(conversation, NEXT)

    assert preview.body is None and preview.body_size is None
    assert preview.request.messages[-1].content == NEXT
    assert preview.prompt_bytes > len(NEXT)


async def test_the_preview_covers_each_of_the_owners_conversations_and_no_one_elses(
    stores, provider, server, clock, passphrase_hash
):
    from core.values.model import InboundMessage

    async with web_side(
        stores,
        provider,
        clock,
        passphrase_hash=passphrase_hash,
        platforms=frozenset({"web", "telegram"}),
        owner_accounts=frozenset({"telegram:111"}),
        allowed_accounts=frozenset({"telegram:222"}),
    ) as web:
        await web.chat.send("from the web")
        for user in ("111", "222"):
            await web.companion.handle(InboundMessage("telegram", user, user, f"from {user}", is_direct=True))

        previews = await normal_preview(web.companion).of_owner(NEXT)

    assert [(p.conversation.platform, p.conversation.chat_id) for p in previews] == [
        ("web", "owner"),
        ("telegram", "111"),
    ]
    assert all(p.body is not None and b"from 222" not in p.body for p in previews)


@pytest.mark.parametrize("upcoming", ["", "x" * 20_000])
async def test_a_preview_of_an_empty_or_oversized_next_message_still_matches_the_next_request(
    stores, provider, server, clock, passphrase_hash, upcoming
):
    async with web_side(stores, provider, clock, passphrase_hash=passphrase_hash) as web:
        await web.chat.send("first")
        conversation = await web_conversation(stores)

        preview = await normal_preview(web.companion).of(conversation, upcoming or " ")
        sent = len(server.raw_requests)
        await web.chat.send(upcoming or " ")

        assert server.raw_requests[sent] == preview.body


async def test_once_the_server_refused_tools_the_preview_shows_the_request_without_them(
    stores, provider, server, clock, passphrase_hash
):
    async with web_side(stores, provider, clock, passphrase_hash=passphrase_hash) as web:
        server.reply_status(
            400, message='"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
        )
        await web.chat.send("first")  # refused with tools, answered without them
        conversation = await web_conversation(stores)

        preview = await normal_preview(web.companion).of(conversation, NEXT)
        sent = len(server.raw_requests)
        await web.chat.send(NEXT)

        assert server.raw_requests[sent] == preview.body
        assert "tools" not in json.loads(preview.body)
        assert preview.request.tools == ()  # the core offers none once the server refused them


async def test_a_preview_taken_in_private_mode_differs_from_the_one_after_normal_only_by_the_transition_line(
    stores, provider, server, clock, passphrase_hash
):
    async with web_side(stores, provider, clock, passphrase_hash=passphrase_hash) as web:
        await web.chat.send("A normal hello before.")
        await a_private_interval(web, stores)
        conversation = await web_conversation(stores)
        previews = normal_preview(web.companion)

        during = await previews.of(conversation, NEXT)
        await web.chat.send("/normal")  # its answer, the transition line, is stored in normal mode
        after = await previews.of(conversation, NEXT)
        sent = len(server.raw_requests)
        await web.chat.send(NEXT)

        assert server.raw_requests[sent] == after.body
        assert during.private_now and not after.private_now
        added = [m for m in after.request.messages if m not in during.request.messages]
        assert added == [after.request.messages[-2]] and added[0].role == "assistant"
        assert CANARY.encode() not in during.body
