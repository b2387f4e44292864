"""Replies shown while the model writes them (issue 24), in the core with a real store, a provider
that streams and a fake platform that shows posts and edits: the final text is the reply's one
delivery (an edit of what was shown), partial text is stored nowhere, a cut-off stream is taken
over by the next start's answer, and a private stream leaves nothing once its interval is gone."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from core.delivery.streams import StreamPacing
from core.turn.companion import Companion
from core.values import copy
from core.values.model import Completion, InboundMessage, Reply
from tests.conftest import PASSPHRASE
from tests.helpers import engines
from tests.helpers.boot import boot_companion
from tests.helpers.chat import all_rows
from tests.helpers.fakes import FakeStreamer
from tests.helpers.waiting import wait_for

USER = "100"
_ids = itertools.count(1)
LONG = " ".join(f"word{n}" for n in range(60)) + "."
# Quick pacing for a test: the shipped pacing is one edit a second (COMPANION_STREAM_EDIT_SECONDS).
QUICK = StreamPacing(edit_seconds=0.05, first_seconds=0.02)


@pytest.fixture
def telegram() -> FakeStreamer:
    return FakeStreamer("telegram")


@pytest.fixture
def boot(stores, provider, clock, passphrase_hash, telegram):
    provider.streams = True
    provider.stream_steps = 8
    provider.stream_pause = 0.03

    async def start(pacing: StreamPacing = QUICK, **config) -> Companion:
        # Bursts off: each test message is its own turn (the gateway tests keep the shipped window).
        companion = await boot_companion(
            stores,
            provider,
            clock,
            passphrase_hash,
            (telegram,),
            platforms=("telegram",),
            outbox_options={"pacing": pacing},
            burst_seconds=0.0,
            **config,
        )
        companion.outbox.register_streamer(telegram)
        return companion

    return start


async def tell(companion: Companion, text: str) -> Reply | None:
    message = InboundMessage("telegram", USER, USER, text, is_direct=True, message_id=f"m{next(_ids)}", user_name="Ann")
    reply = await companion.handle(message)
    if reply is not None and reply.delivery_id is not None and reply.conversation_id is not None:
        companion.outbox.hand_over(reply.conversation_id, reply.delivery_id)  # what an adapter does
    return reply


async def test_a_streamed_reply_is_shown_while_written_and_finished_by_one_edit(boot, provider, telegram, stores):
    companion = await boot()
    provider.script.append(Completion(LONG))
    reply = await tell(companion, "tell me a long story")
    assert reply is not None
    await wait_for(lambda: telegram.sent)
    assert len(telegram.posts_shown) == 1  # one message, shown early ...
    message_id, first = telegram.posts_shown[0]
    assert first and LONG.startswith(first) and first != LONG
    assert len(telegram.edits) >= 2  # ... edited as the answer grew, then the final edit
    assert telegram.edits[-1] == (message_id, LONG)
    assert telegram.messages == {message_id: LONG}
    rows = await all_rows(stores, "SELECT status, streamed_ids, text FROM deliveries")
    assert rows == [("sent", message_id, None)]  # one delivery; a sent row holds no text


async def test_an_answer_done_before_its_first_text_is_due_writes_no_stream_row(
    boot, provider, telegram, stores, monkeypatch
):
    written = []
    open_stream = stores.outbox.open_stream

    async def counted(*args, **kwargs):
        written.append(args)
        return await open_stream(*args, **kwargs)

    monkeypatch.setattr(stores.outbox, "open_stream", counted)
    # The shipped wait before the first text (0.4 s): the answer below is whole long before it.
    companion = await boot(pacing=StreamPacing(edit_seconds=0.05))
    provider.stream_pause = 0.0
    provider.script.append(Completion(LONG))
    await tell(companion, "tell me a long story")
    await wait_for(lambda: telegram.sent)
    assert written == []  # no stream's row: the reply went out whole, as any reply
    assert telegram.posts_shown == [] and [text for _, text, _ in telegram.sent] == [LONG]
    assert await all_rows(stores, "SELECT status, streamed_ids FROM deliveries") == [("sent", None)]


async def test_an_answer_done_while_its_stream_row_is_written_takes_that_row_over(
    boot, provider, telegram, stores, monkeypatch
):
    open_stream = stores.outbox.open_stream

    async def slow(*args, **kwargs):
        await asyncio.sleep(0.5)  # the answer is done (8 pieces 0.03 s apart) while the row is written
        return await open_stream(*args, **kwargs)

    monkeypatch.setattr(stores.outbox, "open_stream", slow)
    companion = await boot()
    provider.script.append(Completion(LONG))
    await tell(companion, "tell me a long story")
    await wait_for(lambda: telegram.sent)
    assert await companion.outbox.settle(5.0)  # the stream's task is over: no row is written after this
    # The reply waited for that row and became it: one delivery, none left 'streaming' for the
    # next start to cut off, and the answer sent once, whole (nothing was shown before it).
    assert await all_rows(stores, "SELECT status FROM deliveries") == [("sent",)]
    assert telegram.posts_shown == [] and [text for _, text, _ in telegram.sent] == [LONG]


async def test_a_partial_answer_is_stored_nowhere(boot, provider, telegram, stores, tmp_path):
    companion = await boot()
    provider.script.append(Completion(LONG))
    provider.stream_pause = 0.2
    task = asyncio.create_task(tell(companion, "go"))
    await wait_for(lambda: len(telegram.edits) >= 2)
    shown = telegram.edits[-1][1]
    assert "word3" in shown and not task.done()  # shown on the platform while the model writes ...
    on_disk = b"".join(path.read_bytes() for path in tmp_path.glob("companion.db*"))
    assert b"word3" not in on_disk  # ... and in no byte of the database (nor its WAL)
    await task
    await wait_for(lambda: telegram.sent)


async def test_a_stream_cut_off_by_a_crash_is_taken_over_by_the_answer_after_the_restart(
    boot, provider, telegram, stores, clock
):
    companion = await boot()
    provider.script.append(Completion(LONG))
    provider.stream_pause = 0.2  # slow enough to be cut off mid-answer
    task = asyncio.create_task(tell(companion, "a long one please"))
    await wait_for(lambda: telegram.posts_shown and telegram.edits)
    task.cancel()  # the process dies mid-stream (the turn stays open, its row 'streaming')
    with pytest.raises(asyncio.CancelledError):
        await task
    shown = dict(telegram.messages)
    assert len(shown) == 1 and next(iter(shown.values())) != LONG
    [(status, streamed)] = await all_rows(stores, "SELECT status, streamed_ids FROM deliveries")
    assert status == "streaming" and streamed == next(iter(shown))

    clock.advance(5)
    provider.stream_pause = 0.0
    provider.script.append(Completion("the whole answer, after the restart"))
    restarted = await boot()
    assert await restarted.answer_open_turns() == 1  # what the gateway does once its adapters run
    await wait_for(lambda: telegram.sent)
    # The same message now holds the answer: nothing doubled, nothing partial left.
    assert telegram.messages == {next(iter(shown)): "the whole answer, after the restart"}
    assert len(telegram.posts_shown) == 1
    rows = await all_rows(stores, "SELECT status FROM deliveries")
    assert rows == [("sent",)]


@pytest.mark.engines
async def test_a_private_stream_leaves_no_partial_text_after_its_interval(boot, provider, telegram, stores, clock):
    companion = await boot()
    await tell(companion, f"/private {PASSPHRASE} 1h")
    canary = "CANARY-" + "x" * 40
    provider.script.append(Completion(f"{canary} and more words to stream after it"))
    provider.stream_pause = 0.2
    task = asyncio.create_task(tell(companion, "secret things"))
    await wait_for(lambda: any(canary[:7] in text for _, text in telegram.posts_shown))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    [(segment,)] = await all_rows(stores, "SELECT segment_id FROM deliveries WHERE status = 'streaming'")
    assert segment is not None  # the streaming row belongs to the interval
    await tell(companion, "/forget private")
    assert await all_rows(stores, "SELECT count(*) FROM deliveries WHERE status = 'streaming'") == [(0,)]
    if engines.on_sqlite(stores):  # PostgreSQL's files are test_postgres_shredding.py's (sealed text)
        assert b"CANARY" not in engines.stored_bytes(stores)


async def test_a_tool_call_mid_answer_shows_only_a_constant_line(boot, provider, telegram):
    from core.values.model import ToolCall

    companion = await boot()
    provider.script.append(
        Completion(
            "Let me look that up for you first.",
            tool_calls=(ToolCall("call_1", "recall", '{"query": "SECRET-ARGUMENT"}'),),
        )
    )
    provider.script.append(Completion("Let me look that up for you first. Found nothing."))
    answer = provider._answer

    async def slow_second_round(request):
        if len(provider.requests) == 1:
            await asyncio.sleep(0.3)  # the tool's round takes a while: the constant line shows meanwhile
        return await answer(request)

    provider._answer = slow_second_round  # type: ignore[method-assign]
    await tell(companion, "what did I say about lunch?")
    await wait_for(lambda: telegram.sent)
    shown = [text for _, text in telegram.posts_shown + telegram.edits]
    assert all("SECRET-ARGUMENT" not in text and "recall" not in text for text in shown)
    assert len(provider.requests) == 2, (len(provider.requests), [r.tools for r in provider.requests][:1], shown)
    assert any(copy.STREAM_WORKING in text for text in shown), shown


async def test_the_outbox_report_counts_a_streamed_reply_once_among_the_replies_sent(boot, provider, telegram, stores):
    from core.turn.analytics import _outbox_lines

    companion = await boot()
    provider.script.append(Completion(LONG))
    await tell(companion, "a long one")
    await wait_for(lambda: telegram.sent)
    await tell(companion, "and a short one")  # answered at once: sent whole
    await tell(companion, "and another")
    await wait_for(lambda: len(telegram.sent) == 3)
    report = await stores.outbox.report(1e12)
    assert report["deliveries"] == [("reply", "sent", 3)]
    assert report["streamed"] == 1
    assert "  of the replies sent, shown while written (streamed): 1" in _outbox_lines(report)


async def test_the_constant_tool_line_stays_until_the_next_rounds_words_are_worth_showing(boot, provider, telegram):
    from core.turn.streaming import USEFUL_CHARS
    from core.values.model import ToolCall

    companion = await boot()
    provider.script.append(
        Completion("Let me look that up first.", tool_calls=(ToolCall("call_1", "recall", '{"query": "lunch"}'),))
    )
    provider.script.append(Completion("Found it: nothing about lunch yet, sorry."))
    answer = provider._answer

    async def slow_second_round(request):
        if len(provider.requests) == 1:
            await asyncio.sleep(0.3)  # the tool's round takes a while: the constant line shows meanwhile
            provider.stream_pause = 0.2  # and its words come slowly enough for each to be shown
        return await answer(request)

    provider._answer = slow_second_round  # type: ignore[method-assign]
    await tell(companion, "what did I say about lunch?")
    await wait_for(lambda: telegram.sent)
    shown = [text for _, text in telegram.posts_shown + telegram.edits]
    working = next(i for i, text in enumerate(shown) if copy.STREAM_WORKING in text)
    # After the line, the next thing shown is the new round's words once they are worth it,
    # never a scrap of them ("Fou") in place of the line.
    assert all(copy.STREAM_WORKING in text or len(text.strip()) >= USEFUL_CHARS for text in shown[working:])
