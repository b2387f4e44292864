"""Replies, forwards and edits on Discord (issue 15): the real discord.py client and core against
the fake Discord (message_reference, referenced_message, message_snapshots, MESSAGE_UPDATE)."""

from __future__ import annotations

import pytest

from adapters.llm.openai_compat import OpenAICompatibleProvider
from bot.bootstrap import build_companion
from core.delivery.outbox import Outbox
from core.ports.clock import SystemClock
from core.turn.config import CompanionConfig
from core.values import copy
from tests.conftest import PASSPHRASE
from tests.helpers.adapters import discord_adapter
from tests.helpers.fake_discord import FakeDiscordServer
from tests.helpers.fake_openai import FakeOpenAIServer

FRIEND = 111
CANARY = "CANARY-discord-quote-7c1"


@pytest.fixture
async def discord_server():
    async with FakeDiscordServer() as server:
        yield server


@pytest.fixture
async def model():
    async with FakeOpenAIServer() as server:
        yield server


@pytest.fixture
async def adapter(discord_server, stores, model, passphrase_hash):
    provider = OpenAICompatibleProvider(model.base_url, max_retries=0)
    companion = build_companion(
        stores,
        provider,
        CompanionConfig(allowed_accounts=frozenset({f"discord:{FRIEND}"}), passphrase_hash=passphrase_hash),
        outbox=Outbox(stores.outbox, SystemClock()),
    )
    await companion.start()
    adapter = discord_adapter(discord_server, companion)
    await adapter.start()
    yield adapter
    await adapter.aclose()
    await companion.drain()
    await provider.aclose()


async def say(server: FakeDiscordServer, text: str, **kwargs) -> int:
    before = len(server.sent)
    message_id = await server.send_dm(FRIEND, text, **kwargs)
    await server.wait_for_sent(before + 1)
    return message_id


def last_user_text(request: dict) -> str:
    return [m for m in request["messages"] if m["role"] == "user"][-1]["content"]


async def test_a_normal_mode_reply_quoting_a_private_message_sends_no_canary_and_normal_quotes_are_included(
    discord_server, model, adapter
):
    first = await say(discord_server, "remember the lighthouse")
    await say(discord_server, f"/private {PASSPHRASE}")
    private_id = await say(discord_server, f"between us: {CANARY}")
    await say(discord_server, "/normal")
    before = len(model.raw_requests)
    await say(discord_server, "what was this?", reply_to=private_id)
    await say(discord_server, "and this?", reply_to=first)
    after = model.raw_requests[before:]
    assert all(CANARY not in raw.decode() for raw in after)
    assert last_user_text(model.requests[-2]) == copy.QUOTE_LINE.format(text=copy.PLACEHOLDER) + "\nwhat was this?"
    assert last_user_text(model.requests[-1]) == "(replying to: remember the lighthouse)\nand this?"


async def test_a_forward_is_named_by_its_source_and_carries_the_forwarded_words(discord_server, model, adapter):
    original = await discord_server.send_guild_message(222, "the meeting moved to Friday", mention_bot=False)
    await say(discord_server, "", forward_of=original)
    assert last_user_text(model.requests[-1]) == "(forwarded from #general)\nthe meeting moved to Friday"


async def test_an_edit_of_the_newest_message_is_answered_as_a_correction(discord_server, model, adapter, stores):
    model.reply_text("Seven it is.")
    message_id = await say(discord_server, "see you at seven")
    model.reply_text("Eight, then.")
    await discord_server.edit_message(message_id, "see you at eight")
    sent = await discord_server.wait_for_sent(2)
    assert sent[1].content == "Eight, then."
    assert model.requests[-1]["messages"][-1]["content"] == copy.EDIT_CORRECTION
    assert last_user_text(model.requests[-1]) == "see you at eight"


async def test_a_link_preview_update_is_not_an_edit_and_gets_no_second_answer(discord_server, model, adapter):
    message_id = await say(discord_server, "look at https://example.org")
    await discord_server.add_link_preview(message_id, "https://example.org")
    await say(discord_server, "/mode")  # a later turn's answer comes next: nothing was sent in between
    assert len(discord_server.sent) == 2 and len(model.requests) == 1
