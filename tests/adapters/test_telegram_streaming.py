"""Replies shown on Telegram while the model writes them (issue 24): the real python-telegram-bot and
core against the fake Bot API (as strict as Telegram for editMessageText) and a fake model that
streams at a set token rate. One message is posted early, edited at most once per edit interval,
slowed down by flood control, and finished by an edit into the formatted reply."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import math
from collections.abc import AsyncIterator

import pytest

from adapters.llm.openai_compat import OpenAICompatibleProvider
from adapters.rendering.pieces import stream_pieces
from adapters.storage.stores import Stores
from adapters.telegram.formatting import render
from bot.bootstrap import build_companion, core_entry
from core.delivery.outbox import Outbox
from core.delivery.streams import StreamPacing
from core.ports.clock import SystemClock
from core.privacy.secrets import hash_passphrase
from core.turn.companion import Companion
from core.turn.config import CompanionConfig
from core.values import copy
from core.values.errors import DeliveryFailed, DeliveryThrottled
from core.values.model import DeliveryTarget, OutboundDelivery, StreamedReply
from tests.helpers import engines
from tests.helpers.adapters import AttachedPlatform, telegram_adapter
from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.fake_telegram import FakeTelegramServer, SentMessage, check_message

USER, GROUP = 111, -100500
BOT = "companion_test_bot"
# Quicker than shipped (1.0 s), so a test streams for a few seconds only; the first text is still
# shown 0.4 s after the answer's first useful words, as shipped.
EDIT_SECONDS = 0.3
TOKEN_SECONDS = 0.05


def story(words: int) -> str:
    return " ".join(f"word{n}" for n in range(words)) + "."


@pytest.fixture
async def telegram() -> AsyncIterator[FakeTelegramServer]:
    async with FakeTelegramServer(username=BOT) as server:
        yield server


@pytest.fixture
async def companion(stores: Stores, model: FakeOpenAIServer) -> AsyncIterator[Companion]:
    provider = OpenAICompatibleProvider(model.base_url, "sk-test", "test-model", timeout=10.0)
    companion = build_companion(
        stores,
        provider,
        CompanionConfig(allowed_accounts=frozenset({f"telegram:{USER}"}), passphrase_hash=hash_passphrase("sesame")),
        outbox=Outbox(stores.outbox, SystemClock(), pacing=StreamPacing(EDIT_SECONDS)),
    )
    await companion.start()
    yield companion
    await companion.drain()
    await provider.aclose()


@pytest.fixture
async def adapter(telegram: FakeTelegramServer, companion: Companion) -> AsyncIterator[AttachedPlatform]:
    # Typing renewed often: were it not stopped by the first piece, it would show during the stream.
    adapter = telegram_adapter(telegram, core_entry(companion), typing_interval=0.2)
    await adapter.start()
    yield adapter
    await adapter.aclose()


async def answered(telegram: FakeTelegramServer, stores: Stores, chat: int = USER) -> list[SentMessage]:
    """Wait until the reply's delivery is sent; the bot's messages in `chat` as they show now."""
    deadline = asyncio.get_running_loop().time() + 30
    while not await engines.rows(stores, "SELECT 1 FROM deliveries WHERE kind = 'reply' AND status = 'sent'"):
        assert asyncio.get_running_loop().time() < deadline, "the reply's delivery was not sent"
        await asyncio.sleep(0.05)
    return [m for m in telegram.sent if m.chat_id == chat and not m.deleted]


async def rows(stores: Stores, sql: str) -> list[tuple]:
    return [tuple(row) for row in await engines.rows(stores, sql)]


def requests_times(telegram: FakeTelegramServer, chat: int) -> list[float]:
    """When each post and edit of the chat's messages was taken, in order."""
    return sorted([m.at for m in telegram.sent if m.chat_id == chat] + [e.at for e in telegram.edits_of(chat)])


async def test_a_reply_is_posted_early_and_edited_at_most_once_per_edit_interval(
    adapter: AttachedPlatform, telegram: FakeTelegramServer, model: FakeOpenAIServer, stores: Stores
) -> None:
    answer = story(60)
    model.token_seconds = TOKEN_SECONDS  # 60 words: about three seconds of writing
    model.reply_text(answer, delay=1.0)  # a second of thought first: typing shows meanwhile
    telegram.send_text(USER, USER, "tell me a story")
    [message] = await answered(telegram, stores)
    assert message.text == answer and message.reply_to is None  # a direct chat: nothing quoted
    [post] = telegram.calls_of("sendMessage")
    assert answer.startswith(post["text"]) and post["text"] != answer  # shown before it was written
    edits = telegram.edits_of(USER)
    writing = 60 * TOKEN_SECONDS
    assert 3 <= len(edits) <= math.ceil(writing / EDIT_SECONDS) + 2
    times = requests_times(telegram, USER)
    assert min(b - a for a, b in itertools.pairwise(times)) >= 0.8 * EDIT_SECONDS
    # Typing showed while the model thought, and stopped with the first piece (renewed every 0.2 s,
    # it would otherwise have gone on through the three seconds of the stream).
    methods = [name for name, _ in telegram.calls]
    first_post = methods.index("sendMessage")
    assert "sendChatAction" in methods[:first_post]
    assert "sendChatAction" not in methods[first_post:]
    assert await rows(stores, "SELECT status, parts_sent, attempts FROM deliveries") == [("sent", 1, 0)]


async def test_a_429_on_an_edit_is_waited_out_and_the_rest_of_the_reply_edits_more_slowly(
    adapter: AttachedPlatform, telegram: FakeTelegramServer, model: FakeOpenAIServer, stores: Stores
) -> None:
    answer = story(100)
    model.token_seconds = TOKEN_SECONDS  # five seconds of writing
    model.reply_text(answer)
    telegram.send_text(USER, USER, "a long one")
    await telegram.wait_for(lambda: len(telegram.edits_of(USER)) >= 1)
    telegram.flood(2)  # the next edit is answered 429 with retry_after 2
    [message] = await answered(telegram, stores)
    assert message.text == answer
    [(_, flooded_at, retry_after)] = telegram.floods  # one 429: the lane waited rather than asking again
    assert retry_after == 2
    later = [edit.at for edit in telegram.edits_of(USER) if edit.at > flooded_at]
    assert later, "no edit after the flood: the test proves nothing"
    assert later[0] - flooded_at >= 0.95 * retry_after  # not before Telegram said
    gaps = [b - a for a, b in itertools.pairwise(later)]
    slower = StreamPacing(EDIT_SECONDS).slower(EDIT_SECONDS)
    assert gaps and min(gaps) >= 0.8 * slower  # and more slowly from then on
    assert await rows(stores, "SELECT status, attempts FROM deliveries") == [("sent", 0)]


async def test_an_edit_that_changes_nothing_is_success_so_a_final_send_done_again_changes_nothing(
    adapter: AttachedPlatform, telegram: FakeTelegramServer, model: FakeOpenAIServer, stores: Stores
) -> None:
    answer = story(40)
    model.token_seconds = TOKEN_SECONDS
    model.reply_text(answer)
    telegram.send_text(USER, USER, "go")
    [message] = await answered(telegram, stores)
    [row] = await rows(stores, "SELECT id, conversation_id, nonce, streamed_ids FROM deliveries")
    edits, calls = len(telegram.edits), len(telegram.calls_of("editMessageText"))
    # The final send once more, as after a crash between its edits and its mark: Telegram answers
    # "message is not modified", which is success; nothing is posted, nothing changes.
    again = OutboundDelivery(
        row[0], row[1], "reply", DeliveryTarget("telegram", str(USER)), row[2], answer, 0, 0, streamed=(row[3],)
    )
    assert await adapter.send_delivery(again) == 1
    assert len(telegram.calls_of("editMessageText")) == calls + 1  # asked, and refused as unchanged ...
    assert len(telegram.edits) == edits  # ... so nothing was edited
    assert telegram.texts_to(USER) == [answer] and len(telegram.calls_of("sendMessage")) == 1
    # The streamer's own edit of a message to what it shows: success too.
    reply = StreamedReply(row[0], row[1], DeliveryTarget("telegram", str(USER)), row[2])
    await adapter.streamer.edit(reply, str(message.message_id), answer)  # type: ignore[union-attr]


def formatted_answer(paragraphs: int) -> str:
    return "\n\n".join(
        f"Paragraph {n} says **something bold number {n}** and then `code_{n}()` before more plain words,"
        f" so that the whole answer grows well past one Telegram message of 4096 units; *slanted {n}*."
        for n in range(paragraphs)
    )


async def test_a_6000_character_answer_continues_in_a_second_message_with_valid_entities_in_both(
    adapter: AttachedPlatform, telegram: FakeTelegramServer, model: FakeOpenAIServer, stores: Stores
) -> None:
    answer = formatted_answer(32)
    assert 5800 <= len(answer) <= 6500
    model.token_seconds = 0.004  # about a thousand words: four seconds
    model.reply_text(answer)
    telegram.send_text(USER, USER, "write me a lot")
    messages = await answered(telegram, stores)
    assert len(messages) == 2
    pieces = stream_pieces(answer, 4096, final=True)
    assert [m.text for m in messages] == [render(piece)[0] for piece in pieces]
    assert pieces[0].endswith(".") and pieces[1].startswith("Paragraph")  # cut between paragraphs
    for message in messages:
        _, refusal = check_message(message.text, list(message.entities))
        assert refusal is None
        kinds = {entity["type"] for entity in message.entities}
        assert {"bold", "code", "italic"} <= kinds  # formatted in each message, not just the first
        assert "**" not in message.text and "`" not in message.text  # no marker left unrendered
    # Both were shown while written (plain Markdown), then edited into their formatted parts.
    posts = telegram.calls_of("sendMessage")
    assert len(posts) == 2 and all("entities" not in post for post in posts)
    assert await rows(stores, "SELECT status, parts_sent FROM deliveries") == [("sent", 2)]


async def test_a_tool_call_in_the_middle_of_an_answer_shows_only_the_constant_line(
    adapter: AttachedPlatform, telegram: FakeTelegramServer, model: FakeOpenAIServer, stores: Stores
) -> None:
    model.token_seconds = TOKEN_SECONDS
    model.reply_tool_call(
        "recall", {"query": "SECRET-ARGUMENT lunch"}, text="Let me look through what you told me before."
    )
    model.reply_text("I found nothing about lunch, sorry.", delay=1.5)  # the tool's round takes a while
    telegram.send_text(USER, USER, "what did I say about lunch?")
    [message] = await answered(telegram, stores)
    assert message.text == "I found nothing about lunch, sorry."
    shown = [p["text"] for p in telegram.calls_of("sendMessage")] + [e.text for e in telegram.edits_of(USER)]
    assert any(text.endswith(copy.STREAM_WORKING) for text in shown), shown
    assert all("SECRET" not in text and "recall" not in text and "query" not in text for text in shown)
    assert len(model.requests) == 2


@pytest.mark.parametrize("chat", ["direct", "group"])
async def test_a_streamed_reply_quotes_the_message_in_a_group_as_a_whole_reply_would(
    adapter: AttachedPlatform, telegram: FakeTelegramServer, model: FakeOpenAIServer, stores: Stores, chat: str
) -> None:
    answer = story(30)
    model.token_seconds = TOKEN_SECONDS
    model.reply_text(answer)
    if chat == "group":
        where = GROUP
        asked = telegram.send_text(GROUP, USER, f"@{BOT} tell the group a story", chat_type="supergroup")
    else:
        where = USER
        asked = telegram.send_text(USER, USER, "tell me a story")
    [message] = await answered(telegram, stores, where)
    assert message.text == answer
    assert message.reply_to == (asked if chat == "group" else None)
    assert telegram.edits_of(where), "not streamed: the test proves nothing"


# --- the final send of a streamed reply, and the streamer's answers ---------------------------------


async def test_a_final_text_shorter_than_what_was_shown_deletes_the_messages_left_over(
    adapter: AttachedPlatform, telegram: FakeTelegramServer, companion: Companion
) -> None:
    target = DeliveryTarget("telegram", str(USER))
    reply = StreamedReply(7, 1, target, "n")
    streamer = adapter.streamer
    assert streamer is not None
    shown = [await streamer.post(reply, text, index) for index, text in enumerate(["a" * 4000, "b" * 1000])]
    delivery = OutboundDelivery(7, 1, "reply", target, "n", "the **whole** answer, short after all", 0, 0)
    assert await adapter.send_delivery(dataclasses.replace(delivery, streamed=tuple(shown))) == 1
    assert telegram.texts_to(USER) == ["the whole answer, short after all"]
    assert telegram.message(USER, int(shown[0])).entities == ({"type": "bold", "offset": 4, "length": 5},)
    assert telegram.deleted == [(USER, int(shown[1]))]


async def test_a_streamed_message_the_person_deleted_gets_its_part_as_a_new_message(
    adapter: AttachedPlatform, telegram: FakeTelegramServer
) -> None:
    target = DeliveryTarget("telegram", str(USER))
    reply = StreamedReply(8, 1, target, "n")
    assert adapter.streamer is not None
    shown = await adapter.streamer.post(reply, "the beginning", 0)
    await adapter.bot.delete_message(USER, int(shown))  # as the person could
    delivery = OutboundDelivery(8, 1, "reply", target, "n", "the beginning and the end", 0, 0, streamed=(shown,))
    assert await adapter.send_delivery(delivery) == 1
    assert telegram.texts_to(USER) == ["the beginning and the end"]


async def test_the_streamer_hands_flood_control_back_with_its_wait_and_other_refusals_as_failures(
    adapter: AttachedPlatform, telegram: FakeTelegramServer
) -> None:
    target = DeliveryTarget("telegram", str(USER))
    reply = StreamedReply(9, 1, target, "n")
    streamer = adapter.streamer
    assert streamer is not None
    shown = await streamer.post(reply, "first words", 0)
    await streamer.edit(reply, shown, "first words")  # "message is not modified": success
    for message_id, text in [("999999", "no such message"), (shown, "😀" * 2049)]:  # not found; too long
        with pytest.raises(DeliveryFailed) as failed:
            await streamer.edit(reply, message_id, text)
        assert not isinstance(failed.value, DeliveryThrottled) and failed.value.kind == "BadRequest"
    with pytest.raises(DeliveryFailed):
        await streamer.post(reply, "x" * 4097, 1)  # past 4096 UTF-16 code units
    telegram.flood(3)
    with pytest.raises(DeliveryThrottled) as throttled:
        await streamer.edit(reply, shown, "first words and more")
    assert throttled.value.retry_after == 3
    assert telegram.texts_to(USER) == ["first words"]
    assert len(telegram.calls_of("editMessageText")) == 4 and not telegram.edits


async def test_a_final_send_cut_off_after_some_parts_counts_them_and_goes_on_from_the_next_one(
    adapter: AttachedPlatform, telegram: FakeTelegramServer
) -> None:
    target = DeliveryTarget("telegram", str(USER))
    reply = StreamedReply(10, 1, target, "n")
    assert adapter.streamer is not None
    text = "**First** paragraph. " + "a" * 4060 + "\n\nThe second paragraph, past the first message."
    shown = await adapter.streamer.post(reply, text[:200], 0)  # only the first piece was shown
    delivery = OutboundDelivery(10, 1, "reply", target, "n", text, 0, 0, streamed=(shown,))
    telegram.fail_next("sendMessage", 400, description="Bad Request: chat not found")
    with pytest.raises(DeliveryFailed) as failed:
        await adapter.send_delivery(delivery)
    assert failed.value.parts_sent == 1  # the first message was edited; the second part did not go
    edits = len(telegram.calls_of("editMessageText"))
    assert await adapter.send_delivery(dataclasses.replace(delivery, parts_sent=1)) == 2
    assert len(telegram.calls_of("editMessageText")) == edits  # the first part is not touched again
    assert [m.text[:5] for m in telegram.sent] == ["First", "The s"]
    assert telegram.sent[0].entities == ({"type": "bold", "offset": 0, "length": 5},)
