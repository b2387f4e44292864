"""Telegram's three parts: the real python-telegram-bot Application and core against fake Bot API and model servers."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.llm.openai_compat import OpenAICompatibleProvider
from adapters.storage.stores import Stores
from adapters.telegram import (
    HANDLER_FAILED,
    MAX_MESSAGE_LENGTH,
    Entity,
    TelegramStartError,
    UpdateLedger,
    group_text,
    split_message,
)
from adapters.telegram import intake as intake_module
from bot.bootstrap import build_companion, core_entry
from core.commands.registry import command_specs
from core.delivery.outbox import Outbox
from core.ports.clock import SystemClock
from core.privacy.secrets import hash_passphrase
from core.turn.companion import Companion
from core.turn.config import CompanionConfig
from core.values import copy
from core.values.copy import RESTART_KEPT_PRIVATE
from core.values.edge import EdgeSettings
from core.values.errors import StoreError
from core.values.model import Attachment, InboundMessage, Reply
from tests.helpers import engines
from tests.helpers.adapters import AttachedPlatform, core_for, telegram_adapter
from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.fake_telegram import FakeTelegramServer
from tests.helpers.logs import logging_policy
from tests.helpers.waiting import wait_for_stored

USER, OTHER, GROUP = 111, 333, -100500
STRANGER = 987650123  # distinctive, so finding it in a stored row means something
BOT = "companion_test_bot"
CANARY = "canary-5d1e my private words"


class RecordingSleep:
    """Stands in for asyncio.sleep in the adapter's retries: records each delay, waits only a moment."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)
        await asyncio.sleep(0.01)


@pytest.fixture(scope="module")
def passphrase_hash() -> str:
    return hash_passphrase("sesame")


@pytest.fixture
async def telegram() -> AsyncIterator[FakeTelegramServer]:
    async with FakeTelegramServer(username=BOT) as server:
        yield server


CompanionFactory = Callable[..., Awaitable[Companion]]


@pytest.fixture
async def new_companion(
    stores: Stores, model: FakeOpenAIServer, passphrase_hash: str
) -> AsyncIterator[CompanionFactory]:
    """A started Companion on the shared store; calling it again is what a restarted process does."""
    opened: list[tuple[Companion, OpenAICompatibleProvider]] = []

    async def make(**build_options: object) -> Companion:
        provider = OpenAICompatibleProvider(model.base_url, "sk-test", "test-model", timeout=5.0)
        companion = build_companion(
            stores,
            provider,
            CompanionConfig(
                allowed_accounts=frozenset({f"telegram:{USER}", f"telegram:{OTHER}"}), passphrase_hash=passphrase_hash
            ),
            outbox=Outbox(stores.outbox, SystemClock()),
            **build_options,  # type: ignore[arg-type]
        )
        await companion.start()
        opened.append((companion, provider))
        return companion

    yield make
    for companion, provider in opened:
        await companion.drain()
        await provider.aclose()


@pytest.fixture
async def companion(new_companion: CompanionFactory) -> Companion:
    return await new_companion()


@pytest.fixture
def sleep() -> RecordingSleep:
    return RecordingSleep()


AdapterFactory = Callable[..., Awaitable[AttachedPlatform]]


@pytest.fixture
async def new_adapter(
    telegram: FakeTelegramServer, sleep: RecordingSleep, new_companion: CompanionFactory
) -> AsyncIterator[AdapterFactory]:
    """Adapters on the fake server; they close before the companions (they depend on them) do."""
    made: list[AttachedPlatform] = []

    async def make(companion: Companion, **options: object) -> AttachedPlatform:
        adapter = telegram_adapter(telegram, core_entry(companion), sleep=sleep, **options)
        made.append(adapter)
        await adapter.start()
        return adapter

    yield make
    for adapter in made:
        await adapter.aclose()


@pytest.fixture
async def adapter(new_adapter: AdapterFactory, companion: Companion) -> AttachedPlatform:
    return await new_adapter(companion)


async def say(telegram: FakeTelegramServer, text: str, *, chat: int = USER, user: int = USER, **kwargs) -> str:
    """Send `text` as the user and return the text of the one reply it gets."""
    before = len(telegram.sent)
    telegram.send_text(chat, user, text, chat_type="private" if chat > 0 else "supergroup", **kwargs)
    sent = await telegram.wait_for_sent(before + 1)
    return sent[before].text


MODE_ANSWER = "You are in "


async def before_a_later_turn(telegram: FakeTelegramServer, chat: int = USER) -> list[str]:
    """What `chat` was sent before the answer to a /mode sent now, once that answer is there.

    One chat's turns run in order, and a turn ends only once its reply is sent (retries
    included): whatever an earlier message of the chat was going to cause has happened by
    then. This is the window of a negative check, instead of a fixed sleep. /mode asks no model.
    """
    asked = sum(text.startswith(MODE_ANSWER) for text in telegram.texts_to(chat))
    telegram.send_text(chat, chat if chat > 0 else USER, "/mode", chat_type="private" if chat > 0 else "supergroup")
    await telegram.wait_for(lambda: sum(t.startswith(MODE_ANSWER) for t in telegram.texts_to(chat)) > asked)
    texts = telegram.texts_to(chat)
    answers = [i for i, text in enumerate(texts) if text.startswith(MODE_ANSWER)]
    return texts[: answers[asked]]


def user_texts(request: dict) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "user"]


# --- a conversation ---------------------------------------------------------


async def test_a_conversation_is_answered_through_send_message(
    adapter: AttachedPlatform, telegram: FakeTelegramServer, model: FakeOpenAIServer
) -> None:
    model.reply_text("Hello! How are you today?")
    assert await say(telegram, "hi there") == "Hello! How are you today?"
    model.reply_text("Glad to hear it.")
    assert await say(telegram, "I'm fine, thanks") == "Glad to hear it."

    assert user_texts(model.requests[-1])[-2:] == ["hi there", "I'm fine, thanks"]
    assert [m.chat_id for m in telegram.sent] == [USER, USER]
    assert all(m.reply_to is None for m in telegram.sent)  # one-to-one: no reply threading


async def test_commands_are_registered_with_short_descriptions(
    adapter: AttachedPlatform, telegram: FakeTelegramServer, companion: Companion
) -> None:
    assert [c["command"] for c in telegram.commands] == [spec.name for spec in command_specs()]
    assert {"help", "private", "normal", "mode"} <= {c["command"] for c in telegram.commands}
    assert all(0 < len(c["description"]) <= 256 for c in telegram.commands)


@pytest.mark.parametrize("command", ["/help", "/mode", "/normal", "/private", "/start"])
async def test_each_command_answers_exactly_as_in_the_terminal_chat(
    adapter: AttachedPlatform, telegram: FakeTelegramServer, companion: Companion, command: str
) -> None:
    terminal = await companion.handle(InboundMessage("terminal", "terminal", "owner", command, is_direct=True))
    assert await say(telegram, command) == terminal.text


async def test_a_typing_action_is_shown_while_the_model_works_on_a_slow_answer(
    adapter: AttachedPlatform, telegram: FakeTelegramServer, model: FakeOpenAIServer
) -> None:
    model.reply_text("Thought about it.", delay=1.0)
    await say(telegram, "a hard question")
    methods = [name for name, _ in telegram.calls]
    assert telegram.chat_actions[0] == (USER, "typing")
    assert methods.index("sendChatAction") < methods.index("sendMessage")


async def test_different_chats_run_concurrently_and_each_chat_stays_in_order(
    adapter: AttachedPlatform, telegram: FakeTelegramServer, model: FakeOpenAIServer
) -> None:
    async def respond(body: dict) -> str:
        last = user_texts(body)[-1]
        if last == "slow one":
            # Answered only once the other chat's reply was sent: were the chats one queue, this would wait
            # for ever (the wait_for below times out). A fixed delay raced the load of a full suite run.
            await telegram.wait_for(lambda: any(m.text == "re: quick" for m in telegram.sent), timeout=20)
        return f"re: {last}"

    model.responder = respond
    telegram.send_text(USER, USER, "slow one")
    telegram.send_text(USER, USER, "then this")
    await telegram.wait_for(lambda: len(telegram.calls_of("sendChatAction")) >= 1)
    telegram.send_text(OTHER, OTHER, "quick")
    sent = await telegram.wait_for_sent(3)
    assert [m.text for m in sent] == ["re: quick", "re: slow one", "re: then this"]


# --- output -------------------------------------------------------------------


async def test_a_long_reply_is_split_on_paragraphs_in_order(
    adapter: AttachedPlatform, telegram: FakeTelegramServer, model: FakeOpenAIServer
) -> None:
    paragraphs = [f"Paragraph {n}. " + ("word " * 600).strip() for n in range(4)]  # ~3000 chars each
    model.reply_text("\n\n".join(paragraphs))
    telegram.send_text(USER, USER, "tell me a long story")
    sent = await telegram.wait_for_sent(4)
    assert await before_a_later_turn(telegram) == paragraphs  # in order, and no part twice
    assert all(len(m.text) <= MAX_MESSAGE_LENGTH for m in sent)


async def test_markdown_becomes_entities_and_other_markup_characters_arrive_unchanged(
    adapter: AttachedPlatform, telegram: FakeTelegramServer, model: FakeOpenAIServer
) -> None:
    tricky = "Use *stars*, _under_scores_, [brackets](not a link), <b>tags</b> & `ticks`"
    model.reply_text(tricky)
    assert await say(telegram, "format <this> *please*") == (
        "Use stars, under_scores, [brackets](not a link), <b>tags</b> & ticks"
    )
    assert [e["type"] for e in telegram.sent[-1].entities] == ["italic", "italic", "code"]
    assert all("parse_mode" not in params for params in telegram.calls_of("sendMessage"))


async def test_flood_control_retry_after_is_honoured_and_the_reply_is_sent_once(
    adapter: AttachedPlatform, telegram: FakeTelegramServer, model: FakeOpenAIServer, sleep: RecordingSleep
) -> None:
    telegram.fail_next("sendMessage", 429, retry_after=3)
    model.reply_text("worth the wait")
    assert await say(telegram, "hello") == "worth the wait"
    assert await before_a_later_turn(telegram) == ["worth the wait"]
    assert 3.0 in sleep.delays
    assert [p["text"] for p in telegram.calls_of("sendMessage")][:2] == ["worth the wait"] * 2  # then the /mode


@pytest.mark.parametrize("status", [500, 502, 503])
async def test_a_5xx_is_retried_with_backoff_until_the_reply_is_sent(
    adapter: AttachedPlatform,
    telegram: FakeTelegramServer,
    model: FakeOpenAIServer,
    sleep: RecordingSleep,
    status: int,
) -> None:
    telegram.fail_next("sendMessage", status, times=2)
    model.reply_text("made it")
    assert await say(telegram, "hello") == "made it"
    assert await before_a_later_turn(telegram) == ["made it"]
    assert len(sleep.delays) >= 2 and sleep.delays[1] > sleep.delays[0]


async def test_a_part_already_sent_is_not_sent_again_when_a_later_part_is_retried(
    adapter: AttachedPlatform, telegram: FakeTelegramServer, model: FakeOpenAIServer
) -> None:
    paragraphs = ["First part. " + "a" * 4000, "Second part. " + "b" * 4000]
    model.reply_text("\n\n".join(paragraphs))
    telegram.fail_next("sendMessage", 502, after=1)
    telegram.send_text(USER, USER, "long please")
    await telegram.wait_for_sent(2)
    assert await before_a_later_turn(telegram) == paragraphs


# --- who it talks to --------------------------------------------------------


async def test_an_unknown_user_is_refused_once_and_nothing_of_it_is_stored(
    adapter: AttachedPlatform, telegram: FakeTelegramServer, model: FakeOpenAIServer, stores: Stores
) -> None:
    secret = "stranger-words-4c2"
    assert await say(telegram, f"hello, {secret}", chat=STRANGER, user=STRANGER) == copy.NOT_ALLOWED
    telegram.send_text(STRANGER, STRANGER, f"again {secret}")
    assert await say(telegram, "and me?") != copy.NOT_ALLOWED  # the allowed user is still answered after it
    # An update is confirmed only once it was handled: when none is pending, the stranger's
    # second message was handled, and had it been answered the answer would be here.
    await telegram.wait_for(lambda: telegram.pending_updates == 0)
    assert telegram.texts_to(STRANGER) == [copy.NOT_ALLOWED]
    assert all(secret not in raw.decode() for raw in model.raw_requests)
    assert not _rows_mentioning(engines.sqlite_file(stores), [secret, str(STRANGER)])


async def test_in_a_group_it_answers_only_when_mentioned_or_replied_to(
    adapter: AttachedPlatform, telegram: FakeTelegramServer, model: FakeOpenAIServer
) -> None:
    for ignored in ["hello everyone", "/help@some_other_bot", "what does @someone_else think"]:
        telegram.send_text(GROUP, USER, ignored, chat_type="supergroup")
    model.reply_text("Hi group!")
    mention = telegram.send_text(GROUP, USER, f"@{BOT} how are you?", chat_type="supergroup")
    first = (await telegram.wait_for_sent(1))[0]
    assert (first.text, first.reply_to) == ("Hi group!", mention)
    assert user_texts(model.requests[-1])[-1] == "User111: how are you?"  # the @mention is stripped, the speaker named

    model.reply_text("Replying to a reply.")
    assert await say(telegram, "and you?", chat=GROUP, reply_to_bot=True) == "Replying to a reply."
    help_text = await say(telegram, f"/help@{BOT}", chat=GROUP)
    assert help_text.startswith("I'm your companion")
    assert len(model.requests) == 2  # the ignored messages never reached the model
    assert len(telegram.sent) == 3


async def test_private_mode_is_refused_in_a_group_with_the_reason(
    adapter: AttachedPlatform, telegram: FakeTelegramServer, model: FakeOpenAIServer
) -> None:
    message = telegram.send_text(GROUP, USER, f"/private@{BOT} sesame", chat_type="supergroup")
    reply = (await telegram.wait_for_sent(1))[0].text
    assert "only possible in a one-to-one chat" in reply
    assert (GROUP, message) in telegram.deleted
    mode = await say(telegram, f"/mode@{BOT}", chat=GROUP)
    assert mode.startswith("You are in normal mode")


# --- private mode -------------------------------------------------------------


async def test_private_mode_flow_deletes_the_passphrase_and_keeps_the_canary_out_of_normal_requests(
    adapter: AttachedPlatform, telegram: FakeTelegramServer, model: FakeOpenAIServer
) -> None:
    assert (await say(telegram, "a normal hello")).startswith("fake reply")
    before = len(telegram.sent)
    message = telegram.send_text(USER, USER, "/private sesame")
    entered = (await telegram.wait_for_sent(before + 1))[-1].text
    assert entered.startswith("Private mode is on")
    assert telegram.deleted == [(USER, message)]
    await say(telegram, f"something only for now: {CANARY}")
    assert CANARY in model.raw_requests[-1].decode()  # the wire check can see the canary at all

    first_normal = len(model.raw_requests)
    assert await say(telegram, "/normal") == copy.TRANSITION_FALLBACK
    assert (await say(telegram, "/mode")).startswith("You are in normal mode")
    await say(telegram, "what were we talking about?")
    normal_requests = model.raw_requests[first_normal:]
    assert len(normal_requests) == 1  # the normal reply (the transition line is constant)
    assert all(CANARY.encode() not in raw for raw in normal_requests)
    assert all("sesame" not in m.text for m in telegram.sent)


async def test_passphrase_message_is_deleted_after_a_failed_attempt(
    adapter: AttachedPlatform, telegram: FakeTelegramServer
) -> None:
    before = len(telegram.sent)
    message = telegram.send_text(USER, USER, "/private not-the-passphrase")
    reply = (await telegram.wait_for_sent(before + 1))[-1].text
    assert reply.startswith("That passphrase is not right")
    assert telegram.deleted == [(USER, message)]
    assert copy.DELETE_SECRET_NOTE not in reply
    methods = [name for name, _ in telegram.calls]
    assert methods.index("deleteMessage") < methods.index("sendMessage")


async def test_when_the_passphrase_message_cannot_be_deleted_the_reply_asks_the_user_to(
    adapter: AttachedPlatform, telegram: FakeTelegramServer
) -> None:
    telegram.fail_next("deleteMessage", 400, description="Bad Request: message can't be deleted")
    reply = await say(telegram, "/private sesame")
    assert reply.startswith("Private mode is on")
    assert reply.endswith(copy.DELETE_SECRET_NOTE)
    assert telegram.deleted == []


# --- restart --------------------------------------------------------------------


async def test_restart_does_not_handle_updates_again(
    new_adapter: AdapterFactory,
    new_companion: CompanionFactory,
    companion: Companion,
    telegram: FakeTelegramServer,
    model: FakeOpenAIServer,
) -> None:
    first = await new_adapter(companion)
    await say(telegram, "one")
    await say(telegram, "two")
    await first.aclose()
    telegram.redeliver()  # as if Telegram had not seen the confirmations
    telegram.send_text(USER, USER, "three, sent while the gateway was down")

    await new_adapter(await new_companion())
    await telegram.wait_for_sent(3)
    assert len(await before_a_later_turn(telegram)) == 3  # "one" and "two" were not answered again
    assert len(model.requests) == 3
    assert user_texts(model.requests[-1])[-1] == "three, sent while the gateway was down"


async def test_the_stop_stores_the_update_ledger_the_coalescing_held_back(
    telegram: FakeTelegramServer, stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The coalesced write would come only after an hour here: what holds the marks is the stop's own write.
    monkeypatch.setattr(intake_module, "LEDGER_SECONDS", 3600.0)

    async def answer(message: InboundMessage) -> Reply | None:
        return Reply("handled")

    adapter = telegram_adapter(telegram, core_for(answer, state=stores.modes))
    key = f"telegram:offset:{telegram.bot_id}"
    await adapter.start()
    try:
        for text in ("one", "two"):
            telegram.send_text(USER, USER, text)
        await telegram.wait_for(lambda: telegram.texts_to(USER) == ["handled", "handled"])
        assert await stores.modes.get_adapter_state(key) is None  # written off the turns, not yet
    finally:
        await adapter.aclose()
    assert await stores.modes.get_adapter_state(key) == "2"


async def test_an_update_is_confirmed_and_stored_only_after_it_was_handled(
    telegram: FakeTelegramServer, stores: Stores, sleep: RecordingSleep
) -> None:
    entered, release = asyncio.Event(), asyncio.Event()

    async def slow(message: InboundMessage) -> Reply | None:
        entered.set()
        await release.wait()
        return Reply("handled")

    adapter = telegram_adapter(telegram, core_for(slow, state=stores.modes), sleep=sleep)
    key = f"telegram:offset:{telegram.bot_id}"
    await adapter.start()
    try:
        telegram.send_text(USER, USER, "one")
        async with asyncio.timeout(10):
            await entered.wait()
        # While the turn runs, the adapter keeps polling (other chats must not wait) ...
        polls = len(telegram.get_updates_offsets)
        await telegram.wait_for(lambda: len(telegram.get_updates_offsets) >= polls + 3)
        # ... and none of those polls confirmed the update, nor was it stored as handled.
        assert telegram.pending_updates == 1
        assert all(offset is None or offset <= 1 for offset in telegram.get_updates_offsets)
        assert await stores.modes.get_adapter_state(key) is None
        release.set()
        await telegram.wait_for(lambda: telegram.pending_updates == 0)  # confirmed once handled
        assert telegram.texts_to(USER) == ["handled"]
        # Stored as handled too: off the turn, within the ledger's coalescing window (LEDGER_SECONDS).
        await wait_for_stored(lambda: stores.modes.get_adapter_state(key), what="the update ledger")
        assert await stores.modes.get_adapter_state(key) == "1"
    finally:
        release.set()
        await adapter.aclose()


async def test_updates_the_stop_cut_off_stay_unconfirmed_and_are_answered_after_the_restart(
    telegram: FakeTelegramServer, stores: Stores, sleep: RecordingSleep
) -> None:
    entered = asyncio.Event()

    async def stuck(message: InboundMessage) -> Reply | None:
        entered.set()
        await asyncio.Event().wait()  # past any grace: the stop cuts it off
        return None

    core = core_for(stuck, state=stores.modes)
    adapter = telegram_adapter(telegram, core, sleep=sleep)
    await adapter.start()
    try:
        telegram.send_text(USER, USER, "one")
        async with asyncio.timeout(10):
            await entered.wait()
        telegram.send_text(USER, USER, "two")  # queued in the conversation's lane behind "one"
        polls = len(telegram.get_updates_offsets)
        await telegram.wait_for(lambda: len(telegram.get_updates_offsets) >= polls + 2)  # "two" was fetched
    finally:
        # The gateway's stop: intake, then the core within its grace (it cuts both off), then the close.
        await adapter.platform.intake.stop_intake()
        await core.stop(0.2)
        await adapter.aclose()
    assert telegram.pending_updates == 2  # neither confirmed: Telegram offers both again

    async def answering(message: InboundMessage) -> Reply | None:
        return Reply(f"re: {message.text}")

    again = telegram_adapter(telegram, core_for(answering, state=stores.modes), sleep=sleep)
    await again.start()
    try:
        await telegram.wait_for(lambda: telegram.pending_updates == 0)
    finally:
        await again.aclose()
    assert telegram.texts_to(USER) == ["re: one", "re: two"]


async def test_updates_handled_out_of_order_before_a_crash_are_neither_repeated_nor_skipped(
    new_adapter: AdapterFactory,
    companion: Companion,
    telegram: FakeTelegramServer,
    model: FakeOpenAIServer,
    stores: Stores,
) -> None:
    for text in ["u1", "u2", "u3", "u4"]:
        telegram.send_text(USER, USER, text)
    # The ledger a crash left: 1 handled, 3 handled (another chat finished first), 2 still running.
    await stores.modes.set_adapter_state(f"telegram:offset:{telegram.bot_id}", "1 3", 0.0)
    await new_adapter(companion)
    await telegram.wait_for_sent(2)
    assert len(await before_a_later_turn(telegram)) == 2  # u1 and u3 were not handled again
    assert [user_texts(r)[-1] for r in model.requests] == ["u2", "u4"]


async def test_messages_sent_while_down_stay_in_the_private_interval_the_restart_closed(
    new_adapter: AdapterFactory,
    new_companion: CompanionFactory,
    companion: Companion,
    telegram: FakeTelegramServer,
    model: FakeOpenAIServer,
    stores: Stores,
) -> None:
    first = await new_adapter(companion)
    assert (await say(telegram, "/private sesame")).startswith("Private mode is on")
    await say(telegram, CANARY)
    await first.aclose()  # the gateway goes down while private mode is on

    telegram.send_text(USER, USER, f"still private {CANARY}")  # sent while down, meant for the interval
    telegram.send_text(USER, USER, "/mode")
    requests_before = len(model.raw_requests)
    await new_adapter(await new_companion())  # start-up closes the open segment
    sent = await telegram.wait_for_sent(4)
    assert len(await before_a_later_turn(telegram)) == 4
    assert sent[2].text == RESTART_KEPT_PRIVATE
    assert sent[3].text.startswith("You are in normal mode")
    assert len(model.raw_requests) == requests_before  # not read: no model request at all
    rows = await engines.rows(
        stores, "SELECT mode, segment_id FROM messages WHERE text = ?", (f"still private {CANARY}",)
    )
    assert [(r["mode"], r["segment_id"] is not None) for r in rows] == [("private", True)]
    hits = await engines.rows(stores, "SELECT count(*) FROM recall_fts WHERE recall_fts MATCH ?", (f'"{CANARY}"',))
    assert hits[0][0] == 0


# --- the handler boundary ----------------------------------------------------------


@pytest.mark.parametrize("text", ["/private sesame", "\u200b/рrivate sesame", "/privat sesame"])
async def test_when_the_core_fails_the_user_gets_an_apology_and_the_passphrase_is_still_deleted(
    telegram: FakeTelegramServer, stores: Stores, sleep: RecordingSleep, text: str
) -> None:
    async def failing(message: InboundMessage) -> Reply | None:
        raise StoreError("disk full")

    adapter = telegram_adapter(telegram, core_for(failing, state=stores.modes), sleep=sleep)
    await adapter.start()
    try:
        message = telegram.send_text(USER, USER, text)
        sent = await telegram.wait_for_sent(1)
    finally:
        await adapter.aclose()
    assert sent[0].text == HANDLER_FAILED
    assert telegram.deleted == [(USER, message)]


async def test_when_the_core_fails_and_the_passphrase_cannot_be_deleted_the_apology_asks_the_user_to(
    telegram: FakeTelegramServer, stores: Stores, sleep: RecordingSleep
) -> None:
    async def failing(message: InboundMessage) -> Reply | None:
        raise StoreError("disk full")

    adapter = telegram_adapter(telegram, core_for(failing, state=stores.modes), sleep=sleep)
    telegram.fail_next("deleteMessage", 400, description="Bad Request: message can't be deleted")
    await adapter.start()
    try:
        telegram.send_text(USER, USER, "/private sesame")
        sent = await telegram.wait_for_sent(1)
    finally:
        await adapter.aclose()
    assert sent[0].text == f"{HANDLER_FAILED}\n\n{copy.DELETE_SECRET_NOTE}"
    assert telegram.deleted == []


async def test_attachments_of_a_reply_are_sent_as_documents_after_its_text(
    telegram: FakeTelegramServer, stores: Stores, sleep: RecordingSleep
) -> None:
    async def exporting(message: InboundMessage) -> Reply | None:
        return Reply("Here is your export.", attachments=[Attachment("export.txt", b"normal notes")])

    adapter = telegram_adapter(telegram, core_for(exporting, state=stores.modes), sleep=sleep)
    await adapter.start()
    try:
        telegram.send_text(USER, USER, "/export")
        sent = await telegram.wait_for_sent(2)
    finally:
        await adapter.aclose()
    assert [m.text for m in sent] == ["Here is your export.", "[document export.txt]"]


# --- start-up -------------------------------------------------------------------


async def test_a_rejected_token_stops_start_up_with_one_clear_line(
    new_adapter: AdapterFactory, companion: Companion, telegram: FakeTelegramServer
) -> None:
    with pytest.raises(TelegramStartError) as caught:
        await new_adapter(companion, token="123456:WRONG-secret-token")
    line = str(caught.value)
    assert "\n" not in line
    assert line.startswith("COMPANION_TELEGRAM_TOKEN:") and "rejected the token" in line
    assert "WRONG-secret-token" not in line
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


async def test_an_unreachable_bot_api_server_stops_start_up_naming_the_base_url(
    new_adapter: AdapterFactory, companion: Companion, unused_tcp_port: int
) -> None:
    with pytest.raises(TelegramStartError) as caught:
        await new_adapter(companion, base_url=f"http://127.0.0.1:{unused_tcp_port}/bot")
    assert str(caught.value).startswith("COMPANION_TELEGRAM_BASE_URL: cannot reach")


async def test_neither_the_token_nor_message_text_reaches_the_logs(
    adapter: AttachedPlatform, telegram: FakeTelegramServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with logging_policy("DEBUG"):  # COMPANION_LOG_LEVEL=DEBUG: python-telegram-bot's payload logs stay off
        logging.getLogger("httpx").setLevel(logging.DEBUG)  # request URLs logged: the token must be redacted
        await say(telegram, f"hello {CANARY}")
        await say(telegram, "/private sesame")
    # aiosqlite logs SQL parameters at DEBUG: the store's concern, configured at the entry point.
    lines = "\n".join(r.getMessage() for r in caplog.records if not r.name.startswith("aiosqlite"))
    assert "HTTP Request" in lines  # httpx did log the requests, with the token redacted
    assert telegram.token not in lines
    assert CANARY not in lines and "sesame" not in lines


# --- an update python-telegram-bot cannot parse -------------------------------------------


def offsets_passed(telegram: FakeTelegramServer, update_id: int) -> bool:
    """Whether a getUpdates call has confirmed `update_id` (an offset above it)."""
    return any(offset is not None and offset > update_id for offset in telegram.get_updates_offsets)


async def test_an_update_python_telegram_bot_cannot_parse_is_confirmed_and_the_next_message_is_answered(
    adapter: AttachedPlatform, telegram: FakeTelegramServer, model: FakeOpenAIServer
) -> None:
    await telegram.wait_for_polling()
    poison = telegram.send_unparsable(USER, USER, f"{CANARY} unparsable")

    model.reply_text("Still here.")
    assert await say(telegram, "hello") == "Still here."
    await telegram.wait_for(lambda: offsets_passed(telegram, poison))


async def test_an_unparsable_update_confirms_no_update_before_it_that_is_still_being_answered(
    adapter: AttachedPlatform, telegram: FakeTelegramServer, model: FakeOpenAIServer
) -> None:
    release = asyncio.Event()

    async def held(body: dict) -> str:
        await release.wait()
        return "Answered."

    model.responder = held
    await telegram.wait_for_polling()
    telegram.send_text(USER, USER, "hello")  # one batch: a message, then an update that cannot be parsed
    poison = telegram.send_unparsable(OTHER, OTHER, f"{CANARY} unparsable")
    polled = len(telegram.get_updates_offsets)
    try:
        # Polling goes on while the turn of "hello" is held at the model ...
        await telegram.wait_for(lambda: len(telegram.get_updates_offsets) >= polled + 3)
        assert not offsets_passed(telegram, poison - 1)  # ... and confirms neither it nor what follows
    finally:
        release.set()
    assert (await telegram.wait_for_sent(1))[0].text == "Answered."
    await telegram.wait_for(lambda: offsets_passed(telegram, poison))


async def test_an_unparsable_update_is_logged_by_id_and_size_never_by_its_content(
    adapter: AttachedPlatform, telegram: FakeTelegramServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with logging_policy("DEBUG"):  # COMPANION_LOG_LEVEL=DEBUG
        await telegram.wait_for_polling()
        poison = telegram.send_unparsable(USER, USER, f"{CANARY} unparsable")
        await telegram.wait_for(lambda: offsets_passed(telegram, poison))
    skipped = [r for r in caplog.records if r.name.startswith("adapters.telegram") and poison in (r.args or ())]
    assert len(skipped) == 1 and "message" in skipped[0].getMessage()  # its id and its kind, once
    lines = "\n".join(r.getMessage() for r in caplog.records)
    assert CANARY not in lines and "canary" not in lines.lower()
    assert not [r for r in caplog.records if r.levelno >= logging.CRITICAL]


async def test_an_answer_that_is_not_json_is_refused_without_its_body_reaching_the_log(
    adapter: AttachedPlatform, telegram: FakeTelegramServer, model: FakeOpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with logging_policy("DEBUG"):
        await telegram.wait_for_polling()
        telegram.cut_next("getUpdates")  # the answer carrying the message below is cut short
        model.reply_text("Got it.")
        assert await say(telegram, f"hello {CANARY}") == "Got it."  # fetched again, whole, and answered
    assert len(telegram.cut_answers) == 1 and CANARY.encode() in telegram.cut_answers[0]
    lines = "\n".join(r.getMessage() for r in caplog.records)
    assert "getUpdates failed (TelegramError)" in lines
    assert CANARY not in lines


async def test_the_token_stays_out_of_the_logs_when_requests_fail_and_are_retried(
    adapter: AttachedPlatform, telegram: FakeTelegramServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="httpx")  # whatever another test configured
    telegram.fail_next("sendMessage", 502)
    telegram.fail_next("getUpdates", 500)
    assert await say(telegram, "hello")
    await telegram.wait_for(lambda: len(telegram.calls_of("getUpdates")) >= 3)
    lines = "\n".join(r.getMessage() for r in caplog.records if not r.name.startswith("aiosqlite"))
    assert "502" in lines or "Bad Gateway" in lines  # the failed request was logged ...
    assert telegram.token not in lines  # ... without the token in its URL


async def test_start_and_aclose_are_safe_to_call_twice(adapter: AttachedPlatform, telegram: FakeTelegramServer) -> None:
    await adapter.start()
    assert len(telegram.calls_of("getMe")) == 1
    await adapter.aclose()
    await adapter.aclose()


# --- pure parts -------------------------------------------------------------------


def _units(text: str) -> int:
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(alphabet=st.sampled_from("ab .!?\n\t😀é") | st.characters(), max_size=400),
    limit=st.integers(min_value=2, max_value=60),
)
def test_split_message_keeps_every_character_in_order_within_the_limit(text: str, limit: int) -> None:
    parts = split_message(text, limit)
    assert all(part and part == part.strip() for part in parts)
    assert all(_units(part) <= limit for part in parts)
    position = 0
    for part in parts:  # only whitespace lies between and around the parts
        found = text.find(part, position)
        assert found >= 0 and text[position:found].strip() == ""
        position = found + len(part)
    assert text[position:].strip() == ""
    if _units(text.strip()) <= limit:
        assert parts == ([text.strip()] if text.strip() else [])


def test_split_message_prefers_paragraphs_then_sentences_then_words() -> None:
    assert split_message("First paragraph here.\n\nSecond one.", 30) == ["First paragraph here.", "Second one."]
    assert split_message("One sentence. Another sentence here", 20) == ["One sentence.", "Another sentence", "here"]
    assert split_message("abcdefghij", 4) == ["abcd", "efgh", "ij"]
    assert split_message("😀😀😀", 4) == ["😀😀", "😀"]  # an emoji counts as two UTF-16 units


@settings(max_examples=200, deadline=None)
@given(st.permutations(range(1, 9)), st.integers(min_value=0, max_value=8))
def test_a_ledger_restored_after_any_crash_skips_exactly_the_handled_updates(
    order: list[int], crashed_after: int
) -> None:
    ledger = UpdateLedger()
    for update_id in range(1, 9):
        ledger.begin(update_id)
    handled = set(order[:crashed_after])
    for update_id in order[:crashed_after]:
        ledger.finish(update_id)
    restored = UpdateLedger.parse(ledger.dump())
    assert {i for i in range(1, 9) if restored.is_known(i)} == handled
    offset = restored.next_offset or 1
    assert all(i >= offset for i in range(1, 9) if i not in handled)  # Telegram still delivers the rest


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"@{BOT} how are you?", "how are you?"),
        (f"hey @{BOT} how are you?", "hey how are you?"),
        (f"@{BOT.upper()}, tell me", "tell me"),
        (f"@{BOT}", f"@{BOT}"),
        ("no mention at all", None),
        (f"/help@{BOT}", f"/help@{BOT}"),
        ("/help@another_bot", None),
        ("/mode", "/mode"),
        ("/unknowncommand", None),
    ],
)
def test_group_text_answers_only_messages_addressed_to_the_bot(text: str, expected: str | None) -> None:
    from tests.helpers.fake_telegram import _entities

    entities = [Entity(e["type"], e["offset"], e["length"]) for e in _entities(text)]
    assert (
        group_text(text, entities, username=BOT, bot_id=1, replied_to_bot=False, commands={"help", "mode"}) == expected
    )


def test_group_text_strips_a_mention_after_characters_outside_the_basic_plane() -> None:
    text = f"😀😀 @{BOT} hi"
    entity = Entity("mention", 5, len(BOT) + 1)  # two emoji are four UTF-16 units, then a space
    assert group_text(text, [entity], username=BOT, bot_id=1, replied_to_bot=False, commands=set()) == "😀😀 hi"


async def test_a_persistent_409_conflict_is_named_once_per_streak_and_polling_goes_on(
    adapter: AttachedPlatform, telegram: FakeTelegramServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="adapters.telegram.intake")

    def named() -> list[logging.LogRecord]:
        return [r for r in caplog.records if "another instance is polling this bot token" in r.getMessage()]

    async def conflicts(times: int) -> None:
        polls = len(telegram.calls_of("getUpdates"))
        telegram.fail_next(
            "getUpdates", 409, description="Conflict: terminated by other getUpdates request", times=times
        )
        await telegram.wait_for(lambda: len(telegram.calls_of("getUpdates")) > polls + times)

    await telegram.wait_for_polling()
    await conflicts(2)  # a brief overlap, as when a restart's old long poll is still open
    assert named() == []
    await conflicts(6)
    assert [(r.levelno, r.getMessage().split(";")[0]) for r in named()] == [
        (logging.ERROR, "telegram: another instance is polling this bot token (409 Conflict)")
    ]
    assert await say(telegram, "/mode")  # still polling, still answering
    await conflicts(3)  # a new streak is named again
    assert len(named()) == 2


def _rows_mentioning(path: Path, needles: list[str]) -> list[tuple]:
    """Every row of every table that holds one of `needles` in any column."""
    found = []
    with sqlite3.connect(path) as db:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            for row in db.execute(f'SELECT * FROM "{table}"'):
                if any(needle in str(value) for value in row for needle in needles):
                    found.append((table, row))
    db.close()
    return found


# --- the outbox: replies outlive outages ---------------------------------------------


async def test_a_reply_telegram_refuses_for_longer_than_every_retry_is_kept_and_sent_once_when_it_is_back(
    adapter: AttachedPlatform,
    companion: Companion,
    telegram: FakeTelegramServer,
    model: FakeOpenAIServer,
    stores: Stores,
) -> None:
    model.reply_text("kept for you")
    telegram.fail_next("sendMessage", 502, times=5)  # every one of the adapter's own attempts
    telegram.send_text(USER, USER, "hello")
    await telegram.wait_for(lambda: len(telegram.calls_of("sendMessage")) >= 5)
    await telegram.wait_for(lambda: telegram.pending_updates == 0)  # the update is confirmed: the row holds it
    await companion.outbox.settle(10)  # the send was handed to the outbox's lane: its failure is recorded
    rows = await engines.rows(stores, "SELECT status, attempts, error FROM deliveries")
    assert [tuple(r) for r in rows] == [("pending", 1, "NetworkError")]
    assert telegram.texts_to(USER) == []
    await engines.rows(stores, "UPDATE deliveries SET next_attempt_at = 0")  # its backoff has passed
    await companion.outbox.dispatch_due()
    await companion.outbox.dispatch_due()
    assert telegram.texts_to(USER) == ["kept for you"]
    assert len(model.requests) == 1  # the model was not asked again
    assert [tuple(r) for r in await engines.rows(stores, "SELECT status, text FROM deliveries")] == [("sent", None)]


async def test_a_blocked_bot_gives_up_on_the_reply_and_records_why(
    adapter: AttachedPlatform,
    companion: Companion,
    telegram: FakeTelegramServer,
    model: FakeOpenAIServer,
    stores: Stores,
) -> None:
    telegram.fail_next("sendMessage", 403, description="Forbidden: bot was blocked by the user")
    telegram.send_text(USER, USER, "hello")
    await telegram.wait_for(lambda: len(telegram.calls_of("sendMessage")) >= 1)
    await telegram.wait_for(lambda: telegram.pending_updates == 0)
    await companion.outbox.settle(10)  # the send was handed to the outbox's lane: its refusal is recorded
    rows = await engines.rows(stores, "SELECT status, error, text FROM deliveries")
    assert [tuple(r) for r in rows] == [("failed", "Forbidden", None)]
    assert len(telegram.calls_of("sendMessage")) == 1  # a 403 is not retried


async def test_a_redelivered_update_is_not_stored_or_answered_again(
    new_adapter: AdapterFactory,
    companion: Companion,
    telegram: FakeTelegramServer,
    model: FakeOpenAIServer,
    stores: Stores,
) -> None:
    first = await new_adapter(companion)
    await say(telegram, "hello once")
    await first.aclose()
    await engines.rows(stores, "DELETE FROM adapter_state")  # as if the ledger write was lost in a kill
    telegram.redeliver()
    await new_adapter(companion)
    await telegram.wait_for(lambda: telegram.pending_updates == 0)  # handled (confirmed only after)
    assert len(telegram.texts_to(USER)) == 1
    assert len(model.requests) == 1
    assert [
        tuple(r) for r in await engines.rows(stores, "SELECT count(*) FROM messages WHERE text = 'hello once'")
    ] == [(1,)]


async def test_a_reply_pending_while_the_bot_api_is_unreachable_is_delivered_once_when_it_returns(
    adapter: AttachedPlatform,
    companion: Companion,
    telegram: FakeTelegramServer,
    model: FakeOpenAIServer,
    stores: Stores,
) -> None:
    model.reply_text("kept for you", delay=0.3)
    telegram.send_text(USER, USER, "hello")
    await telegram.wait_for(lambda: len(model.requests) == 1)
    await telegram.go_down()  # the Bot API goes away while the model answers
    await wait_for_rows(stores, "SELECT 1 FROM deliveries WHERE status = 'pending' AND attempts >= 1")
    for _ in range(3):  # the outage lasts: every due retry fails, nothing is lost
        await engines.rows(stores, "UPDATE deliveries SET next_attempt_at = 0")
        await companion.outbox.dispatch_due()
    (attempts,) = [r[0] for r in await engines.rows(stores, "SELECT attempts FROM deliveries WHERE status = 'pending'")]
    assert attempts >= 4
    await telegram.come_back()
    await engines.rows(stores, "UPDATE deliveries SET next_attempt_at = 0")
    await companion.outbox.dispatch_due()
    await companion.outbox.dispatch_due()
    assert telegram.texts_to(USER) == ["kept for you"]
    assert len(model.requests) == 1


async def wait_for_rows(stores: Stores, sql: str, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await engines.rows(stores, sql):
        assert asyncio.get_running_loop().time() < deadline, f"no row for: {sql}"
        await asyncio.sleep(0.02)


async def test_a_quick_answer_costs_no_typing_action(
    new_adapter: AdapterFactory, new_companion: CompanionFactory, telegram: FakeTelegramServer, model: FakeOpenAIServer
) -> None:
    # "Quick" is shorter than typing_delay: a long one, so that a loaded machine is still quick enough.
    await new_adapter(await new_companion(edge=EdgeSettings(typing_delay=30.0)))
    model.reply_text("Quick.")
    assert await say(telegram, "an easy one") == "Quick."
    assert telegram.chat_actions == []


async def test_a_long_reply_resumed_after_an_outage_is_marked_sent_with_all_its_parts_each_sent_once(
    adapter: AttachedPlatform,
    companion: Companion,
    telegram: FakeTelegramServer,
    model: FakeOpenAIServer,
    stores: Stores,
) -> None:
    model.reply_text("a" * 4000 + "\n\n" + "b" * 4000 + "\n\n" + "c" * 100)  # three parts
    telegram.fail_next("sendMessage", 502, times=5, after=1)  # the first part goes, the second not
    telegram.send_text(USER, USER, "hello")
    await telegram.wait_for(lambda: telegram.pending_updates == 0)
    await wait_for_rows(stores, "SELECT 1 FROM deliveries WHERE status = 'pending' AND parts_sent = 1")
    await engines.rows(stores, "UPDATE deliveries SET next_attempt_at = 0")
    await companion.outbox.dispatch_due()
    sent = telegram.texts_to(USER)
    assert [text[:1] for text in sent] == ["a", "b", "c"]
    rows = await engines.rows(stores, "SELECT status, parts_sent FROM deliveries")
    assert [tuple(r) for r in rows] == [("sent", 3)]
