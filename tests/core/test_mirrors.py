"""Mirrors (issue 13): normal exchanges copied to bound chats; nothing of private mode, ever.

The core and a real SQLite store run for real; the far ends are FakeSenders (the end-to-end
test in tests/bot/test_mirrors_wire.py runs the same flow through both platform libraries).
"""

from __future__ import annotations

import dataclasses
import logging

import pytest

from bot.bootstrap import build_companion
from core.delivery.outbox import Outbox
from core.turn.companion import Companion
from core.turn.config import CompanionConfig
from core.values import copy
from core.values.errors import PrivateWriteRefused
from core.values.model import Completion, InboundMessage, MirrorOf, Reply
from tests.conftest import PASSPHRASE
from tests.helpers import engines
from tests.helpers.chat import all_rows
from tests.helpers.fakes import FakeSender

pytestmark = [pytest.mark.engines, pytest.mark.privacy]

USER = "100"
CHANNEL = "5550001"
CANARY = "MIRROR-PRIVATE-CANARY"


@pytest.fixture
def telegram() -> FakeSender:
    return FakeSender("telegram", limit=4096)


@pytest.fixture
def discord() -> FakeSender:
    return FakeSender("discord", limit=2000)


@pytest.fixture
async def companion(stores, provider, clock, passphrase_hash, telegram, discord) -> Companion:
    outbox = Outbox(stores.outbox, clock, base_delay=2.0, max_delay=60.0, rand=lambda: 1.0)
    outbox.register(telegram)
    outbox.register(discord)
    companion = build_companion(
        stores,
        provider,
        CompanionConfig(
            passphrase_hash=passphrase_hash,
            allowed_accounts=frozenset({f"telegram:{USER}"}),
            platforms=frozenset({"telegram", "discord"}),
        ),
        clock=clock,
        outbox=outbox,
    )
    await companion.start()
    return companion


_ids = iter(range(1, 10**6))


async def tell(companion: Companion, text: str) -> Reply:
    """What the Telegram adapter does: hand the message to the core, send the reply's delivery,
    and (here, to be deterministic) wait for the turn's mirror sends."""
    message = InboundMessage(
        "telegram", USER, USER, text, is_direct=True, message_id=f"m{next(_ids)}", sent_at=companion.clock.now()
    )
    reply = await companion.handle(message)
    assert reply is not None
    if reply.delivery_id is not None and companion.outbox is not None:
        await companion.outbox.deliver(reply.conversation_id, reply.delivery_id)
    await settle(companion)
    return reply


async def settle(companion: Companion) -> None:
    await companion.drain()  # the mirror copies handed to the outbox are sent


async def mirror_rows(stores) -> list[tuple]:
    return await all_rows(
        stores, "SELECT status, text, segment_id, binding_id FROM deliveries WHERE kind = 'mirror' ORDER BY id"
    )


async def bound(companion: Companion) -> int:
    reply = await tell(companion, f"/mirror discord:{CHANNEL}")
    assert reply.text.startswith("Mirror "), reply.text
    (binding_id,) = [r[0] for r in await all_rows(engines.stores_of(companion), "SELECT id FROM bindings")]
    return binding_id


# --- what is mirrored ------------------------------------------------------------------


async def test_a_normal_exchange_is_mirrored_with_the_source_name(companion, stores, provider, discord):
    await bound(companion)
    assert discord.posts == [(CHANNEL, copy.MIRROR_HELLO.format(source="telegram DM"))]
    provider.script = [Completion("Hello to you too.")]
    await tell(companion, "hello there")
    assert discord.texts_to(CHANNEL) == ["[telegram DM] you: hello there\ncompanion: Hello to you too."]
    assert [(s, t) for s, t, _, _ in await mirror_rows(stores)] == [("sent", None)]  # no text once sent


async def test_mirror_rows_are_written_in_the_transaction_of_the_reply_before_anything_is_sent(
    companion, stores, discord
):
    await bound(companion)
    discord.down = True
    await tell(companion, "hello")
    rows = await all_rows(
        stores,
        "SELECT r.message_id = m.message_id AS same_message, r.created_at = m.created_at AS same_moment FROM deliveries r"
        " JOIN deliveries m ON m.kind = 'mirror' WHERE r.kind = 'reply' AND r.message_id IS NOT NULL",
    )
    assert rows == [(1, 1)]  # one commit: the same message, the same moment


async def test_commands_refusals_and_failed_turns_are_never_mirrored(companion, stores, provider, discord):
    await bound(companion)
    await tell(companion, "/help")
    await tell(companion, "/mode")
    await tell(companion, "/remember I like tea")
    await tell(companion, "/privte oops")  # a mistyped secret command: not even stored
    provider.fail_all = True
    await tell(companion, "are you there?")  # the apology is not an exchange
    assert await mirror_rows(stores) == []
    assert discord.sent == []


# --- nothing of private mode -------------------------------------------------------------


async def test_no_mirror_row_for_a_private_reply(companion, stores, provider, discord):
    await bound(companion)
    await tell(companion, "before")
    await tell(companion, f"/private {PASSPHRASE}")
    await tell(companion, f"{CANARY} one")
    await tell(companion, f"{CANARY} two")
    assert len(await mirror_rows(stores)) == 1  # checked in the table: the private replies made none
    await tell(companion, "/normal")
    provider.script = [Completion("Back to ordinary things.")]
    await tell(companion, "after")
    rows = await mirror_rows(stores)
    assert len(rows) == 2 and all(segment is None for _, _, segment, _ in rows)
    assert discord.texts_to(CHANNEL) == [
        "[telegram DM] you: before\ncompanion: reply 1",
        "[telegram DM] you: after\ncompanion: Back to ordinary things.",
    ]
    everything = "\n".join(discord.texts() + [t for _, t in discord.posts])
    assert CANARY not in everything and copy.TRANSITION_FALLBACK not in everything


async def test_the_store_writes_no_mirror_row_for_a_private_reply_even_when_asked(companion, stores):
    await bound(companion)
    await tell(companion, f"/private {PASSPHRASE}")
    conversation_id, segment_id = (await all_rows(stores, "SELECT conversation_id, id FROM segments"))[0]
    user_id = await stores.timeline.add_message(conversation_id, "user", CANARY, 0.0, segment_id=segment_id)
    recorded = await stores.timeline.record_reply(
        conversation_id, CANARY, 0.0, stored_text=CANARY, segment_id=segment_id, mirror=MirrorOf(user_id, "x")
    )
    assert recorded.mirror_ids == () and await mirror_rows(stores) == []
    # A normal message of a conversation that has a segment open is not copied either.
    normal_user = await stores.timeline.add_message(conversation_id, "user", "normal words", 0.0)
    recorded = await stores.timeline.record_reply(
        conversation_id, "ok", 0.0, stored_text="ok", mirror=MirrorOf(normal_user, "x")
    )
    assert recorded.mirror_ids == () and await mirror_rows(stores) == []


async def test_the_schema_refuses_a_mirror_row_for_a_private_conversation(companion, stores):
    binding_id = await bound(companion)
    await tell(companion, f"/private {PASSPHRASE}")
    (conversation_id,) = [r[0] for r in await all_rows(stores, "SELECT conversation_id FROM segments")]
    with engines.refused_by_the_database(stores):
        await engines.plant(
            stores,
            "INSERT INTO deliveries (conversation_id, binding_id, kind, platform, chat_id, nonce, text,"
            " next_attempt_at, created_at) VALUES (?, ?, 'mirror', 'discord', ?, 'n', 'copy', 0, 0)",
            (conversation_id, binding_id, CHANNEL),
        )


async def test_the_binding_mutator_refuses_a_private_conversation_with_the_command_handler_bypassed(
    companion, stores, clock
):
    await tell(companion, f"/private {PASSPHRASE}")
    (conversation_id,) = [r[0] for r in await all_rows(stores, "SELECT conversation_id FROM segments")]
    with pytest.raises(PrivateWriteRefused):
        await stores.bindings.add_binding(conversation_id, "discord", CHANNEL, clock.now())
    assert await all_rows(stores, "SELECT count(*) FROM bindings") == [(0,)]


async def test_mirror_in_private_mode_is_refused_with_the_reason_and_posts_nothing(companion, stores, discord):
    await tell(companion, f"/private {PASSPHRASE}")
    reply = await tell(companion, f"/mirror discord:{CHANNEL}")
    assert reply.text == copy.PRIVATE_REFUSES.format(command="mirror")
    assert discord.posts == [] and await all_rows(stores, "SELECT count(*) FROM bindings") == [(0,)]


# --- creating and removing bindings ------------------------------------------------------


async def test_mirror_verification_failure_stores_nothing(companion, stores, discord):
    discord.fail_with = [(True, "http 404")]
    reply = await tell(companion, f"/mirror discord:{CHANNEL}")
    assert reply.text.startswith(f"I could not post a test message to discord:{CHANNEL}: discord refused it")
    assert reply.text.endswith("Nothing was stored.")
    discord.down = True
    reply = await tell(companion, f"/mirror discord:{CHANNEL}")
    assert "could not be reached" in reply.text and reply.text.endswith("Nothing was stored.")
    assert await all_rows(stores, "SELECT count(*) FROM bindings") == [(0,)]


async def test_an_unconfigured_target_platform_is_refused(companion, stores, provider, clock, discord):
    companion.outbox.unregister(discord)
    reply = await tell(companion, f"/mirror discord:{CHANNEL}")  # configured, still connecting
    assert reply.text.startswith("discord is configured here but not connected yet")
    config = dataclasses.replace(companion.config, platforms=frozenset({"telegram"}))
    telegram_only = build_companion(stores, provider, config, clock=clock, outbox=companion.outbox)
    for platform in ("discord", "slack", "terminal"):
        reply = await tell(telegram_only, f"/mirror {platform}:{CHANNEL}")
        assert (
            reply.text == f"{platform} is not configured in this process, so I cannot post there. Nothing was stored."
        )
    assert discord.posts == [] and await all_rows(stores, "SELECT count(*) FROM bindings") == [(0,)]


async def test_mirror_lists_bindings_with_their_state_and_unmirror_removes_one_with_its_pending_copies(
    companion, stores, discord
):
    assert (await tell(companion, "/mirror")).text.startswith("Nothing here is mirrored.")
    binding_id = await bound(companion)
    listing = (await tell(companion, "/mirror")).text
    assert f"{binding_id}. discord:{CHANNEL} - active" in listing
    discord.down = True
    await tell(companion, "hello")
    assert [s for s, *_ in await mirror_rows(stores)] == ["pending"]
    assert (await tell(companion, f"/unmirror {binding_id}")).text.startswith(f"Mirror {binding_id} to discord:")
    assert await mirror_rows(stores) == []  # the pending copy went with its binding
    assert (await tell(companion, f"/unmirror {binding_id}")).text.startswith(f"There is no mirror {binding_id}")


async def test_bad_mirror_arguments_change_nothing(companion, stores, discord):
    for args in ("discord", "discord:", ":5", "discord:1 2", "telegram:100"):
        reply = await tell(companion, f"/mirror {args}")
        assert "Nothing" in reply.text, args
    assert discord.posts == [] and await all_rows(stores, "SELECT count(*) FROM bindings") == [(0,)]


# --- sending ---------------------------------------------------------------------------------


async def test_a_mirror_target_that_is_down_never_holds_back_the_replies(companion, stores, clock, telegram, discord):
    await bound(companion)
    discord.down = True
    first = await tell(companion, "first")
    second = await tell(companion, "second")
    assert telegram.texts_to(USER)[-2:] == [first.text, second.text]
    discord.down = False
    clock.advance(60)
    await companion.outbox.dispatch_due()
    assert [t.split("\n")[0] for t in discord.texts_to(CHANNEL)] == [
        "[telegram DM] you: first",
        "[telegram DM] you: second",
    ]


async def test_a_refusal_for_good_on_a_mirror_disables_the_binding_with_one_notice(
    companion, stores, clock, telegram, discord
):
    binding_id = await bound(companion)
    discord.down = True
    await tell(companion, "one")
    await tell(companion, "two")  # two copies wait behind the outage
    discord.down = False
    discord.fail_with = [(True, "http 403")]  # then the bot is removed from the channel
    clock.advance(60)
    await companion.outbox.dispatch_due()
    await companion.outbox.dispatch_due()
    notices = [t for t in telegram.texts_to(USER) if t.startswith("I stopped mirroring")]
    assert notices == [copy.MIRROR_DISABLED.format(target=f"discord:{CHANNEL}", reason="http 403")]
    assert await all_rows(stores, "SELECT state, disabled_reason FROM bindings") == [("disabled", "http 403")]
    assert [(s, t) for s, t, *_ in await mirror_rows(stores)] == [("failed", None), ("failed", None)]
    await tell(companion, "three")  # a disabled binding gets no copies, and nothing is retried
    clock.advance(3600)
    await companion.outbox.dispatch_due()
    assert len(await mirror_rows(stores)) == 2 and discord.sent == []
    assert "stopped: the chat refused my messages (http 403)" in (await tell(companion, "/mirror")).text
    # Turned on again: verified again, active again.
    assert (await tell(companion, f"/mirror discord:{CHANNEL}")).text.startswith(f"Mirror {binding_id} is on")
    await tell(companion, "four")
    assert discord.texts_to(CHANNEL)[-1].startswith("[telegram DM] you: four")


async def test_a_mirror_refused_for_good_while_the_source_is_private_tells_it_inside_the_interval(
    companion, stores, clock, telegram, discord
):
    await bound(companion)
    discord.down = True
    await tell(companion, "one")  # its copy waits behind the outage
    await tell(companion, f"/private {PASSPHRASE} 1h")
    discord.down = False
    discord.fail_with = [(True, "http 403")]  # the target refuses while the source is private
    clock.advance(60)
    await companion.outbox.dispatch_due()
    notice = copy.MIRROR_DISABLED.format(target=f"discord:{CHANNEL}", reason="http 403")
    assert telegram.texts_to(USER)[-1] == notice  # told once, in the private thread
    (segment,) = await all_rows(stores, "SELECT id FROM segments WHERE ended_at IS NULL")
    # Written while private, the notice belongs to the interval (the schema refuses it otherwise).
    assert await all_rows(
        stores, "SELECT segment_id FROM deliveries WHERE kind = 'reply' ORDER BY id DESC LIMIT 1"
    ) == [segment]


async def test_delivery_and_message_in_one_transaction(companion, stores, provider):
    await bound(companion)
    # A failure injected between the reply's rows and its mirror rows, inside the transaction.
    provider.script = [Completion("an answer that must not half-exist")]
    async with engines.failing_inserts(stores, "deliveries", "new.kind = 'mirror'"):
        with engines.refused_by_the_database(stores):
            await companion.handle(InboundMessage("telegram", USER, USER, "hello", is_direct=True, message_id="x1"))
    assert await all_rows(stores, "SELECT count(*) FROM messages WHERE role = 'assistant' AND kind = 'chat'") == [(0,)]
    assert await all_rows(stores, "SELECT count(*) FROM deliveries WHERE message_id IS NOT NULL") == [(0,)]
    assert await all_rows(stores, "SELECT turn FROM messages WHERE text = 'hello'") == [("open",)]


async def test_no_message_text_in_logs_at_debug(companion, stores, provider, clock, discord, caplog):
    from tests.helpers.logs import logging_policy

    caplog.set_level(logging.DEBUG)
    with logging_policy("DEBUG"):  # as `companion` runs it: libraries that log payloads held at their floor
        await _talk_with_mirrors(companion, provider, discord)
    logged = caplog.text + "\n".join(str(r.args) for r in caplog.records)
    assert any(r.name == "core.delivery.outbox" for r in caplog.records), (
        "the outbox logged nothing: the test proves nothing"
    )
    for needle in ("USER-WORDS", "ANSWER-WORDS", CANARY, "Mirroring telegram DM", PASSPHRASE):
        assert needle not in logged, needle


async def _talk_with_mirrors(companion, provider, discord) -> None:
    await bound(companion)
    provider.script = [Completion("ANSWER-WORDS-IN-LOG?")]
    await tell(companion, "USER-WORDS-IN-LOG?")
    discord.fail_with = [(True, "http 403")]
    provider.script = [Completion("ANSWER-WORDS-IN-LOG?")]
    await tell(companion, "USER-WORDS-IN-LOG? again")
    await tell(companion, f"/private {PASSPHRASE}")
    await tell(companion, CANARY)
