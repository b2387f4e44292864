"""The Telegram connection parses each fetched update once, with the bot, and sets aside what cannot be parsed."""

from __future__ import annotations

from typing import Any

import pytest
from telegram import Update

from adapters.telegram.connection import TelegramConnection
from core.values.edge import EdgeSettings
from tests.helpers.fake_telegram import FakeTelegramServer

USER = 111


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
