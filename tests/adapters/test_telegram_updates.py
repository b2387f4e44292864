"""The Telegram connection parses each fetched update once, with the bot, and sets aside what cannot be parsed;
a part, and a reply shown while written, go out with the parameters of python-telegram-bot's own methods."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from telegram import MessageEntity, ReplyParameters, Update

from adapters.telegram.connection import TelegramConnection
from adapters.telegram.formatting import telegram_parts
from adapters.telegram.sender import TelegramSender, keyboard
from adapters.telegram.streaming import TelegramStreamer
from core.values.edge import EdgeSettings
from core.values.model import Confirmation, DeliveryTarget, OutboundDelivery, StreamedReply
from tests.helpers.fake_telegram import FakeTelegramServer

USER, GROUP = 111, -100500


async def test_each_fetched_update_is_parsed_once_with_the_bot(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed: list[Any] = []
    de_json = Update.de_json

    def counted(data: Any, bot: Any = None) -> Update:
        parsed.append(data.get("update_id") if isinstance(data, dict) else data)
        return de_json(data, bot)

    monkeypatch.setattr(Update, "de_json", staticmethod(counted))
    async with FakeTelegramServer() as telegram:
        connection = TelegramConnection(telegram.token, EdgeSettings(), base_url=telegram.base_url)
        await connection.open(())
        try:
            telegram.send_text(USER, USER, "one")
            poison = telegram.send_unparsable(USER, USER, "two")  # its update id
            telegram.send_text(USER, USER, "three")
            bot = connection.bot
            updates = connection.fetched(await bot.get_updates(timeout=0))
            ids = [u.update_id for u in updates]
            assert poison not in ids
            assert [u.message.text for u in updates if u.message] == ["one", "three"]
            assert all(u.get_bot() is bot and u.message.get_bot() is bot for u in updates if u.message)
            assert sorted(parsed) == sorted([*ids, poison])  # each update once
            assert [u.update_id for u in connection.take_unparsable()] == [poison]
            assert connection.fetched(()) == ()
        finally:
            await connection.close()


async def test_a_part_is_sent_and_edited_with_the_parameters_of_the_bots_own_methods() -> None:
    """The sender posts a part (bot.send_message) and edits a streamed message into one
    (bot.edit_message_text) with those methods' parameters, reading only the id of the answer."""
    async with FakeTelegramServer() as telegram:
        connection = TelegramConnection(telegram.token, EdgeSettings(), base_url=telegram.base_url)
        await connection.open(())
        try:
            bot = connection.bot
            sender = TelegramSender(connection, on_moved=_not_moved)
            quoted = telegram.send_text(GROUP, USER, "a question", chat_type="supergroup")
            confirm = Confirmation("Export", "/export confirm")
            text = "**Bold**, `code` and [a link](https://example.com)."
            (part,) = telegram_parts(text)
            assert part.entities
            target = DeliveryTarget("telegram", str(GROUP), reply_to=str(quoted), thread_id="7")
            delivery = OutboundDelivery(1, 1, "reply", target, "nonce", text, 0, 0, confirm=confirm)

            assert await sender.send_delivery(delivery) == 1
            sent = telegram.sent[-1]
            entities = [MessageEntity(**entity.as_dict()) for entity in part.entities]
            reply = ReplyParameters(quoted, allow_sending_without_reply=True)
            await bot.send_message(
                GROUP,
                part.text,
                entities=entities,
                reply_parameters=reply,
                message_thread_id=7,
                reply_markup=keyboard(confirm),
            )
            ours, theirs = telegram.calls_of("sendMessage")[-2:]
            assert ours == theirs

            shown = (await bot.send_message(USER, "shown while written")).message_id
            await bot.edit_message_text(part.text, chat_id=USER, message_id=shown, entities=entities)
            streamed = OutboundDelivery(2, 1, "reply", DeliveryTarget("telegram", str(USER)), "n", text, 0, 0)
            streamed = dataclasses.replace(streamed, streamed=(str(shown),))
            assert await sender.send_delivery(streamed) == 1  # "not modified": it shows the part already
            theirs, ours = telegram.calls_of("editMessageText")[-2:]
            assert ours == theirs
            assert sent.entities and sent.reply_markup is not None
        finally:
            await connection.close()


async def test_a_reply_is_shown_while_written_with_the_parameters_of_the_bots_own_methods() -> None:
    """The streamer posts (bot.send_message) and edits (bot.edit_message_text) with those methods'
    parameters, reading only the id of the answer."""
    async with FakeTelegramServer() as telegram:
        connection = TelegramConnection(telegram.token, EdgeSettings(), base_url=telegram.base_url)
        await connection.open(())
        try:
            bot = connection.bot
            streamer = TelegramStreamer(connection, moved_to=lambda chat: None)
            quoted = telegram.send_text(GROUP, USER, "a question", chat_type="supergroup")
            target = DeliveryTarget("telegram", str(GROUP), reply_to=str(quoted), thread_id="7")
            reply = StreamedReply(1, 1, target, "nonce")

            shown = await streamer.post(reply, "The first words **of", 0)
            assert shown == str(telegram.sent[-1].message_id)
            reply_parameters = ReplyParameters(quoted, allow_sending_without_reply=True)
            await bot.send_message(
                GROUP, "The first words **of", reply_parameters=reply_parameters, message_thread_id=7
            )
            ours, theirs = telegram.calls_of("sendMessage")[-2:]
            assert ours == theirs

            await bot.edit_message_text("The first words **of a reply", chat_id=GROUP, message_id=int(shown))
            await streamer.edit(reply, shown, "The first words **of a reply")  # "not modified": shown already
            theirs, ours = telegram.calls_of("editMessageText")[-2:]
            assert ours == theirs
        finally:
            await connection.close()


async def _not_moved(old: str, new: str) -> None:
    raise AssertionError("no chat moves here")
