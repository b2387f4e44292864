"""One person across Telegram, Discord and the terminal (issue 16): `/link` codes, `/whoami`,
`/unlink`, COMPANION_OWNER, and the wall: a private interval stays in its one conversation.

The core, the real SQLite store and the outbox run for real; the far ends are FakeSenders and
the FakeProvider, which records every request the model would receive."""

from __future__ import annotations

import logging
import re

import pytest

from bot.bootstrap import build_companion
from bot.logs import FLOORS
from core.commands.links import CODE_SECONDS
from core.delivery.outbox import Outbox
from core.proactive.manners import Manners
from core.proactive.service import ProactiveConfig
from core.turn.companion import Companion
from core.turn.config import CompanionConfig
from core.values.model import InboundMessage, Summary
from tests.conftest import PASSPHRASE
from tests.helpers import engines
from tests.helpers.fakes import FakeSender, request_text

TG = "101"  # the person's Telegram user id (and their direct chat's id)
DC = "202"  # ... on Discord
STRANGER = "303"
CANARY = "CANARY-LILAC-7741"


@pytest.fixture
def senders() -> dict[str, FakeSender]:
    return {"telegram": FakeSender("telegram"), "discord": FakeSender("discord", limit=2000)}


@pytest.fixture
def make(stores, provider, clock, passphrase_hash, senders):
    async def make(**config) -> Companion:
        outbox = Outbox(stores.outbox, clock, rand=lambda: 1.0)
        for sender in senders.values():
            outbox.register(sender)
        config.setdefault(
            "allowed_accounts",
            frozenset({f"telegram:{TG}", f"discord:{DC}", f"telegram:{STRANGER}", f"discord:{STRANGER}"}),
        )
        companion = build_companion(
            stores,
            provider,
            CompanionConfig(
                passphrase_hash=passphrase_hash,
                platforms=frozenset({"telegram", "discord"}),
                proactive=ProactiveConfig(Manners(quiet_hours=None)),
                **config,
            ),
            clock=clock,
            outbox=outbox,
        )
        await companion.start()
        return companion

    return make


_ids = iter(range(1, 10**6))


async def tell(companion: Companion, platform: str, user: str, text: str, *, chat: str | None = None):
    message = InboundMessage(
        platform,
        chat or user,
        user,
        text,
        is_direct=chat is None,
        message_id=f"m{next(_ids)}",
        sent_at=companion.clock.now(),
    )
    reply = await companion.handle(message)
    assert reply is not None
    if reply.delivery_id is not None and companion.outbox is not None:
        await companion.outbox.deliver(reply.conversation_id, reply.delivery_id)
    return reply


def code_in(text: str) -> str:
    match = re.search(r"link code: (\d{8})", text)
    assert match, "no code in the answer"
    return match.group(1)


async def link(companion: Companion, first=("telegram", TG), second=("discord", DC)) -> str:
    code = code_in((await tell(companion, *first, "/link")).text)
    reply = await tell(companion, *second, f"/link {code}")
    assert reply.text.startswith("Linked."), reply.text
    return code


async def person_of(stores, platform: str, user: str) -> int:
    row = await engines.first(
        stores, "SELECT person_id FROM accounts WHERE platform = ? AND platform_user_id = ?", (platform, user)
    )
    return row[0]


async def every_text_in_the_database(stores) -> str:
    """Every value of every row of every table (the recall index too), as one string."""
    tables = await engines.tables(stores)
    values: list[str] = []
    for table in tables:
        for row in await engines.rows(stores, f"SELECT * FROM {table}"):
            values += [str(v) for v in tuple(row)]
    return "\n".join(values)


# --- linking ------------------------------------------------------------------------------


async def test_link_code_joins_a_telegram_and_a_discord_account_into_one_person(make, stores):
    companion = await make()
    await tell(companion, "telegram", TG, "hello")
    await tell(companion, "discord", DC, "hello")
    assert await person_of(stores, "telegram", TG) != await person_of(stores, "discord", DC)
    await link(companion)
    assert await person_of(stores, "telegram", TG) == await person_of(stores, "discord", DC)
    whoami = (await tell(companion, "telegram", TG, "/whoami")).text
    assert f"Telegram {TG}" in whoami and f"Discord {DC}" in whoami


async def test_a_memory_saved_on_discord_is_recalled_on_telegram(make, provider):
    companion = await make()
    await link(companion)
    await tell(companion, "discord", DC, "/remember my sister is called Ana")
    await tell(companion, "telegram", TG, "what do you know about my family?")
    assert "my sister is called Ana" in request_text(provider.last_reply_request())
    await tell(companion, "discord", DC, "we hiked the Pelister ridge today")
    recalled = (await tell(companion, "telegram", TG, "/recall Pelister")).text
    assert "Pelister ridge" in recalled


async def test_link_code_is_single_use(make, stores):
    companion = await make()
    code = await link(companion)
    reply = await tell(companion, "telegram", STRANGER, f"/link {code}")
    assert "not right" in reply.text
    assert await person_of(stores, "telegram", STRANGER) != await person_of(stores, "telegram", TG)


async def test_link_code_expires_after_ten_minutes(make, stores, clock):
    companion = await make()
    code = code_in((await tell(companion, "telegram", TG, "/link")).text)
    clock.advance(CODE_SECONDS + 1)
    assert "not right" in (await tell(companion, "discord", DC, f"/link {code}")).text
    assert await person_of(stores, "telegram", TG) != await person_of(stores, "discord", DC)


async def test_five_wrong_codes_lock_linking_for_15_minutes_across_a_restart(make, stores, clock):
    companion = await make()
    code = code_in((await tell(companion, "telegram", TG, "/link")).text)
    wrong = "00000000" if code != "00000000" else "11111111"
    for _ in range(4):
        await tell(companion, "discord", DC, f"/link {wrong}")
    restarted = await make()  # the attempts are rows, not memory
    assert "now locked" in (await tell(restarted, "discord", DC, f"/link {wrong}")).text
    assert "locked" in (await tell(restarted, "discord", DC, f"/link {code}")).text
    assert await person_of(stores, "telegram", TG) != await person_of(stores, "discord", DC)
    clock.advance(15 * 60 + 1)
    code = code_in((await tell(restarted, "telegram", TG, "/link")).text)
    assert (await tell(restarted, "discord", DC, f"/link {code}")).text.startswith("Linked.")


@pytest.mark.engines
async def test_link_code_is_never_logged_stored_in_clear_or_sent_to_the_model(make, stores, provider, caplog):
    caplog.set_level(logging.DEBUG)
    for name, floor in FLOORS.items():  # the entry point's policy: libraries that log payloads held at their floor
        caplog.set_level(floor, logger=name)
    companion = await make()
    issued = await tell(companion, "telegram", TG, "/link")
    code = code_in(issued.text)
    used = await tell(companion, "discord", DC, f"/link {code}")
    assert used.delete_inbound  # the message that carried it is deleted from the chat
    await tell(companion, "discord", DC, "did that work?")
    assert code not in caplog.text
    assert all(code not in request_text(r) for r in provider.requests)
    stored = [
        r[0]
        for r in await engines.rows(
            stores, "SELECT text FROM messages WHERE kind = 'command' AND text LIKE '/link%' ORDER BY id"
        )
    ]
    assert stored == ["/link", "/link [redacted]"]
    # The issued code goes out in the answer's delivery row; once sent, nothing holds it in clear.
    assert code not in await every_text_in_the_database(stores)


async def test_link_code_sent_in_a_group_is_refused_and_deleted(make, stores):
    companion = await make()
    code = code_in((await tell(companion, "telegram", TG, "/link")).text)
    reply = await tell(companion, "discord", DC, f"/link {code}", chat="guild-channel-9")
    assert "direct message" in reply.text and reply.delete_inbound
    assert await person_of(stores, "telegram", TG) != await person_of(stores, "discord", DC)
    assert code not in await every_text_in_the_database(stores)


@pytest.mark.engines
async def test_linking_while_a_conversation_is_private_is_refused_by_the_store(make, stores):
    companion = await make()
    await tell(companion, "telegram", TG, "hi")
    code = code_in((await tell(companion, "discord", DC, "/link")).text)
    await tell(companion, "telegram", TG, f"/private {PASSPHRASE}")
    # The command is refused in private mode; from the other side, the store's write refuses it.
    assert "private mode" in (await tell(companion, "telegram", TG, f"/link {code}")).text
    discord_person = await person_of(stores, "discord", DC)
    telegram_account = await engines.first(stores, "SELECT id FROM accounts WHERE platform = 'telegram'")
    (pending,) = await stores.links.pending_link_codes(companion.clock.now())
    from core.values.errors import PrivateWriteRefused

    with pytest.raises(PrivateWriteRefused):
        await stores.links.redeem_link_code(pending.id, telegram_account[0], companion.clock.now())
    assert await person_of(stores, "telegram", TG) != discord_person
    assert len(await stores.links.pending_link_codes(companion.clock.now())) == 1  # the code is still there
    await tell(companion, "telegram", TG, "/normal")
    assert (await tell(companion, "telegram", TG, f"/link {code}")).text.startswith("Linked.")


@pytest.mark.engines
async def test_private_mode_on_telegram_does_not_make_discord_private(make):
    companion = await make()
    await link(companion)
    await tell(companion, "telegram", TG, f"/private {PASSPHRASE}")
    assert "normal mode" in (await tell(companion, "discord", DC, "/mode")).text
    assert "private mode" in (await tell(companion, "telegram", TG, "/mode")).text


@pytest.mark.engines
@pytest.mark.parametrize("link_first", [True, False], ids=["linked-before-the-interval", "linked-after-it"])
async def test_telegram_private_canary_never_reaches_the_model_for_linked_discord_normal_turns(
    make, stores, provider, clock, senders, link_first
):
    """Context, pad, recall, notes (capture), goals, follow-ups and nudges of the Discord account."""
    companion = await make()
    if link_first:
        await link(companion)
    await tell(companion, "discord", DC, "/goal run a 10k in spring")
    await tell(companion, "telegram", TG, "normal words before")
    await tell(companion, "telegram", TG, f"/private {PASSPHRASE}")
    await tell(companion, "telegram", TG, f"my secret is {CANARY}")
    assert CANARY in request_text(provider.last_reply_request())  # it was said, in its own thread
    # What a private fold of that interval keeps: its own summary and a private pad fact.
    telegram_chat = await engines.first(stores, "SELECT id, person_id FROM conversations WHERE platform = 'telegram'")
    segment = await stores.modes.open_segment_of(telegram_chat[0])
    await stores.timeline.save_summary(
        telegram_chat[0],
        Summary(f"they said {CANARY}", 0),
        clock.now(),
        segment_id=segment.id,
        pad_person_id=telegram_chat[1],
        pad_facts=(f"fact: {CANARY}",),
    )
    seen = len(provider.requests)
    # During the Telegram interval, Discord turns are normal and read none of it.
    await tell(companion, "discord", DC, "what did I tell you today?")
    await tell(companion, "telegram", TG, "/normal")
    if not link_first:
        await link(companion)
    for text in ("tell me everything you remember", f"/recall {CANARY}", "/memory", "/goals", "/followups"):
        reply = await tell(companion, "discord", DC, text)
        assert CANARY not in reply.text
    await companion.capture.run_once()
    clock.advance(4 * 86400)  # a goal check-in and an open check-in are due: nudges to Discord
    await companion.proactive.tick()
    await tell(companion, "discord", DC, "anything new?")
    later = provider.requests[seen:]
    assert any(r.purpose == "nudge" for r in later), "no nudge was written"
    assert all(CANARY not in request_text(r) for r in later)
    assert all(CANARY not in text for sender in senders.values() for text in sender.texts())
    assert senders["discord"].texts()  # nudges went where the person last wrote


async def test_unlink_separates_an_account_into_a_new_person_with_no_memory(make, stores, provider):
    companion = await make()
    await link(companion)
    await tell(companion, "telegram", TG, "/remember I live in Skopje")
    reply = await tell(companion, "telegram", TG, "/unlink discord")
    assert reply.text.startswith("Unlinked")
    assert await person_of(stores, "telegram", TG) != await person_of(stores, "discord", DC)
    await tell(companion, "discord", DC, "where do I live?")
    assert "Skopje" not in request_text(provider.last_reply_request())
    await tell(companion, "telegram", TG, "where do I live?")
    assert "Skopje" in request_text(provider.last_reply_request())
    assert "nothing to unlink" in (await tell(companion, "telegram", TG, "/unlink discord")).text


@pytest.mark.engines
async def test_unlinking_while_a_conversation_is_private_is_refused(make, stores):
    companion = await make()
    await link(companion)
    await tell(companion, "discord", DC, f"/private {PASSPHRASE}")
    assert "private mode" in (await tell(companion, "telegram", TG, "/unlink discord")).text
    assert await person_of(stores, "telegram", TG) == await person_of(stores, "discord", DC)


async def test_owner_setting_makes_the_terminal_and_listed_accounts_one_person(make, stores, provider):
    companion = await make(owner_accounts=frozenset({f"telegram:{TG}", f"discord:{DC}"}))
    assert await person_of(stores, "terminal", "owner") == await person_of(stores, "telegram", TG)
    assert await person_of(stores, "terminal", "owner") == await person_of(stores, "discord", DC)
    reply = await companion.handle(
        InboundMessage("terminal", "terminal", "owner", "/remember my cat is Miso", is_direct=True)
    )
    assert reply is not None
    await tell(companion, "discord", DC, "what is my cat called?")
    assert "my cat is Miso" in request_text(provider.last_reply_request())


async def test_with_the_http_service_the_web_user_is_the_owner_linked_to_the_owners_accounts(make, stores):
    companion = await make(owner_accounts=frozenset({f"telegram:{TG}"}), web_owner=True)
    owner = await person_of(stores, "terminal", "owner")
    assert await person_of(stores, "web", "owner") == owner == await person_of(stores, "telegram", TG)
    assert companion.is_allowed(InboundMessage("web", "browser", "owner", "hello", is_direct=True))
    assert not companion.is_allowed(InboundMessage("web", "browser", "someone", "hello", is_direct=True))


async def test_without_the_http_service_the_web_account_is_neither_made_nor_allowed(make, stores):
    companion = await make()
    assert await engines.first(stores, "SELECT id FROM accounts WHERE platform = 'web'") is None
    assert not companion.is_allowed(InboundMessage("web", "browser", "owner", "hello", is_direct=True))


async def test_mistyped_link_with_a_code_is_not_kept(make, stores, provider):
    companion = await make()
    reply = await tell(companion, "discord", DC, "/lnik 12345678")
    assert reply.delete_inbound
    assert "12345678" not in await every_text_in_the_database(stores)
    assert all("12345678" not in request_text(r) for r in provider.requests)


@pytest.mark.engines
async def test_a_private_pad_fact_of_telegram_is_not_read_by_discord_private_mode(make, stores, provider, clock):
    companion = await make()
    await link(companion)
    await tell(companion, "telegram", TG, f"/private {PASSPHRASE}")
    await tell(companion, "telegram", TG, "something private")
    telegram_chat = await engines.first(stores, "SELECT id, person_id FROM conversations WHERE platform = 'telegram'")
    segment = await stores.modes.open_segment_of(telegram_chat[0])
    await stores.timeline.save_summary(
        telegram_chat[0],
        Summary("private summary", 0),
        clock.now(),
        segment_id=segment.id,
        pad_person_id=telegram_chat[1],
        pad_facts=(f"fact: {CANARY}",),
    )
    await tell(companion, "telegram", TG, "and more")
    assert CANARY in request_text(provider.last_reply_request())  # its own conversation's private mode reads it
    await tell(companion, "discord", DC, f"/private {PASSPHRASE}")
    await tell(companion, "discord", DC, "private on discord")
    assert CANARY not in request_text(provider.last_reply_request())


async def test_memory_says_which_linked_accounts_share_it_and_forget_works_across_them(make, stores):
    companion = await make()
    await link(companion)
    await tell(companion, "discord", DC, "/remember I play the cello")
    shown = (await tell(companion, "telegram", TG, "/memory")).text
    assert "I play the cello" in shown and f"Telegram {TG}" in shown and f"Discord {DC}" in shown
    await tell(companion, "telegram", TG, "/forget cello")
    assert await stores.timeline.normal_pad(await person_of(stores, "discord", DC)) == []
