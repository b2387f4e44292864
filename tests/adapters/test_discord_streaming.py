"""Replies shown on Discord while the model writes them (issue 24): the real discord.py client and the
real core against the fake Discord and a fake model streaming at a set token rate. One message is
posted at the first useful text and edited at most once per `edit_seconds`, in DMs and in guild
channels (there as a reply to the message it answers); a 429 on an edit is honoured and the rest
of the reply edits more slowly, a long one never holds the reply back; a long answer continues in
further messages cut at safe points (once a message is followed by the next, its cut is the final
one); the final send edits what was shown, and doing it again changes nothing."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from collections.abc import AsyncIterator

import pytest
import regex

from adapters.discord import MESSAGE_LIMIT
from adapters.discord.streaming import DiscordStreamer, part_nonce
from adapters.llm.openai_compat import OpenAICompatibleProvider
from adapters.rendering.pieces import stream_pieces
from adapters.rendering.text import text_length
from bot.bootstrap import build_companion
from core.delivery.outbox import Outbox
from core.delivery.streams import StreamPacing
from core.ports.clock import SystemClock
from core.turn.config import CompanionConfig
from core.values.errors import DeliveryFailed, DeliveryThrottled
from core.values.model import DeliveryTarget, OutboundDelivery, StreamedReply
from tests.helpers import engines
from tests.helpers.adapters import discord_adapter
from tests.helpers.fake_discord import MESSAGE, FakeDiscordServer, RestFault
from tests.helpers.fake_openai import FakeOpenAIServer

FRIEND = 111  # allowed: discord:111
EDIT_SECONDS = 0.3
# Quick for a test (shipped: one edit a second, the first text after 0.4 s; the subprocess tests
# in tests/bot/test_discord_streaming_wire.py run as shipped).
PACING = StreamPacing(edit_seconds=EDIT_SECONDS, first_seconds=0.1)
TOKEN_SECONDS = 0.04
STORY = " ".join(f"word{n}" for n in range(70)) + "."
FAMILY = "\U0001f469\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466"  # one grapheme cluster, 7 code points


def spaced(times: list[float], at_least: float) -> bool:
    return all(b - a >= at_least for a, b in itertools.pairwise(times))


# --- fixtures ---------------------------------------------------------------------


@pytest.fixture
async def discord_server() -> AsyncIterator[FakeDiscordServer]:
    async with FakeDiscordServer() as server:
        yield server


@pytest.fixture
async def model() -> AsyncIterator[FakeOpenAIServer]:
    async with FakeOpenAIServer() as server:
        server.token_seconds = TOKEN_SECONDS
        yield server


@pytest.fixture
async def core(stores, model, passphrase_hash):
    provider = OpenAICompatibleProvider(model.base_url, max_retries=0)
    companion = build_companion(
        stores,
        provider,
        CompanionConfig(allowed_accounts=frozenset({f"discord:{FRIEND}"}), passphrase_hash=passphrase_hash),
        outbox=Outbox(stores.outbox, SystemClock(), pacing=PACING),
    )
    await companion.start()
    yield companion
    await companion.drain()
    await provider.aclose()


@pytest.fixture
async def adapter(discord_server, core):
    # Typing renewed often, so that a renewal after the first message would show.
    adapter = discord_adapter(discord_server, core, typing_every=0.1)
    await adapter.start()
    yield adapter
    await adapter.aclose()


async def shown_whole(server: FakeDiscordServer, channel: int, pieces: list[str], timeout: float = 30.0) -> None:
    await server.wait_until(lambda: server.shown(channel) == pieces, timeout, "the whole answer shown")


async def sent_rows(stores) -> list[tuple]:
    rows = await engines.rows(stores, "SELECT kind, status, streamed_ids IS NOT NULL FROM deliveries ORDER BY id")
    return [tuple(row) for row in rows]


# --- shown while written ------------------------------------------------------------


async def test_a_dm_answer_is_one_message_edited_as_written_at_most_once_per_edit_seconds(
    discord_server, model, adapter, core, stores
):
    model.reply_text(STORY)
    await discord_server.send_dm(FRIEND, "tell me a story")
    dm = discord_server.dm_channel_id(FRIEND)
    await shown_whole(discord_server, dm, [STORY])
    await core.drain()
    [message] = discord_server.sent  # one message: shown early, then edited, never posted again
    edits = discord_server.edits_of(message.id)
    assert message.content and STORY.startswith(message.content) and message.content != STORY
    assert len(edits) >= 3, len(edits)  # grew while written ...
    assert all(STORY.startswith(edit.content) for edit in edits) and edits[-1].content == STORY  # ... then final
    # At most one post or edit per edit_seconds (with a tolerance for the clocks), the final edit too.
    assert spaced([message.at, *(edit.at for edit in edits)], 0.8 * EDIT_SECONDS)
    # Typing showed until the first message and was not renewed after it (the turn ran on).
    channel_events = [kind for kind, channel in discord_server.events if channel == dm]
    first = channel_events.index("message")
    assert "typing" in channel_events[:first] and "typing" not in channel_events[first:]
    assert await sent_rows(stores) == [("reply", "sent", 1)]


async def test_a_guild_mention_streams_into_a_reply_to_its_message_and_pings_nobody(
    discord_server, model, adapter, core
):
    model.reply_text(STORY)
    asked = await discord_server.send_guild_message(FRIEND, "tell the channel a story")
    channel = discord_server.guild_channel_id
    await shown_whole(discord_server, channel, [STORY])
    [message] = discord_server.sent
    assert message.message_reference is not None and int(message.message_reference["message_id"]) == asked
    assert message.pings == frozenset() and message.content != STORY
    assert len(discord_server.edits_of(message.id)) >= 2


async def test_a_short_answer_goes_out_whole_as_one_message(discord_server, model, adapter, core):
    model.token_seconds = 0.0  # written before its first text is due: nothing to watch
    model.reply_text("Short and sweet.")
    await discord_server.send_dm(FRIEND, "hi")
    dm = discord_server.dm_channel_id(FRIEND)
    await shown_whole(discord_server, dm, ["Short and sweet."])
    assert [m.content for m in discord_server.sent] == ["Short and sweet."] and discord_server.edits == []


# --- rate limits --------------------------------------------------------------------


async def test_a_429_on_an_edit_is_honoured_and_the_rest_of_the_reply_edits_more_slowly(
    discord_server, model, adapter, core
):
    retry_after = 1.0
    model.token_seconds = 0.07  # about 5 s of answer
    discord_server.fail_next("PATCH", MESSAGE, RestFault(status=429, retry_after=retry_after))
    model.reply_text(STORY)
    await discord_server.send_dm(FRIEND, "a story, please")
    dm = discord_server.dm_channel_id(FRIEND)
    await shown_whole(discord_server, dm, [STORY])
    [(_, _, status, throttled_at)] = discord_server.faults_served
    assert status == 429
    [message] = discord_server.sent
    edits = discord_server.edits_of(message.id)
    assert edits[0].at - throttled_at >= 0.8 * retry_after  # waited as told
    # From then on, half as often (at least twice edit_seconds apart), the final edit included.
    assert len(edits) >= 3 and spaced([edit.at for edit in edits], 0.8 * 2 * EDIT_SECONDS)
    assert edits[-1].content == STORY


async def test_a_long_rate_limit_on_an_edit_never_holds_the_reply_back(discord_server, model, adapter, core):
    # discord.py would sleep the minute through and edit again; the adapter hears the 429 instead,
    # and the final edit goes as soon as the answer is written (the lane is not held).
    model.token_seconds = 0.03
    discord_server.fail_next("PATCH", MESSAGE, RestFault(status=429, retry_after=60.0))
    model.reply_text(STORY)
    await discord_server.send_dm(FRIEND, "a story, please")
    dm = discord_server.dm_channel_id(FRIEND)
    await shown_whole(discord_server, dm, [STORY], timeout=15)
    [message] = discord_server.sent
    assert [edit.content for edit in discord_server.edits_of(message.id)] == [STORY]  # nothing in the wait


# --- long answers ---------------------------------------------------------------------


def _sse(text: str, size: int) -> list[str]:
    """The answer as OpenAI streams it, cut every `size` characters (a cluster split across events)."""
    head = {"id": "chatcmpl-cut", "object": "chat.completion.chunk", "created": 0, "model": "fake-model"}

    def chunk(delta: dict, finish: str | None = None) -> str:
        return json.dumps({**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": text[i : i + size]}) for i in range(0, len(text), size)]
    return [*events, chunk({}, "stop")]


def _words(prefix: str, count: int) -> str:
    return " ".join(f"{prefix}{n}" for n in range(count))


FENCE = "```python\n" + "\n".join(f"print('line {n} of the example')" for n in range(22)) + "\n```"
# About 6,000 characters: a paragraph, then a code fence across the 2000th character (the cut comes
# before it), a paragraph ending in family emojis (a cut right after them), a last paragraph.
MIXED = "\n\n".join(
    [
        _words("alpha", 228) + ".",
        f"{FENCE}\n{_words('beta', 137)} {' '.join([FAMILY] * 20)}",
        f"{FAMILY} {_words('gamma', 232)}.",
    ]
)
# One unbroken run of emojis longer than a message: cut between two of them, never inside one.
RUN = FAMILY * 240


@pytest.mark.parametrize(
    ("answer", "count"), [pytest.param(MIXED, 3, id="6000-characters"), pytest.param(RUN, 2, id="emoji-run")]
)
async def test_a_long_answer_continues_in_further_messages_cut_at_safe_points(
    discord_server, model, adapter, core, answer, count
):
    model.reply_stream(_sse(answer, 7), pause=0.004)
    await discord_server.send_dm(FRIEND, "write a lot")
    dm = discord_server.dm_channel_id(FRIEND)
    final = stream_pieces(answer, MESSAGE_LIMIT, final=True)
    assert len(final) == count
    await shown_whole(discord_server, dm, final)
    messages = discord_server.sent
    assert [m.content for m in messages] != final  # they were shown before they were whole
    assert len(messages) == count  # each message posted once
    ends = set(itertools.accumulate(len(c) for c in _clusters(answer)))
    start = 0
    for index, (message, piece) in enumerate(zip(messages, final, strict=True)):
        assert len(piece) <= 2000 and text_length(piece) <= MESSAGE_LIMIT
        assert len(re.findall(r"^```", piece, flags=re.MULTILINE)) % 2 == 0  # no fence cut open
        start = answer.index(piece, start)
        states = [(message.at, message.content), *((e.at, e.content) for e in discord_server.edits_of(message.id))]
        for at, state in states:
            # Every state shown was the answer from this message's start to the end of a whole
            # cluster (no family emoji half shown) ...
            assert answer.startswith(state, start) and start + len(state) in ends, state[-20:]
            # ... and once the next message began, this one's cut was the final one.
            if index + 1 < count and at > messages[index + 1].at:
                assert state == piece
    # Nothing lost or doubled: the clusters of the messages are the answer's, whitespace aside.
    assert [c for m in final for c in _clusters(m) if not c.isspace()] == [
        c for c in _clusters(answer) if not c.isspace()
    ]


def _clusters(text: str) -> list[str]:
    return regex.findall(r"\X", text)


# --- the final send of a streamed reply (send_delivery), idempotent -------------------------


def _reply(channel: int, nonce: str = "0123456789abcdef") -> StreamedReply:
    return StreamedReply(delivery_id=1, conversation_id=1, target=DeliveryTarget("discord", str(channel)), nonce=nonce)


def _final(reply: StreamedReply, text: str, shown: tuple[str, ...], parts_sent: int = 0) -> OutboundDelivery:
    return OutboundDelivery(
        id=reply.delivery_id,
        conversation_id=reply.conversation_id,
        kind="reply",
        target=reply.target,
        nonce=reply.nonce,
        text=text,
        parts_sent=parts_sent,
        attempts=0,
        streamed=shown,
    )


THREE = "\n\n".join(_words(p, 200) for p in ("one", "two", "three"))


async def test_the_final_send_edits_the_messages_shown_continues_past_them_and_again_changes_nothing(
    discord_server, adapter
):
    dm = discord_server.dm_channel_id(FRIEND)
    reply = _reply(dm)
    streamer = adapter.streamer
    shown = (await streamer.post(reply, "one0 one1", 0), await streamer.post(reply, "two0", 1))
    pieces = streamer.pieces(THREE, final=True)
    assert len(pieces) == 3
    assert await adapter.send_delivery(_final(reply, THREE, shown)) == 3
    assert discord_server.shown(dm) == pieces
    assert [str(m.id) for m in discord_server.sent[:2]] == list(shown) and len(discord_server.sent) == 3
    # Sent again (a crash before the row was marked): the same messages, the same words.
    assert await adapter.send_delivery(_final(reply, THREE, shown)) == 3
    assert discord_server.shown(dm) == pieces and len(discord_server.sent) == 3
    # From part 2 on (parts 0 and 1 went out): the first two messages are not touched again.
    edits_before = len(discord_server.edits)
    assert await adapter.send_delivery(_final(reply, THREE, shown, parts_sent=2)) == 3
    assert len(discord_server.edits) == edits_before and len(discord_server.sent) == 3


async def test_the_final_send_deletes_messages_shown_past_a_shorter_answer(discord_server, adapter):
    dm = discord_server.dm_channel_id(FRIEND)
    reply = _reply(dm)
    streamer = adapter.streamer
    shown = tuple([await streamer.post(reply, f"partial {n}", n) for n in range(3)])
    assert await adapter.send_delivery(_final(reply, "In the end, a short answer.", shown)) == 1
    assert discord_server.shown(dm) == ["In the end, a short answer."]
    assert [message for _, message in discord_server.deleted] == [int(shown[1]), int(shown[2])]
    assert await adapter.send_delivery(_final(reply, "In the end, a short answer.", shown)) == 1  # again: no error
    assert discord_server.shown(dm) == ["In the end, a short answer."]


async def test_a_message_the_stream_posted_but_no_row_recorded_is_taken_back_by_its_nonce_and_edited(
    discord_server, adapter
):
    dm = discord_server.dm_channel_id(FRIEND)
    reply = _reply(dm)
    streamer = adapter.streamer
    recorded = await streamer.post(reply, "one0", 0)
    await streamer.post(reply, "two0 two1", 1)  # posted; the process died before its id was recorded
    await streamer.post(reply, "three0", 2)
    assert await adapter.send_delivery(_final(reply, THREE, (recorded,))) == 3
    assert discord_server.shown(dm) == streamer.pieces(THREE, final=True)
    assert len(discord_server.sent) == 3  # no second copy of either


async def test_a_reply_never_shown_takes_back_a_message_its_stream_posted_unrecorded(discord_server, adapter):
    dm = discord_server.dm_channel_id(FRIEND)
    reply = _reply(dm)
    await adapter.streamer.post(reply, "Half an ans", 0)  # the only post, lost before it was recorded
    assert await adapter.send_delivery(_final(reply, "Half an answer, then all of it.", ())) == 1
    assert discord_server.shown(dm) == ["Half an answer, then all of it."] and len(discord_server.sent) == 1


async def test_a_shown_message_deleted_meanwhile_is_sent_again_as_a_new_one(discord_server, adapter):
    channel = discord_server.guild_channel_id
    reply = _reply(channel)
    shown = (await adapter.streamer.post(reply, "some words", 0),)
    del discord_server.messages[int(shown[0])]  # a moderator deleted it
    assert await adapter.send_delivery(_final(reply, "All the words.", shown)) == 1
    assert discord_server.shown(channel) == ["All the words."] and len(discord_server.sent) == 2


# --- the streamer's failures, as the outbox reads them -----------------------------------------


async def test_an_edit_discord_refuses_is_a_failure_and_a_429_a_wait(discord_server, adapter):
    channel = discord_server.guild_channel_id
    reply = _reply(channel)
    streamer = adapter.streamer
    message_id = await streamer.post(reply, "first words", 0)
    with pytest.raises(DeliveryFailed) as refused:
        await streamer.edit(reply, message_id, "x" * 2001)
    assert refused.value.kind == "http 400" and refused.value.permanent
    with pytest.raises(DeliveryFailed) as missing:
        await streamer.edit(reply, str(int(message_id) + 1), "other words")
    assert missing.value.kind == "http 404" and not isinstance(missing.value, DeliveryThrottled)
    discord_server.fail_next("PATCH", MESSAGE, RestFault(status=429, retry_after=2.5))
    with pytest.raises(DeliveryThrottled) as throttled:
        await streamer.edit(reply, message_id, "more words")
    assert throttled.value.retry_after == 2.5
    assert [edit.content for edit in discord_server.edits] == []  # none taken: discord.py did not send again
    await streamer.edit(reply, message_id, "more words")
    await streamer.edit(reply, message_id, "more words")  # the same words again: no error
    assert discord_server.shown(channel) == ["more words"]


async def test_a_429_on_a_post_is_a_wait_and_a_post_that_hangs_stops_the_showing(discord_server, adapter):
    channel = discord_server.guild_channel_id
    reply = _reply(channel)
    discord_server.fail_next("POST", "/channels/{channel_id}/messages", RestFault(status=429, retry_after=3.0))
    with pytest.raises(DeliveryThrottled) as throttled:
        await adapter.streamer.post(reply, "first words", 0)
    assert throttled.value.retry_after == 3.0 and discord_server.sent == []
    streamer = DiscordStreamer(lambda: adapter.client, timeout=0.3)
    discord_server.hold_messages = True
    try:
        with pytest.raises(DeliveryFailed) as hung:
            await asyncio.wait_for(streamer.post(reply, "first words", 0), 10)  # bounded here, not by the test
    finally:
        discord_server.hold_messages = False
    assert hung.value.kind == "timeout" and not hung.value.permanent
    message_id = await streamer.post(reply, "first words", 0)
    assert discord_server.message_posts[-1] == (channel, part_nonce(reply.nonce, 0))
    assert discord_server.shown(channel) == ["first words"] and message_id == str(discord_server.sent[0].id)
