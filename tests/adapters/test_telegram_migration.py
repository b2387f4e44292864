"""A Telegram group upgraded to a supergroup (ChatMigrated): the real python-telegram-bot and core
against the fake Bot API, and the store's re-key on its own."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from adapters.llm.openai_compat import OpenAICompatibleProvider
from adapters.storage.outbox import insert_delivery
from adapters.storage.stores import Stores
from bot.bootstrap import build_companion, core_entry
from core.delivery.outbox import Outbox
from core.ports.clock import SystemClock
from core.turn.companion import Companion
from core.turn.config import CompanionConfig
from core.values.model import ConversationKey, DeliveryTarget
from tests.helpers import engines
from tests.helpers.adapters import AttachedPlatform, telegram_adapter
from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.fake_telegram import FakeTelegramServer

USER = 111
OLD, NEW = -4242, -1004242  # a basic group, and the supergroup Telegram made of it
BOT = "companion_test_bot"


@pytest.fixture
async def telegram() -> AsyncIterator[FakeTelegramServer]:
    async with FakeTelegramServer(username=BOT) as server:
        yield server


@pytest.fixture
async def companion(stores: Stores, model: FakeOpenAIServer) -> AsyncIterator[Companion]:
    provider = OpenAICompatibleProvider(model.base_url, "sk-test", "test-model", timeout=5.0)
    companion = build_companion(
        stores,
        provider,
        CompanionConfig(allowed_accounts=frozenset({f"telegram:{USER}"})),
        outbox=Outbox(stores.outbox, SystemClock()),
    )
    await companion.start()
    yield companion
    await companion.drain()
    await provider.aclose()


@pytest.fixture
async def adapter(telegram: FakeTelegramServer, companion: Companion) -> AsyncIterator[AttachedPlatform]:
    adapter = telegram_adapter(telegram, core_entry(companion))
    await adapter.start()
    yield adapter
    await adapter.aclose()


async def say_in_group(telegram: FakeTelegramServer, chat: int, text: str, chat_type: str = "group") -> str:
    """Mention the bot in a group; returns the text of the one reply, wherever it went."""
    before = len(telegram.sent)
    telegram.send_text(chat, USER, f"@{BOT} {text}", chat_type=chat_type)
    return (await telegram.wait_for_sent(before + 1))[before].text


async def rows(stores: Stores, sql: str, params: tuple = ()) -> list[tuple]:
    return [tuple(r) for r in await engines.rows(stores, sql, params)]


async def settled_rows(stores: Stores, sql: str, timeout: float = 10.0) -> list[tuple]:
    """`rows`, once no delivery is pending any more (a send is marked just after it went out)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while await rows(stores, "SELECT 1 FROM deliveries WHERE status = 'pending'"):
        assert loop.time() < deadline, "a delivery stayed pending"
        await asyncio.sleep(0.01)
    return await rows(stores, sql)


def user_texts(request: dict) -> list[str]:
    """The user lines the model read, without the speaker's name that heads each group line."""
    return [m["content"].removeprefix("User111: ") for m in request["messages"] if m["role"] == "user"]


def sends_to(telegram: FakeTelegramServer, chat: int) -> int:
    """sendMessage calls naming `chat`, answered or refused."""
    return sum(str(p.get("chat_id")) == str(chat) for p in telegram.calls_of("sendMessage"))


# --- on the wire ---------------------------------------------------------------------------


async def test_a_group_reply_refused_as_migrated_arrives_once_in_the_supergroup_and_the_conversation_goes_on_there(
    adapter: AttachedPlatform, telegram: FakeTelegramServer, model: FakeOpenAIServer, stores: Stores
) -> None:
    model.reply_text("Hello, group.")
    assert await say_in_group(telegram, OLD, "the plan is a picnic") == "Hello, group."
    (conversation,) = await rows(stores, "SELECT id FROM conversations WHERE chat_id = ?", (str(OLD),))

    # A message sent just before the upgrade: its reply meets ChatMigrated (no service message yet).
    model.reply_text("A picnic sounds lovely.")
    before = len(telegram.sent)
    telegram.send_text(OLD, USER, f"@{BOT} saturday?", chat_type="group")
    telegram.migrate_chat(OLD, NEW, service_messages=False)
    sent = await telegram.wait_for_sent(before + 1)
    assert [(m.chat_id, m.text, m.reply_to) for m in sent[before:]] == [(NEW, "A picnic sounds lovely.", None)]
    assert sends_to(telegram, OLD) == 2  # the first reply, and the one refusal that was followed

    assert await rows(stores, "SELECT id, chat_id FROM conversations") == [(conversation[0], str(NEW))]
    assert await settled_rows(stores, "SELECT chat_id, status FROM deliveries ORDER BY id") == [
        (str(OLD), "sent"),
        (str(NEW), "sent"),
    ]

    model.reply_text("Bring the blanket.")
    assert await say_in_group(telegram, NEW, "what should I bring?", "supergroup") == "Bring the blanket."
    assert user_texts(model.requests[-1])[-3:] == ["the plan is a picnic", "saturday?", "what should I bring?"]
    assert await rows(stores, "SELECT count(*) FROM conversations") == [(1,)]
    assert sends_to(telegram, OLD) == 2  # nothing more was tried there


async def test_the_upgrade_service_messages_re_key_the_conversation_before_anything_is_sent(
    adapter: AttachedPlatform, telegram: FakeTelegramServer, model: FakeOpenAIServer, stores: Stores
) -> None:
    model.reply_text("Hello, group.")
    old_message = telegram.send_text(OLD, USER, f"@{BOT} remember the picnic", chat_type="group")
    await telegram.wait_for_sent(1)

    # The supergroup numbers its messages afresh: its message `old_message` is a new message.
    telegram.migrate_chat(OLD, NEW, first_message_id=old_message - 1)
    model.reply_text("Still here.")
    assert await say_in_group(telegram, NEW, "are you still here?", "supergroup") == "Still here."
    assert user_texts(model.requests[-1])[-2:] == ["remember the picnic", "are you still here?"]
    assert sends_to(telegram, OLD) == 1  # only the reply from before the upgrade
    assert await rows(stores, "SELECT chat_id FROM conversations") == [(str(NEW),)]
    assert await rows(stores, "SELECT platform_message_id FROM messages WHERE role = 'user' ORDER BY id") == [
        (f"{OLD}/{old_message}",),
        (str(old_message),),
    ]


async def test_a_late_message_of_the_old_group_handled_after_the_move_joins_the_moved_conversation(
    adapter: AttachedPlatform, telegram: FakeTelegramServer, model: FakeOpenAIServer, stores: Stores
) -> None:
    model.reply_text("Hello, group.")
    assert await say_in_group(telegram, OLD, "the plan is a picnic") == "Hello, group."
    telegram.migrate_chat(OLD, NEW)
    # Sent before the upgrade, but handled after the service message re-keyed the chat.
    model.reply_text("Saturday works.")
    late = telegram.send_text(OLD, USER, f"@{BOT} saturday?", chat_type="group")
    sent = await telegram.wait_for_sent(2)
    assert (sent[1].chat_id, sent[1].text, sent[1].reply_to) == (NEW, "Saturday works.", None)
    assert user_texts(model.requests[-1])[-2:] == ["the plan is a picnic", "saturday?"]
    assert sends_to(telegram, OLD) == 1
    assert await rows(stores, "SELECT chat_id FROM conversations") == [(str(NEW),)]
    assert (await rows(stores, "SELECT platform_message_id FROM messages WHERE role = 'user' ORDER BY id"))[-1] == (
        f"{OLD}/{late}",
    )


async def test_a_conversation_begun_in_the_supergroup_before_the_move_was_known_is_merged_into_the_older_one(
    adapter: AttachedPlatform, telegram: FakeTelegramServer, model: FakeOpenAIServer, stores: Stores
) -> None:
    telegram.send_text(USER, USER, f"/mirror telegram:{OLD}")
    await telegram.wait_for(lambda: len(telegram.texts_to(USER)) == 1)
    assert telegram.texts_to(OLD) == ["Mirroring telegram DM here. /unmirror in the source stops it."]
    model.reply_text("Hello, group.")
    assert await say_in_group(telegram, OLD, "first in the old group") == "Hello, group."
    (older,) = await rows(stores, "SELECT id FROM conversations WHERE chat_id = ?", (str(OLD),))

    # The bot missed the service messages: the supergroup starts a conversation of its own.
    telegram.migrate_chat(OLD, NEW, service_messages=False)
    model.reply_text("Hello, supergroup.")
    assert await say_in_group(telegram, NEW, "first in the supergroup", "supergroup") == "Hello, supergroup."
    assert await rows(stores, "SELECT count(*) FROM conversations WHERE kind = 'group'") == [(2,)]

    # A DM exchange is mirrored to the old group: ChatMigrated, and the move merges the two.
    model.reply_text("Noted.")
    before = len(telegram.sent)
    telegram.send_text(USER, USER, "note this down")
    await telegram.wait_for(lambda: len(telegram.sent) >= before + 2)
    assert {m.chat_id for m in telegram.sent[before:]} == {USER, NEW}
    assert await rows(stores, "SELECT chat_id FROM bindings") == [(str(NEW),)]
    assert await rows(stores, "SELECT id, chat_id FROM conversations WHERE kind = 'group'") == [(older[0], str(NEW))]

    model.reply_text("Both, in order.")
    assert await say_in_group(telegram, NEW, "what did we say?", "supergroup") == "Both, in order."
    assert user_texts(model.requests[-1])[-3:] == [
        "first in the old group",
        "first in the supergroup",
        "what did we say?",
    ]


# --- the store on its own ------------------------------------------------------------------


async def _group(stores: Stores, chat_id: int, text: str, now: float, platform_message_id: str = "7") -> int:
    conversation = await stores.timeline.ensure_conversation(
        ConversationKey("telegram", str(chat_id)), "group", None, now
    )
    await stores.timeline.add_message(conversation.id, "user", text, now, platform_message_id=platform_message_id)
    return conversation.id


async def test_a_move_re_keys_bindings_and_pending_deliveries_to_the_old_chat_without_their_quotes(
    stores: Stores,
) -> None:
    group = await _group(stores, OLD, "hello", 1.0)
    dm = await stores.timeline.ensure_conversation(ConversationKey("telegram", str(USER)), "direct", None, 1.0)
    await stores.bindings.add_binding(dm.id, "telegram", str(OLD), 1.0)
    async with stores.database.tx() as db:
        pending = await insert_delivery(db, group, DeliveryTarget("telegram", str(OLD), "7", "3"), "a reply", 2.0)
        sent = await insert_delivery(db, group, DeliveryTarget("telegram", str(OLD)), "an old reply", 2.0)
        await db.execute("UPDATE deliveries SET status = 'sent', text = NULL WHERE id = ?", (sent,))

    moved = await stores.chats.move_chat("telegram", str(OLD), str(NEW), 3.0)

    assert (moved.conversation_id, moved.bindings, moved.deliveries, moved.refused) == (group, 1, 1, False)
    assert await rows(stores, "SELECT chat_id FROM conversations WHERE id = ?", (group,)) == [(str(NEW),)]
    assert await rows(stores, "SELECT chat_id FROM bindings") == [(str(NEW),)]
    assert await rows(stores, "SELECT id, chat_id, reply_to, thread_id FROM deliveries ORDER BY id") == [
        (pending, str(NEW), None, None),
        (sent, str(OLD), None, None),  # history stays as it happened
    ]
    again = await stores.chats.move_chat("telegram", str(OLD), str(NEW), 4.0)
    assert (again.conversation_id, again.bindings, again.deliveries) == (None, 0, 0)


async def test_a_direct_conversation_or_one_with_a_private_segment_is_never_moved_or_merged(
    stores: Stores,
) -> None:
    direct = await stores.timeline.ensure_conversation(ConversationKey("telegram", str(OLD)), "direct", None, 1.0)
    refused = await stores.chats.move_chat("telegram", str(OLD), str(NEW), 2.0)
    assert refused.refused
    assert await rows(stores, "SELECT id, chat_id FROM conversations") == [(direct.id, str(OLD))]

    # A segment in a group cannot be made through the valve; planted, it still stops the move.
    group = await _group(stores, -77, "hello", 1.0)
    await engines.plant(
        stores,
        "INSERT INTO segments (conversation_id, anchor_message_id, started_at, last_activity_at, ended_at)"
        " VALUES (?, 0, 1.0, 1.0, 1.5)",
        (group,),
    )
    assert (await stores.chats.move_chat("telegram", "-77", "-10077", 2.0)).refused
    newer = await _group(stores, -10088, "newer", 1.0)
    await engines.plant(
        stores,
        "INSERT INTO segments (conversation_id, anchor_message_id, started_at, last_activity_at, ended_at)"
        " VALUES (?, 0, 1.0, 1.0, 1.5)",
        (newer,),
    )
    older = await _group(stores, -88, "older", 1.0)
    assert (await stores.chats.move_chat("telegram", "-88", "-10088", 2.0)).refused
    assert await rows(
        stores, "SELECT chat_id FROM conversations WHERE id IN (?, ?, ?) ORDER BY id", (group, newer, older)
    ) == [
        ("-77",),
        ("-10088",),
        ("-88",),
    ]
    assert await rows(stores, "SELECT platform_message_id FROM messages ORDER BY id") == [("7",), ("7",), ("7",)]


async def _summary(stores: Stores, conversation_id: int, text: str) -> None:
    await engines.plant(
        stores,
        "INSERT INTO summaries (conversation_id, mode, text, watermark, updated_at) VALUES (?, 'normal', ?, 0, 1.0)",
        (conversation_id, text),
    )


async def test_a_merge_keeps_the_older_conversation_with_every_row_of_both_once(stores: Stores) -> None:
    older = await _group(stores, OLD, "old words", 1.0, "7")
    await _summary(stores, older, "older summary")
    newer = await _group(stores, NEW, "new words", 2.0, "7")
    await _summary(stores, newer, "newer summary")

    moved = await stores.chats.move_chat("telegram", str(OLD), str(NEW), 3.0)

    assert (moved.conversation_id, moved.merged_conversation_id) == (older, newer)
    assert await rows(stores, "SELECT id, chat_id FROM conversations") == [(older, str(NEW))]
    assert await rows(stores, "SELECT conversation_id, text, platform_message_id FROM messages ORDER BY id") == [
        (older, "old words", f"{OLD}/7"),
        (older, "new words", "7"),
    ]
    assert await rows(stores, "SELECT conversation_id, text FROM summaries") == [(older, "older summary")]


async def test_a_move_is_one_transaction_a_failure_midway_changes_nothing(stores: Stores) -> None:
    group = await _group(stores, OLD, "hello", 1.0)
    async with stores.database.tx() as db:
        await insert_delivery(db, group, DeliveryTarget("telegram", str(OLD)), "a reply", 2.0)
    # The last step fails: everything before it must be undone with it.
    await engines.plant(
        stores,
        "CREATE TEMP TRIGGER fail_the_move BEFORE UPDATE ON deliveries BEGIN SELECT RAISE(ABORT, 'planted'); END",
    )
    with pytest.raises(Exception, match="planted"):
        await stores.chats.move_chat("telegram", str(OLD), str(NEW), 3.0)
    assert await rows(stores, "SELECT chat_id FROM conversations") == [(str(OLD),)]
    assert await rows(stores, "SELECT platform_message_id FROM messages") == [("7",)]
    assert await rows(stores, "SELECT chat_id FROM deliveries") == [(str(OLD),)]


async def test_a_late_old_chat_conversation_made_after_a_restart_is_merged_into_the_older_moved_one(
    stores: Stores,
) -> None:
    older = await _group(stores, OLD, "old words", 1.0, "7")
    await stores.chats.move_chat("telegram", str(OLD), str(NEW), 2.0)
    # After a restart (nothing remembered in memory), a late update of the old group makes a new one.
    late = await _group(stores, OLD, "late words", 3.0, "8")

    moved = await stores.chats.move_chat("telegram", str(OLD), str(NEW), 4.0)

    assert (moved.conversation_id, moved.merged_conversation_id) == (older, late)
    assert await rows(stores, "SELECT id, chat_id FROM conversations") == [(older, str(NEW))]
    assert await rows(stores, "SELECT conversation_id, text, platform_message_id FROM messages ORDER BY id") == [
        (older, "old words", f"{OLD}/7"),
        (older, "late words", f"{OLD}/8"),
    ]
