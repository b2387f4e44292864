"""Confirmation buttons on Telegram: the real python-telegram-bot and core against the fake Bot API."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator

import pytest

from adapters.llm.openai_compat import OpenAICompatibleProvider
from adapters.storage.stores import Stores
from adapters.telegram import intake
from bot.bootstrap import build_companion, core_entry
from core.commands.export import CONFIRM_WINDOW
from core.delivery.outbox import Outbox
from core.ports.clock import SystemClock
from core.turn.companion import Companion
from core.turn.config import CompanionConfig
from tests.conftest import PASSPHRASE
from tests.helpers import engines
from tests.helpers.adapters import AttachedPlatform, telegram_adapter
from tests.helpers.fake_telegram import FakeTelegramServer
from tests.helpers.waiting import wait_for_stored

USER = 111
CONFIRM = "companion:/export confirm"


@pytest.fixture
async def telegram() -> AsyncIterator[FakeTelegramServer]:
    async with FakeTelegramServer() as server:
        yield server


@pytest.fixture
async def companion(stores, model, passphrase_hash, clock) -> AsyncIterator[Companion]:
    provider = OpenAICompatibleProvider(model.base_url, "sk-test", "test-model", timeout=5.0)
    companion = build_companion(
        stores,
        provider,
        CompanionConfig(
            allowed_accounts=frozenset({f"telegram:{USER}"}),
            passphrase_hash=passphrase_hash,
            allow_private_export=True,
            private_idle_seconds=None,
        ),
        outbox=Outbox(stores.outbox, SystemClock()),
        clock=clock,  # moved past the five minutes a confirmation lasts
    )
    await companion.start()
    yield companion
    await companion.drain()
    await provider.aclose()


@pytest.fixture
async def adapter(telegram, companion) -> AsyncIterator[AttachedPlatform]:
    adapter = telegram_adapter(telegram, core_entry(companion))
    await adapter.start()
    yield adapter
    await adapter.aclose()


def artifacts(stores: Stores) -> int:
    with sqlite3.connect(engines.sqlite_file(stores)) as db:
        return db.execute("SELECT count(*) FROM artifacts").fetchone()[0]


async def crossing_asked(telegram: FakeTelegramServer) -> int:
    """Private mode, a private line, `/export`: returns the id of the bot's message with the keyboard."""
    for count, text in enumerate((f"/private {PASSPHRASE}", "a private line", "/export"), start=1):
        telegram.send_text(USER, USER, text)
        await telegram.wait_for_sent(count)
    asked = telegram.sent[-1]
    assert "NEW, NON-PRIVATE artifact" in asked.text
    assert asked.reply_markup == {
        "inline_keyboard": [[{"text": "Create the non-private file", "callback_data": CONFIRM}]]
    }
    return asked.message_id


async def test_the_export_crossing_is_confirmed_by_its_inline_button(adapter, telegram, stores):
    asked = await crossing_asked(telegram)
    query = telegram.press_button(USER, USER, asked, CONFIRM)
    await telegram.wait_for(lambda: any(m.text.startswith("[document companion-crossing-") for m in telegram.sent))
    assert [a["callback_query_id"] for a in telegram.callback_answers] == [query]  # the spinner stopped
    assert any(m.text.startswith("Created non-private artifact #1") for m in telegram.sent)
    assert artifacts(stores) == 1


async def test_a_button_pressed_after_the_confirmation_was_used_says_so(adapter, telegram, stores):
    asked = await crossing_asked(telegram)
    telegram.press_button(USER, USER, asked, CONFIRM)
    await telegram.wait_for(lambda: any(m.text.startswith("[document companion-crossing-") for m in telegram.sent))
    before = len(telegram.sent)
    telegram.press_button(USER, USER, asked, CONFIRM)
    (answer,) = (await telegram.wait_for_sent(before + 1))[before:]
    assert "no crossing waiting for confirmation" in answer.text
    assert len(telegram.callback_answers) == 2 and artifacts(stores) == 1


async def test_a_button_pressed_after_the_confirmation_expired_says_so(adapter, telegram, stores, clock):
    asked = await crossing_asked(telegram)
    clock.advance(CONFIRM_WINDOW + 1)
    before = len(telegram.sent)
    telegram.press_button(USER, USER, asked, CONFIRM)
    (answer,) = (await telegram.wait_for_sent(before + 1))[before:]
    assert "no crossing waiting for confirmation (it lasts 5 minutes)" in answer.text
    assert artifacts(stores) == 0


async def test_the_typed_confirmation_still_works_on_telegram(adapter, telegram, stores):
    await crossing_asked(telegram)
    before = len(telegram.sent)
    telegram.send_text(USER, USER, "/export confirm")
    await telegram.wait_for_sent(before + 2)  # the answer and its file
    assert telegram.sent[before].text.startswith("Created non-private artifact #1")
    assert artifacts(stores) == 1


async def test_the_bot_asks_telegram_for_button_presses(adapter, telegram):
    await telegram.wait_for_polling()
    assert telegram.allowed_updates is not None and "callback_query" in telegram.allowed_updates


def test_the_fake_refuses_callback_data_longer_than_64_bytes():
    from tests.helpers.fake_telegram import BadRequest, _inline_keyboard

    ok = {"inline_keyboard": [[{"text": "Yes", "callback_data": "x" * 64}]]}
    assert _inline_keyboard(ok) == ok
    for bad in (
        {"inline_keyboard": [[{"text": "Yes", "callback_data": "x" * 65}]]},
        {"inline_keyboard": [[{"text": "Yes", "callback_data": ""}]]},
        {"inline_keyboard": [[{"text": "Yes"}]]},
        {"inline_keyboard": [[{"text": "", "callback_data": "x"}]]},
    ):
        with pytest.raises(BadRequest):
            _inline_keyboard(bad)


async def test_a_press_is_stored_in_the_update_ledger_at_once_unlike_a_message(
    telegram, companion, stores, monkeypatch
):
    # A message's mark waits for the coalesced write (here: for the stop); a press, which no inbox key
    # holds, is written as soon as it was handled, so a kill after its answer cannot run it again.
    monkeypatch.setattr(intake, "LEDGER_SECONDS", 3600.0)
    adapter = telegram_adapter(telegram, core_entry(companion))
    key = f"telegram:offset:{telegram.bot_id}"
    await adapter.start()
    try:
        asked = await crossing_asked(telegram)  # updates 1 to 3
        assert await stores.modes.get_adapter_state(key) is None
        telegram.press_button(USER, USER, asked, CONFIRM)  # update 4
        await wait_for_stored(lambda: stores.modes.get_adapter_state(key), what="the press in the update ledger")
        assert await stores.modes.get_adapter_state(key) == "4"
    finally:
        await adapter.aclose()
