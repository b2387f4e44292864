"""Discord as a platform (its intake, sender and streamer): the real discord.py client and the real core against a fake Discord and a fake model server."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.discord import MESSAGE_LIMIT, DiscordStartError, discord_platform
from adapters.llm.openai_compat import OpenAICompatibleProvider
from adapters.rendering.text import split_message, text_length
from bot.bootstrap import build_companion, core_entry
from core.delivery.outbox import Outbox
from core.ports.clock import SystemClock
from core.turn.config import CompanionConfig
from core.values.copy import DELETE_SECRET_NOTE, HANDLER_FAILED, NOT_ALLOWED
from core.values.edge import EdgeSettings
from core.values.errors import CompanionError, StoreError
from core.values.model import Attachment, InboundMessage, Reply
from tests.conftest import PASSPHRASE
from tests.helpers import engines
from tests.helpers.adapters import PlatformRun, core_for, discord_adapter
from tests.helpers.fake_discord import MESSAGE_CONTENT, FakeDiscordServer, RestFault
from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.logs import logging_policy

CANARY = "canary-5d1e my sister's diagnosis"
FRIEND = 111  # allowed: discord:111
STRANGER = 222
MESSAGES = "/channels/{channel_id}/messages"


# --- fixtures ---------------------------------------------------------------------


@pytest.fixture
async def discord_server():
    async with FakeDiscordServer() as server:
        yield server


@pytest.fixture
async def model():
    async with FakeOpenAIServer() as server:
        yield server


@pytest.fixture
async def core(stores, model, passphrase_hash):
    provider = OpenAICompatibleProvider(model.base_url, max_retries=0)
    companion = build_companion(
        stores,
        provider,
        CompanionConfig(
            allowed_accounts=frozenset({f"discord:{FRIEND}"}),
            passphrase_hash=passphrase_hash,
        ),
        outbox=Outbox(stores.outbox, SystemClock()),
    )
    await companion.start()
    yield companion
    await companion.drain()
    await provider.aclose()


@pytest.fixture
async def adapter(discord_server, core):
    adapter = discord_adapter(discord_server, core)
    await adapter.start()
    yield adapter
    await adapter.aclose()


def db_rows(stores, sql: str) -> list[tuple]:
    with sqlite3.connect(engines.sqlite_file(stores)) as db:
        return db.execute(sql).fetchall()


def db_bytes(tmp_path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("companion.db"))


def last_user_text(request: dict) -> str:
    return [m for m in request["messages"] if m["role"] == "user"][-1]["content"]


# --- the splitter (adapters/rendering/text.py) ----------------------------------------------


def _visible(text: str) -> str:
    return "".join(ch for ch in text if not ch.isspace())


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(alphabet=st.sampled_from([*list("ab .!?\n\r\t"), "😀", "é", "。"]), max_size=600),
    limit=st.integers(min_value=2, max_value=120),
)
def test_split_parts_fit_the_limit_and_keep_every_visible_character_in_order(text, limit):
    parts = split_message(text, limit)
    assert all(0 < text_length(part) <= limit for part in parts)
    assert all(part == part.strip() for part in parts)
    assert _visible("".join(parts)) == _visible(text)


@settings(max_examples=200, deadline=None)
@given(
    paragraphs=st.lists(
        st.text(alphabet="abc .!\n", min_size=1, max_size=50).map(str.strip).filter(lambda p: p and "\n\n" not in p),
        min_size=1,
        max_size=12,
    ),
    limit=st.integers(min_value=50, max_value=200),
)
def test_split_never_breaks_a_paragraph_that_fits(paragraphs, limit):
    paragraphs = [" ".join(p.split()) for p in paragraphs]  # one line each, no blank lines inside
    text = "\n\n".join(paragraphs)
    assert "\n\n".join(split_message(text, limit)) == text  # every cut fell between paragraphs


def test_split_falls_back_from_paragraphs_to_sentences_to_words_to_a_hard_cut():
    assert split_message("One. Two three four.", 12) == ["One.", "Two three", "four."]
    assert split_message("first line\nsecond line", 15) == ["first line", "second line"]
    assert split_message("one para\r\n\r\ntwo. three", 15) == ["one para", "two. three"]
    assert split_message("x" * 25, 10) == ["x" * 10, "x" * 10, "x" * 5]
    assert split_message("short", 2000) == ["short"]
    assert split_message(" \n\t", 10) == []


def test_split_counts_characters_outside_the_basic_plane_as_two_units():
    parts = split_message("😀" * 5, 4)
    assert parts == ["😀😀", "😀😀", "😀"]


# --- start-up ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "buttons",
        "catchup",
        "client",
        "connection",
        "context",
        "intake",
        "interactions",
        "media",
        "routes",
        "sender",
        "streaming",
    ],
)
def test_the_adapter_package_uses_the_discord_library_not_itself(name):
    import importlib

    import adapters.discord as package

    module = importlib.import_module(f"adapters.discord.{name}")
    assert module.discord.__name__ == "discord" and module.discord is not package
    assert Path(module.discord.__file__).parent.parent.name != "adapters"
    assert hasattr(module.discord, "Client")


async def test_start_requests_the_message_content_intent_and_returns_once_ready(discord_server, adapter):
    assert len(discord_server.identifies) == 1
    assert discord_server.identifies[0]["intents"] & MESSAGE_CONTENT
    assert adapter.bot_user_id == discord_server.bot_id
    assert any(session.ready for session in discord_server.sessions)
    assert discord_server.sessions[0].compressed  # the real zlib-stream path, as with Discord


async def test_a_token_without_the_message_content_intent_stops_start_up_with_one_clear_line(core):
    async with FakeDiscordServer(privileged_intents=0) as server:
        adapter = discord_adapter(server, core)
        with pytest.raises(DiscordStartError) as raised:
            await adapter.start()
        await adapter.aclose()
    message = str(raised.value)
    assert isinstance(raised.value, CompanionError)
    assert "\n" not in message and "Message Content" in message and "4014" in message
    assert await no_discord_tasks_left()


async def test_an_invalid_token_stops_start_up_with_one_clear_line(discord_server, core):
    adapter = discord_adapter(discord_server, core, token="not-the-token")
    with pytest.raises(DiscordStartError) as raised:
        await adapter.start()
    message = str(raised.value)
    assert "\n" not in message and "COMPANION_DISCORD_TOKEN" in message and "401" in message
    assert discord_server.identifies == []  # it never got as far as the gateway
    assert await no_discord_tasks_left()


async def test_an_unreachable_api_stops_start_up_naming_the_variable(core, unused_port):
    entry = core_entry(core)
    platform = discord_platform(
        entry, EdgeSettings(), token="token", api_base=f"http://127.0.0.1:{unused_port}/api/v10"
    )
    adapter = PlatformRun(platform, entry)
    with pytest.raises(DiscordStartError) as raised:
        await adapter.start()
    assert "COMPANION_DISCORD_API_BASE" in str(raised.value) and "\n" not in str(raised.value)
    assert await no_discord_tasks_left()


async def test_an_api_base_without_the_version_stops_start_up_saying_so(discord_server, core):
    adapter = discord_adapter(
        discord_server, core, api_base=f"http://127.0.0.1:{discord_server.port}/api", gateway_url=None
    )
    with pytest.raises(DiscordStartError) as raised:
        await adapter.start()
    message = str(raised.value)
    assert "404" in message and "COMPANION_DISCORD_API_BASE" in message and "/api/v10" in message
    assert await no_discord_tasks_left()


async def test_an_unreachable_gateway_stops_start_up_naming_the_variable(discord_server, core, unused_port):
    adapter = discord_adapter(discord_server, core, gateway_url=f"ws://127.0.0.1:{unused_port}/gateway")
    with pytest.raises(DiscordStartError) as raised:
        await adapter.start()
    message = str(raised.value)
    assert "COMPANION_DISCORD_GATEWAY_URL" in message and "\n" not in message
    assert await no_discord_tasks_left()


async def test_a_gateway_that_never_sends_ready_stops_start_up_naming_the_variable(discord_server, core):
    discord_server.silent_gateway = True
    adapter = discord_adapter(discord_server, core, ready_timeout=0.5)
    with pytest.raises(DiscordStartError) as raised:
        await adapter.start()
    message = str(raised.value)
    assert "COMPANION_DISCORD_GATEWAY_URL" in message and "READY" in message and "\n" not in message
    assert await no_discord_tasks_left()


async def test_the_gateway_is_asked_from_the_api_base_when_not_configured(discord_server, core):
    adapter = discord_adapter(discord_server, core, gateway_url=None)
    await adapter.start()
    try:
        assert ("GET", "/api/v10/gateway/bot", 200) in discord_server.requests
        assert discord_server.identifies
    finally:
        await adapter.aclose()
        await adapter.aclose()  # safe twice
    assert await no_discord_tasks_left()


async def no_discord_tasks_left() -> bool:
    """Nothing of discord.py or the adapter still runs (the servers' own tasks do not count)."""
    await asyncio.sleep(0)
    left = []
    for task in asyncio.all_tasks():
        code = getattr(task.get_coro(), "cr_code", None)
        filename = code.co_filename if code is not None else ""
        if not task.done() and "/discord/" in filename:  # discord.py's files and adapters/discord/ alike
            left.append(task)
    return not left


@pytest.fixture
def unused_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- who it talks to ------------------------------------------------------------


async def test_a_direct_message_conversation_goes_through_the_core(discord_server, model, adapter):
    model.reply_text("Hi! How was your day?")
    await discord_server.send_dm(FRIEND, "hello there")
    sent = await discord_server.wait_for_sent(1)
    assert sent[0].channel_id == discord_server.dm_channel_id(FRIEND)
    assert sent[0].content == "Hi! How was your day?"
    assert sent[0].message_reference is None
    assert last_user_text(model.requests[0]) == "hello there"

    model.reply_text("Glad to hear it.")
    await discord_server.send_dm(FRIEND, "pretty good")
    sent = await discord_server.wait_for_sent(2)
    assert sent[1].content == "Glad to hear it."
    history = [m["content"] for m in model.requests[1]["messages"]]
    assert "hello there" in history and "Hi! How was your day?" in history and "pretty good" in history


async def test_a_guild_mention_is_answered_with_the_mention_removed_and_nobody_pinged(discord_server, model, adapter):
    model.reply_text("Hello, channel.")
    message_id = await discord_server.send_guild_message(FRIEND, "what's up?")
    sent = await discord_server.wait_for_sent(1)
    assert sent[0].channel_id == discord_server.guild_channel_id
    assert sent[0].content == "Hello, channel."
    assert sent[0].message_reference["message_id"] == message_id
    assert sent[0].pings == frozenset()  # a reply, yet the author is not pinged
    text = last_user_text(model.requests[0])
    # In a guild the model reads who speaks (the speaker's name first); the mention is gone.
    assert text.endswith("what's up?") and text.startswith("User111: ") and "<@" not in text


async def test_a_guild_reply_to_the_bot_is_answered_without_a_mention(discord_server, model, adapter):
    await discord_server.send_guild_message(FRIEND, "hi")
    await discord_server.wait_for_sent(1)
    model.reply_text("Sure.")
    await discord_server.send_guild_message(FRIEND, "and one more thing", mention_bot=False, reply_to_bot=True)
    sent = await discord_server.wait_for_sent(2)
    assert sent[1].content == "Sure."
    text = last_user_text(model.requests[-1])
    # In a guild the model reads who speaks (the speaker's name first); the mention is gone.
    assert text.endswith("and one more thing") and text.startswith("User111: ") and "<@" not in text


async def test_a_mention_of_the_bots_role_counts_as_a_mention(discord_server, model, adapter):
    model.reply_text("Here.")
    await discord_server.send_guild_message(FRIEND, "are you there", via_role=True)
    sent = await discord_server.wait_for_sent(1)
    assert sent[0].content == "Here."
    text = last_user_text(model.requests[0])
    # In a guild the model reads who speaks (the speaker's name first); the mention is gone.
    assert text.endswith("are you there") and text.startswith("User111: ") and "<@" not in text


async def test_guild_messages_not_addressed_to_the_bot_are_ignored(discord_server, model, adapter):
    await discord_server.send_guild_message(FRIEND, "just chatting", mention_bot=False)
    await discord_server.send_guild_message(FRIEND, "@everyone lunch?", mention_bot=False, mention_everyone=True)
    await discord_server.settle()
    assert discord_server.sent == [] and model.requests == []


async def test_the_bot_ignores_its_own_and_other_bots_messages(discord_server, model, adapter):
    other_bot = 333
    await discord_server.send_dm(other_bot, "beep", bot=True)
    await discord_server.send_guild_message(other_bot, "boop", bot=True)
    # The bot's own messages come back through the gateway too (echo_own_messages).
    model.reply_text("an answer")
    await discord_server.send_dm(FRIEND, "hello")
    await discord_server.wait_for_sent(1)
    await discord_server.settle()
    assert len(discord_server.sent) == 1 and len(model.requests) == 1


async def test_an_unknown_user_gets_one_polite_refusal_and_nothing_is_stored(discord_server, model, stores, adapter):
    await discord_server.send_dm(STRANGER, "hi, who are you?")
    sent = await discord_server.wait_for_sent(1)
    assert sent[0].content == NOT_ALLOWED
    await discord_server.send_dm(STRANGER, "hello??")
    await discord_server.send_guild_message(STRANGER, "answer me")
    await discord_server.settle()
    assert len(discord_server.sent) == 1
    assert model.requests == []
    for table in ("people", "accounts", "conversations", "messages"):
        assert db_rows(stores, f"SELECT * FROM {table}") == [], table


# --- commands ---------------------------------------------------------------------


async def test_commands_work_as_text_commands(discord_server, model, adapter):
    await discord_server.send_dm(FRIEND, "/help")
    await discord_server.send_dm(FRIEND, "/mode")
    sent = await discord_server.wait_for_sent(2)
    assert "/private PASSPHRASE [EXPIRY]" in sent[0].content and "/normal" in sent[0].content
    assert sent[1].content.startswith("You are in normal mode.")
    assert model.requests == []


async def test_a_command_in_a_guild_channel_needs_the_mention_too(discord_server, model, adapter):
    await discord_server.send_guild_message(FRIEND, "/mode", mention_bot=False)
    await discord_server.send_guild_message(FRIEND, "/mode")
    sent = await discord_server.wait_for_sent(1)
    await discord_server.settle()
    assert len(discord_server.sent) == 1 and sent[0].content.startswith("You are in normal mode.")


# --- output -----------------------------------------------------------------------


async def test_a_long_reply_is_split_in_order_on_paragraph_boundaries(discord_server, model, adapter):
    paragraphs = [f"Paragraph {i}. " + "word " * 150 for i in range(8)]  # about 760 characters each
    model.reply_text("\n\n".join(p.strip() for p in paragraphs))
    await discord_server.send_dm(FRIEND, "tell me a long story")
    whole = "\n\n".join(p.strip() for p in paragraphs)
    channel = discord_server.dm_channel_id(FRIEND)
    # Streamed when the answer takes a while to arrive (a loaded machine), sent whole otherwise:
    # either way the chat ends up showing it in order, cut at paragraphs.
    await discord_server.wait_until(lambda: "\n\n".join(discord_server.shown(channel)) == whole, what="the reply")
    await discord_server.settle()
    parts = discord_server.shown(channel)
    assert len(parts) >= 4 and all(len(p) <= MESSAGE_LIMIT for p in parts)
    assert all(p.startswith("Paragraph ") for p in parts)


async def test_model_output_can_never_ping_everyone(discord_server, model, adapter):
    model.reply_text(f"@everyone @here look, <@{FRIEND}> and <@&{discord_server.guild_id}> and <@{STRANGER}>!")
    await discord_server.send_guild_message(FRIEND, "say hi to everyone")
    sent = await discord_server.wait_for_sent(1)
    assert "@everyone" in sent[0].content  # the text is kept; only the ping is neutralised
    assert sent[0].allowed_mentions == {"parse": []}
    assert sent[0].pings == frozenset()


async def test_typing_shows_while_the_provider_works(discord_server, model, adapter):
    model.reply_delay(0.4, "Thought about it.")
    await discord_server.send_dm(FRIEND, "a hard question")
    await discord_server.wait_for_sent(1)
    channel = discord_server.dm_channel_id(FRIEND)
    assert ("typing", channel) in discord_server.events
    assert discord_server.events.index(("typing", channel)) < discord_server.events.index(("message", channel))


async def test_replies_in_one_channel_arrive_in_order(discord_server, model, adapter):
    model.reply_text("\n\n".join(["first " + "a" * 1500, "first " + "b" * 1500, "first " + "c" * 1500]))
    model.reply_text("second")
    await discord_server.send_dm(FRIEND, "one")
    await discord_server.send_dm(FRIEND, "two")
    sent = await discord_server.wait_for_sent(4)
    assert [m.content.split()[0] for m in sent] == ["first", "first", "first", "second"]


async def test_a_rate_limited_reply_is_sent_once_after_retry_after(discord_server, model, adapter):
    discord_server.fail_next("POST", MESSAGES, RestFault(status=429, retry_after=0.05))
    model.reply_text("Worth the wait.")
    await discord_server.send_dm(FRIEND, "hello")
    sent = await discord_server.wait_for_sent(1)
    await discord_server.settle()
    assert [m.content for m in discord_server.sent] == ["Worth the wait."]
    posts = [r for r in discord_server.requests if r[:2] == ("POST", "/api/v10" + MESSAGES)]
    assert [status for _, _, status in posts] == [429, 200]
    assert sent[0].pings == frozenset()


async def test_a_reply_whose_answer_was_lost_is_sent_again_without_doubling(discord_server, model, adapter):
    discord_server.fail_next("POST", MESSAGES, RestFault(store_then_disconnect=True))
    model.reply_text("Exactly once.")
    await discord_server.send_dm(FRIEND, "hello")
    await discord_server.wait_until(
        lambda: sum(r[:2] == ("POST", "/api/v10" + MESSAGES) for r in discord_server.requests) >= 2, what="the retry"
    )
    await discord_server.settle(0.5)
    posts = [r for r in discord_server.requests if r[:2] == ("POST", "/api/v10" + MESSAGES)]
    assert [status for _, _, status in posts] == [0, 200]  # hung up after storing, then sent again
    assert [m.content for m in discord_server.sent] == ["Exactly once."]
    assert discord_server.sent[0].enforce_nonce


async def test_a_reply_survives_a_server_error(discord_server, model, adapter):
    discord_server.fail_next("POST", MESSAGES, 502)
    model.reply_text("Still here.")
    await discord_server.send_dm(FRIEND, "hello")
    await discord_server.wait_for_sent(1)
    await discord_server.settle()
    assert [m.content for m in discord_server.sent] == ["Still here."]


async def test_attachments_are_sent_with_the_last_part(discord_server):
    async def handler(message: InboundMessage) -> Reply:
        return Reply("Here is your export.", attachments=[Attachment("export.txt", b"line one\n")])

    adapter = discord_adapter(discord_server, core_for(handler))
    await adapter.start()
    try:
        await discord_server.send_dm(FRIEND, "/export")
        sent = await discord_server.wait_for_sent(1)
    finally:
        await adapter.aclose()
    assert sent[0].content == "Here is your export."
    assert sent[0].files == (("export.txt", b"line one\n"),)
    assert sent[0].allowed_mentions == {"parse": []}


async def test_no_discord_object_reaches_the_core(discord_server):
    seen: list[object] = []

    async def handler(message: InboundMessage) -> None:
        seen.append(message)

    adapter = discord_adapter(discord_server, core_for(handler))
    await adapter.start()
    try:
        await discord_server.send_dm(FRIEND, "hello")
        await discord_server.send_guild_message(FRIEND, "hi all")
        await discord_server.wait_until(lambda: len(seen) == 2, what="two messages")
    finally:
        await adapter.aclose()
    dm, guild = seen
    assert type(dm) is InboundMessage and type(guild) is InboundMessage
    assert all(
        type(v) in (str, bool, type(None))
        for m in seen
        for v in (m.platform, m.chat_id, m.user_id, m.text, m.is_direct, m.message_id, m.user_name)
    )
    assert dm.is_direct and dm.platform == "discord" and dm.user_id == str(FRIEND)
    assert dm.chat_id == str(discord_server.dm_channel_id(FRIEND))
    assert not guild.is_direct and guild.chat_id == str(discord_server.guild_channel_id) and guild.text == "hi all"


async def test_a_dropped_gateway_connection_resumes_and_keeps_answering(discord_server, model, adapter):
    await discord_server.close_gateway(4000)
    await discord_server.wait_until(
        lambda: discord_server.resumes and any(s.ready and not s.ws.closed for s in discord_server.sessions),
        what="the client to resume",
    )
    model.reply_text("Still with you.")
    await discord_server.send_dm(FRIEND, "hello again")
    sent = await discord_server.wait_for_sent(1)
    assert sent[0].content == "Still with you."
    assert len(discord_server.identifies) == 1  # resumed, not identified anew


async def test_closing_lets_a_turn_in_flight_finish_sending(discord_server, model, core):
    adapter = discord_adapter(discord_server, core)
    await adapter.start()
    model.reply_delay(0.4, "Made it.")
    await discord_server.send_dm(FRIEND, "quick, before you go")
    await discord_server.wait_until(lambda: len(model.requests) == 1, what="the model request")
    await adapter.aclose()
    assert [m.content for m in discord_server.sent] == ["Made it."]
    await discord_server.wait_until(lambda: not discord_server.sessions, what="the gateway to be closed")


# --- private mode and the passphrase ---------------------------------------------


async def test_private_mode_in_a_dm_asks_to_delete_the_passphrase_and_normal_mode_never_sees_the_canary(
    discord_server, model, stores, adapter, tmp_path, caplog
):
    caplog.set_level(logging.INFO)
    dm = discord_server.dm_channel_id(FRIEND)
    await discord_server.send_dm(FRIEND, "good morning")
    await discord_server.wait_for_sent(1)

    await discord_server.send_dm(FRIEND, f"/private {PASSPHRASE}")
    sent = await discord_server.wait_for_sent(2)
    assert "private mode" in sent[1].content.lower()
    assert sent[1].content.endswith(DELETE_SECRET_NOTE)  # a bot cannot delete a user's DM
    assert discord_server.deleted == [] and not any(r[0] == "DELETE" for r in discord_server.requests)

    await discord_server.send_dm(FRIEND, CANARY)
    await discord_server.wait_for_sent(3)
    assert CANARY.encode() in model.raw_requests[-1]  # private mode does see it

    before_normal = len(model.raw_requests)
    await discord_server.send_dm(FRIEND, "/normal")
    await discord_server.wait_for_sent(4)
    await discord_server.send_dm(FRIEND, "what did we talk about?")
    await discord_server.wait_for_sent(5)

    after = model.raw_requests[before_normal:]
    assert len(after) >= 1  # the normal turn (the transition line is constant)
    assert all(CANARY.encode() not in raw for raw in after)
    assert all(PASSPHRASE.encode() not in raw for raw in model.raw_requests)
    assert PASSPHRASE.encode() not in db_bytes(tmp_path)
    assert all(CANARY not in r.getMessage() and PASSPHRASE not in r.getMessage() for r in caplog.records)
    assert all(m.channel_id == dm for m in discord_server.sent)


async def test_private_mode_is_refused_in_a_guild_channel_before_the_passphrase_is_checked(
    discord_server, model, stores, adapter, tmp_path
):
    message_id = await discord_server.send_guild_message(FRIEND, "/private not-the-passphrase")
    sent = await discord_server.wait_for_sent(1)
    assert "only possible in a one-to-one chat" in sent[0].content
    assert "wrong" not in sent[0].content.lower()
    assert db_rows(stores, "SELECT * FROM valve_attempts") == []  # no attempt was counted
    assert db_rows(stores, "SELECT * FROM segments") == []
    # The bot can delete in a guild channel: the message is gone and no note is needed.
    assert discord_server.deleted == [(discord_server.guild_channel_id, message_id)]
    assert DELETE_SECRET_NOTE not in sent[0].content
    assert sent[0].message_reference is None  # nothing to reply to: it was deleted
    assert b"not-the-passphrase" not in db_bytes(tmp_path)
    assert model.requests == []


async def test_a_passphrase_the_bot_cannot_delete_in_a_guild_gets_the_delete_note(discord_server, adapter):
    discord_server.forbid_deletes = True
    await discord_server.send_guild_message(FRIEND, f"/private {PASSPHRASE}")
    sent = await discord_server.wait_for_sent(1)
    assert "only possible in a one-to-one chat" in sent[0].content
    assert sent[0].content.endswith(DELETE_SECRET_NOTE)
    assert discord_server.deleted == []


@pytest.mark.parametrize("text", [f"/private {PASSPHRASE}", f"\u200b/рrivate {PASSPHRASE}", f"/privat {PASSPHRASE}"])
async def test_when_the_core_fails_the_passphrase_message_is_still_deleted(discord_server, text):
    async def failing(message: InboundMessage) -> Reply | None:
        raise StoreError("disk full")

    adapter = discord_adapter(discord_server, core_for(failing))
    await adapter.start()
    try:
        message_id = await discord_server.send_guild_message(FRIEND, text)
        await discord_server.send_dm(FRIEND, text)  # where a bot cannot delete: the note asks the person to
        sent = await discord_server.wait_for_sent(2)
    finally:
        await adapter.aclose()
    assert discord_server.deleted == [(discord_server.guild_channel_id, message_id)]
    by_channel = {m.channel_id: m.content for m in sent}
    assert by_channel[discord_server.guild_channel_id] == HANDLER_FAILED
    assert by_channel[discord_server.dm_channel_id(FRIEND)] == f"{HANDLER_FAILED}\n\n{DELETE_SECRET_NOTE}"


async def test_message_text_never_reaches_the_logs_even_at_debug(discord_server, model, core, caplog):
    caplog.set_level(logging.DEBUG)
    adapter = discord_adapter(discord_server, core)
    with logging_policy("DEBUG"):  # COMPANION_LOG_LEVEL=DEBUG: discord.py's payload logs stay off
        await adapter.start()
        try:
            model.reply_text(f"I hear you: {CANARY}")
            await discord_server.send_dm(FRIEND, CANARY)
            await discord_server.wait_for_sent(1)
        finally:
            await adapter.aclose()
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "canary-5d1e" not in logged
    assert any(r.name.startswith("adapters.discord") for r in caplog.records)


# --- turns cut off by a stop, and the outbox ---------------------------------------------


async def test_a_turn_in_flight_at_a_graceful_stop_is_answered_once_after_the_restart(
    discord_server, model, stores, core, passphrase_hash
):
    adapter = discord_adapter(discord_server, core, stop_grace=0.05)
    await adapter.start()
    model.reply_delay(30)  # the model is slower than the stop's grace period
    await discord_server.send_dm(FRIEND, "are you still there?")
    await model_called(model, 1)
    await adapter.aclose()  # the turn is cut off: its message is stored, its reply never written
    assert discord_server.sent == []
    rows = await engines.rows(stores, "SELECT turn FROM messages WHERE text = 'are you still there?'")
    assert [r[0] for r in rows] == ["open"]

    provider = OpenAICompatibleProvider(model.base_url, max_retries=0)
    restarted = build_companion(stores, provider, core.config, outbox=Outbox(stores.outbox, SystemClock()))
    await restarted.start()
    again = discord_adapter(discord_server, restarted)
    await again.start()
    try:
        model.reply_text("Yes, I'm here.")
        assert await restarted.answer_open_turns() == 1
        await discord_server.wait_for_sent(1)
        assert await restarted.answer_open_turns() == 0  # once
        assert [m.content for m in discord_server.sent] == ["Yes, I'm here."]
    finally:
        await again.aclose()
        await restarted.drain()
        await provider.aclose()


async def test_a_reply_discord_keeps_refusing_is_kept_and_sent_once_with_its_nonce(
    discord_server, model, stores, core, adapter
):
    for _ in range(3):  # the adapter's own three tries
        discord_server.fail_next("POST", MESSAGES, 503)
    model.reply_text("Kept for you.")
    await discord_server.send_dm(FRIEND, "hello")
    await wait_for_row(stores, "SELECT 1 FROM deliveries WHERE status = 'pending' AND attempts = 1")
    assert discord_server.sent == []
    await engines.rows(stores, "UPDATE deliveries SET next_attempt_at = 0")
    await core.outbox.dispatch_due()
    assert [m.content for m in discord_server.sent] == ["Kept for you."]
    (nonce,) = [r[0] for r in await engines.rows(stores, "SELECT nonce FROM deliveries")]
    assert discord_server.sent[0].nonce == f"{nonce}000" and discord_server.sent[0].enforce_nonce
    # A send repeated after a crash between send and mark carries the same nonce: Discord keeps one message.
    await engines.rows(stores, "UPDATE deliveries SET status = 'pending', text = 'Kept for you.', next_attempt_at = 0")
    await core.outbox.dispatch_due()
    assert len({m.id for m in discord_server.sent}) == 1


async def model_called(model, count: int, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while len(model.requests) < count:
        assert asyncio.get_running_loop().time() < deadline, "the model was not called"
        await asyncio.sleep(0.01)


async def wait_for_row(stores, sql: str, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await engines.rows(stores, sql):
        assert asyncio.get_running_loop().time() < deadline, f"no row for: {sql}"
        await asyncio.sleep(0.02)
