"""The wall at the edges (issue 22), written once for every chat app (issue 30): edits, forwards, unknown
commands and pending sends never carry words typed in private mode past their interval. The real
python-telegram-bot Application, discord.py client and web chat with the real core, against the fake
Bot API, Discord (REST and gateway) and model servers on 127.0.0.1.

Each test runs for every platform having what it `needs` (tests/helpers/platforms `HAS`): Telegram
and Discord run all of them. The web chat runs the kinds of event it has (a message, a known, unknown
and mistyped command, a button press); it is not given the others: it has no edit, forward, quote or
upload, a message sent while it is down is refused rather than caught up, its one chat has no chat to
be mirrored to (the kinds test mirrors where the platform has one), and its send is a publish to the
pages open in this process, which cannot fail (so neither test of a pending send is generated for it).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from adapters.storage.backup import backup
from adapters.storage.stores import Stores
from core.values import copy
from tests.conftest import PASSPHRASE
from tests.helpers import engines
from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.platforms import ChatDriver, Origin, PlatformGateway, needs, platform_cases
from tests.helpers.reader import files_holding
from tests.helpers.wall import ShiftedClock, last_delivery, left_of_the_interval, traces

CANARY = "wallcanary4e1b"  # one lowercase word: it can be a command's name, a search term, a caption


@pytest.fixture
def clock() -> ShiftedClock:
    return ShiftedClock()


@pytest.fixture
async def gateway(
    platform: ChatDriver, model: FakeOpenAIServer, stores: Stores, clock: ShiftedClock, passphrase_hash: str
) -> AsyncIterator[PlatformGateway]:
    gateway = PlatformGateway(platform, model, stores, clock, passphrase_hash)
    yield gateway
    await gateway.stop()


def last_user_text(model: FakeOpenAIServer) -> str:
    return [m["content"] for m in model.requests[-1]["messages"] if m["role"] == "user"][-1]


# --- 1. an edit typed while private ----------------------------------------------------------------


@needs("edit")
async def test_an_edit_typed_while_private_never_reaches_the_normal_request_row_recall_or_a_recall_answer(
    gateway: PlatformGateway, platform: ChatDriver, model: FakeOpenAIServer, stores: Stores
) -> None:
    await gateway.start()
    first = await platform.say("lunch on Friday with Ana")
    await platform.say(f"/private {PASSPHRASE}")
    await platform.edit(first, f"lunch on Friday with {CANARY}")
    await platform.say("/normal")  # one chat's updates run in order: the edit was handled before it
    await platform.say("who is lunch with on Friday?")
    assert CANARY not in model.raw_requests[-1].decode()
    assert "lunch on Friday with Ana" in model.raw_requests[-1].decode()
    await platform.say("/recall Friday")
    assert "Ana" in platform.shown()[-1] and CANARY not in platform.shown()[-1]
    found = await traces(stores, CANARY)
    assert found.normal_rows == [] and found.recall == []


@needs("edit")
async def test_an_edit_made_after_a_restart_is_read_in_the_mode_of_its_own_moment(
    gateway: PlatformGateway, platform: ChatDriver, stores: Stores
) -> None:
    await gateway.start()
    first = await platform.say("lunch on Friday")
    await platform.say(f"/private {PASSPHRASE}")
    await gateway.stop()
    await gateway.start()  # the restart closes the interval; the message it edits is older still
    await asyncio.sleep(platform.date_step)  # past the restart's margin, as the platform dates an edit
    await platform.edit(first, "lunch on Saturday")  # made now, in normal mode
    await platform.say("/mode")
    rows = await engines.rows(stores, "SELECT text FROM messages WHERE platform_message_id = ?", (first,))
    assert [r[0] for r in rows] == ["lunch on Saturday"]


# --- 2. an unknown command typed while private, its answer pending ---------------------------------


async def pending_for(stores: Stores, needle: str) -> list[tuple]:
    rows = await engines.rows(stores, "SELECT segment_id, status FROM deliveries WHERE text LIKE ?", (f"%{needle}%",))
    return [tuple(r) for r in rows]


async def rows_appear(stores: Stores, sql: str, *params: object) -> None:
    for _ in range(500):
        if await engines.rows(stores, sql, params):
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"no row for: {sql}")


TRIED_ONCE = "SELECT 1 FROM deliveries WHERE status = 'pending' AND attempts = 1"  # every try of the adapter failed


@needs("send_fault")
@pytest.mark.parametrize("ending", ["forget private", "expiry"])
async def test_an_unknown_commands_pending_answer_typed_while_private_goes_with_its_interval(
    gateway: PlatformGateway,
    platform: ChatDriver,
    stores: Stores,
    clock: ShiftedClock,
    tmp_path,
    ending: str,
) -> None:
    companion = await gateway.start()
    await platform.say(f"/private {PASSPHRASE} 1h")
    platform.fail_sends()  # every one of the adapter's own tries
    await platform.post(f"/diary_{CANARY} the day was long")
    await rows_appear(stores, TRIED_ONCE)
    (segment,) = [r[0] for r in await engines.rows(stores, "SELECT id FROM segments WHERE ended_at IS NULL")]
    assert await pending_for(stores, CANARY) == [(segment, "pending")]  # the answer is the interval's own
    # A backup taken now holds no private row, so not this one either.
    assert (
        files_holding(
            [backup(engines.sqlite_file(stores), tmp_path / "backups", retention_days=14).path], CANARY.encode()
        )
        == []
    )
    if ending == "forget private":
        platform.fail_sends()  # the platform is still down
        await platform.post("/forget private")
        await rows_appear(stores, "SELECT 1 FROM deliveries WHERE text LIKE 'Private mode is off%' AND attempts = 1")
    else:
        clock.advance(3601)
        await companion.sweep()
    assert not (await traces(stores, CANARY)).anywhere
    assert await engines.rows(stores, "SELECT id FROM deliveries WHERE segment_id IS NOT NULL") == []
    files = [
        p
        for p in (
            engines.sqlite_file(stores),
            engines.sqlite_file(stores).with_name(engines.sqlite_file(stores).name + "-wal"),
        )
        if p.exists()
    ]
    assert files_holding(files, CANARY.encode()) == []
    clock.advance(60)  # the platform is back: what is still pending goes out, and none of it is the canary
    await companion.outbox.dispatch_due()
    assert all(CANARY not in text for text in platform.sent())


# --- 4. a private answer left pending past its interval's expiry -----------------------------------


@needs("send_fault")
async def test_a_private_answer_left_pending_is_never_sent_after_its_interval_expired(
    gateway: PlatformGateway, platform: ChatDriver, model: FakeOpenAIServer, stores: Stores, clock: ShiftedClock
) -> None:
    companion = await gateway.start()
    await platform.say(f"/private {PASSPHRASE} 1m")
    sends = platform.send_calls()
    platform.fail_sends()  # every one of the adapter's own tries
    model.reply_text(f"Between us: {CANARY}.")
    await platform.post("how am I doing, really?")
    await rows_appear(stores, TRIED_ONCE)
    (conversation, delivery) = tuple(
        (await engines.rows(stores, "SELECT conversation_id, id FROM deliveries WHERE status = 'pending'"))[0]
    )
    clock.advance(61)  # the interval expired a moment ago; the minute's sweep has not run yet
    await companion.outbox.dispatch_due()  # the scheduler's dispatch, the platform back up
    await companion.outbox.deliver(conversation, delivery)  # and the lane sent directly
    assert all(CANARY not in text for text in platform.sent())
    assert platform.send_calls() == sends + platform.send_tries  # not even tried again
    await companion.sweep()
    assert not (await traces(stores, CANARY)).anywhere


# --- 3. a mirror is never told a private interval existed ------------------------------------------


@needs("mirror", "quote", "forward")
async def test_a_mirror_gets_only_the_words_typed_in_normal_mode_never_a_quote_of_a_private_message(
    gateway: PlatformGateway, platform: ChatDriver, model: FakeOpenAIServer, stores: Stores
) -> None:
    await gateway.start()
    await platform.say(f"/mirror {platform.mirror_chat}")
    assert platform.shown()[-1].startswith("Mirror 1 is on")
    model.reply_text("Porto it is.")
    normal_id = await platform.say("let's go to Porto")
    await platform.say(f"/private {PASSPHRASE}")
    private_id = await platform.say(f"my secret is {CANARY}")
    await platform.say("/normal")
    model.reply_text("I can't see that one.")
    await platform.say("what did I say here?", reply_to=private_id, quote=CANARY)
    model.reply_text("Because of the bridges.")
    await platform.say("why Porto?", reply_to=normal_id)
    # The model read the placeholder for the private quote; the mirror reads the words typed.
    assert copy.QUOTE_LINE.format(text=copy.PLACEHOLDER) in model.raw_requests[-2].decode()
    model.reply_text("I won't read that here.")
    await platform.say(f"my secret is {CANARY}", forward=Origin("person", private_id))
    assert platform.shown()[-1].startswith(copy.FORWARD_NOT_READ)  # told in the DM only
    await platform.wait_until(lambda: len(platform.shown("mirror")) >= 5, "the copies")
    source = f"{platform.name} DM"
    assert platform.shown("mirror") == [
        copy.MIRROR_HELLO.format(source=source),
        f"[{source}] you: let's go to Porto\ncompanion: Porto it is.",
        f"[{source}] you: what did I say here?\ncompanion: I can't see that one.",
        f"[{source}] you: why Porto?\ncompanion: Because of the bridges.",
        f"[{source}] you: {copy.FORWARD_UNREAD_SAID}\ncompanion: I won't read that here.",
    ]
    assert not (await traces(stores, CANARY)).mirrors


# --- 5. a forward of a private message -------------------------------------------------------------


@needs("forward", "quote")
async def test_a_forward_of_a_private_message_is_the_placeholder_in_normal_mode_and_the_person_is_told_once(
    gateway: PlatformGateway, platform: ChatDriver, model: FakeOpenAIServer, stores: Stores
) -> None:
    await gateway.start()
    await platform.say(f"/private {PASSPHRASE}")
    private_id = await platform.say(f"my secret is {CANARY}")
    answer = platform.shown()[-1]  # the companion's private answer
    await platform.say("/normal")
    names = platform.forward_names
    await platform.say(f"my secret is {CANARY}", forward=Origin("person", private_id))
    first = platform.shown()[-1]
    assert CANARY not in model.raw_requests[-1].decode()
    assert last_user_text(model) == f"{copy.FORWARD_LINE.format(name=names['person'])}\n{copy.PLACEHOLDER}"
    assert first.startswith(copy.FORWARD_NOT_READ)
    await platform.say(f"my secret is {CANARY}", forward=Origin("person", private_id))  # told once
    assert not platform.shown()[-1].startswith(copy.FORWARD_NOT_READ)
    # The companion's own private answer, forwarded: the same, and the person is not told again.
    await platform.say(answer, forward=Origin("companion", private_id))
    assert last_user_text(model) == f"{copy.FORWARD_LINE.format(name=names['companion'])}\n{copy.PLACEHOLDER}"
    assert not platform.shown()[-1].startswith(copy.FORWARD_NOT_READ)
    # Someone else's message (sent at that moment, where the platform dates it) is no private interval's: it is read.
    await platform.say("the meeting moved to Friday", forward=Origin("someone", private_id))
    assert last_user_text(model) == f"(forwarded from {names['someone']})\nthe meeting moved to Friday"
    # The same message quoted gets the placeholder, as before.
    await platform.say("and this?", reply_to=private_id)
    assert CANARY not in model.raw_requests[-1].decode()
    found = await traces(stores, CANARY)
    assert found.normal_rows == [] and found.recall == []


# --- every kind of inbound event: a canary typed while private leaves no trace ---------------------

KINDS: dict[str, str | None] = {  # each kind, and what of a platform it needs
    "message": None,
    "edit": "edit",
    "forward": "forward",
    "quote": "quote",
    "media": "media",
    "known command": None,
    "unknown command": None,
    "mistyped command": None,
    "button press": "button",
    "caught-up message": "catch_up",
    "caught-up command": "catch_up",
}


async def type_while_private(kind: str, gateway: PlatformGateway, platform: ChatDriver, first: str) -> None:
    """Do `kind` of event, carrying the canary, while the conversation is private."""
    if kind == "message":
        await platform.say(f"note this: {CANARY}")
    elif kind == "edit":
        await platform.edit(first, f"lunch on Friday with {CANARY}")
    elif kind == "forward":
        await platform.say(f"Bob says {CANARY}", forward=Origin("someone"))
    elif kind == "quote":
        await platform.say(f"about {CANARY}", reply_to=first, quote="lunch on Friday")
    elif kind == "media":
        await platform.send_photo(f"a photo of {CANARY}")
    elif kind == "known command":
        await platform.say(f"/remember {CANARY}")
    elif kind == "unknown command":
        await platform.say(f"/diary_{CANARY} today")
    elif kind == "mistyped command":
        await platform.say(f"/privte {CANARY}")
    elif kind == "button press":
        await platform.say(f"note this: {CANARY}")
        await platform.say("/export")
        await platform.press("/export confirm")
    elif kind in ("caught-up message", "caught-up command"):
        await gateway.stop()
        if kind == "caught-up command":
            platform.post_while_down(f"/remember {CANARY}")
        else:
            platform.post_while_down(f"sent while you were down: {CANARY}")
        await gateway.start(allow_private_export=True)  # the restart closes the interval it belongs to
        await platform.wait_until(lambda: copy.RESTART_KEPT_PRIVATE in platform.shown(), "the kept answer")
        await asyncio.sleep(platform.date_step)  # what follows is after the restart, in the platform's dates
    else:
        raise AssertionError(kind)


@pytest.mark.parametrize(("platform", "kind"), platform_cases(KINDS), indirect=["platform"])
async def test_a_canary_typed_while_private_in_any_kind_of_event_leaves_no_trace_in_normal_mode(
    gateway: PlatformGateway, platform: ChatDriver, model: FakeOpenAIServer, stores: Stores, kind: str
) -> None:
    await gateway.start(allow_private_export=True)
    if platform.mirror_chat is not None:  # mirrored where the platform has another chat
        await platform.say(f"/mirror {platform.mirror_chat}")
    first = await platform.say("lunch on Friday with Ana")
    before_private = await last_delivery(stores)
    await platform.say(f"/private {PASSPHRASE} 1h")
    await type_while_private(kind, gateway, platform, first)
    while_private = await last_delivery(stores)
    await platform.say("/normal")
    model.reply_text("Noted.")
    await platform.say("what's new?")
    assert platform.shown()[-1] == "Noted."
    # The next normal request, the normal rows, the recall index: no canary.
    assert CANARY not in model.raw_requests[-1].decode()
    assert "lunch on Friday with Ana" in model.raw_requests[-1].decode()
    found = await traces(stores, CANARY)
    assert found.normal_rows == [] and found.recall == []
    await platform.say("/forget private")
    if platform.mirror_chat is not None:
        await platform.wait_until(lambda: len(platform.shown("mirror")) >= 3, "the copies")  # hello, two exchanges
    await gateway.companion.outbox.settle(10)
    # Every mirror body, and every delivery row: none holds it, and none written while private is left.
    assert all(CANARY not in text for text in platform.shown("mirror"))
    assert not (await traces(stores, CANARY)).anywhere
    restarted = kind.startswith("caught-up")
    assert await left_of_the_interval(stores, before_private, while_private, restarted=restarted) == []
