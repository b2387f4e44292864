"""Confirmations the core asks for carry a button description (core/values/model.py Confirmation)."""

from __future__ import annotations

from core.commands.registry import carries_secret
from tests.conftest import PASSPHRASE
from tests.helpers.chat import say


async def test_the_crossing_question_offers_its_typed_confirmation_as_a_button(make_companion):
    companion = await make_companion(allow_private_export=True)
    await say(companion, f"/private {PASSPHRASE}")
    asked = await say(companion, "/export")
    assert asked.confirm is not None and asked.confirm.command == "/export confirm"
    assert asked.confirm.command in asked.text  # the same words typed still work
    assert not carries_secret(asked.confirm.command)
    pressed = await say(companion, asked.confirm.command)
    assert pressed.text.startswith("Created non-private artifact #1") and pressed.confirm is None


async def test_replies_that_ask_nothing_carry_no_button(make_companion):
    companion = await make_companion(allow_private_export=True)
    assert (await say(companion, "/export")).confirm is None  # normal mode: the file at once
    assert (await say(companion, "/help")).confirm is None
