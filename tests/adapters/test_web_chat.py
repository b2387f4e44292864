"""The web chat's core-facing adapter (adapters/web/chat.py) with the real core, store and outbox,
and the real model client against the fake model server on 127.0.0.1; no HTTP routes yet.

"Delivered" for the web chat means published to the pages open in this process; a page that opens
later draws its history from the store, and never shows a message twice.
"""

from __future__ import annotations

import logging

import pytest

from adapters.web.chat import PLATFORM, USER, TooManyPages, WebChatStopped, web_platform
from bot.bootstrap import transcripts
from core.turn.people import WEB_OWNER as WEB_ACCOUNT
from core.values import copy
from core.values.edge import EdgeSettings
from core.values.errors import DeliveryFailed
from core.values.model import InboundMessage
from tests.conftest import PASSPHRASE
from tests.helpers import engines
from tests.helpers.chat import all_rows
from tests.helpers.logs import logging_policy
from tests.helpers.web_chat import next_event, web_side

CANARY = "WEB-PRIVATE-CANARY"


async def deliveries(stores) -> list[tuple]:
    return await all_rows(stores, "SELECT kind, status, platform, chat_id FROM deliveries ORDER BY id")


async def test_a_reply_is_published_once_to_every_open_page_and_marked_sent(stores, provider, server, clock):
    server.reply_text("Hello to you too.")
    async with web_side(stores, provider, clock) as web, web.chat.open_page() as first, web.chat.open_page() as second:
        sent = await web.chat.send("Hello!")
        for page in (first, second):
            event = await next_event(page)
            assert (event.kind, event.text) == ("reply", "Hello to you too.")
            assert event.message_id is not None
        await web.settled()
        assert first.ready() == [] and second.ready() == []

    assert not sent.hide_input
    assert await deliveries(stores) == [("reply", "sent", "web", "owner")]


async def test_a_reply_while_no_page_is_open_is_marked_sent_and_shown_from_the_history_when_a_page_opens(
    stores, provider, server, clock
):
    server.reply_text("I kept this for you.")
    async with web_side(stores, provider, clock) as web:
        await web.chat.send("Are you there?")
        await web.settled()
        assert await deliveries(stores) == [("reply", "sent", "web", "owner")]

        async with web.chat.open_page() as page:
            shown = [(item.role, item.text) for item in page.transcript.items]
            assert shown == [("user", "Are you there?"), ("assistant", "I kept this for you.")]
            assert page.ready() == []


async def test_a_delivery_published_again_after_a_crash_is_not_shown_twice_by_a_page(stores, provider, server, clock):
    server.reply_text("Only once, please.")
    async with web_side(stores, provider, clock) as web:
        await web.chat.send("hi")
        await web.settled()
        # The process died after the publish and before the mark: the row is pending again.
        await engines.plant(
            stores, "UPDATE deliveries SET status = 'pending', text = 'Only once, please.', settled_at = NULL"
        )

        async with web.chat.open_page() as page:
            assert [item.text for item in page.transcript.items] == ["hi", "Only once, please."]
            await web.outbox.dispatch_due(at_start=True)  # the next start sends what was left
            assert await deliveries(stores) == [("reply", "sent", "web", "owner")]
            await web.chat.send("and now?")
            event = await next_event(page)
            assert event.text != "Only once, please."  # the next live event is the next reply


async def test_a_reminder_to_the_web_chat_is_delivered_exactly_once(stores, provider, server, clock):
    async with web_side(stores, provider, clock) as web:
        await web.chat.send("/followup 30m drink some water")
        await web.settled()
        async with web.chat.open_page() as page:
            page.ready()  # the /followup answer
            clock.advance(31 * 60)
            assert web.companion.proactive is not None
            assert (await web.companion.proactive.tick()).sent == 1
            assert (await web.companion.proactive.tick()).sent == 0
            event = await next_event(page)
            assert (event.kind, event.text) == ("reminder", copy.REMINDER.format(text="drink some water"))
            await web.settled()
            await web.outbox.dispatch_due(at_start=True)
            assert page.ready() == []

    assert [d for d in await deliveries(stores) if d[0] == "reminder"] == [("reminder", "sent", "web", "owner")]


async def test_a_commands_answer_reaches_the_open_pages_and_is_not_in_the_history(stores, provider, server, clock):
    async with web_side(stores, provider, clock) as web:
        async with web.chat.open_page() as page:
            await web.chat.send("/mode")
            event = await next_event(page)
            assert event.kind == "reply" and event.message_id is None and "normal" in event.text.lower()
        async with web.chat.open_page() as later:
            assert later.transcript.items == ()


async def test_private_mode_in_the_web_chat_keeps_no_passphrase_and_its_history_masks_the_interval_after_normal(
    stores, provider, server, clock, passphrase_hash
):
    async with web_side(stores, provider, clock, passphrase_hash=passphrase_hash) as web:
        await web.chat.send("a normal hello")
        entered = await web.chat.send(f"/private {PASSPHRASE}")
        await web.chat.send(f"only for private mode: {CANARY}")
        await web.settled()
        async with web.chat.open_page() as page:
            assert page.transcript.mode == "private"
            assert any(CANARY in (item.text or "") for item in page.transcript.items)

        await web.chat.send("/normal")
        await web.settled()
        async with web.chat.open_page() as page:
            items = page.transcript.items
            assert page.transcript.mode == "normal"
            assert sum(item.is_placeholder for item in items) == 1
            assert not any(CANARY in (item.text or "") for item in items)
            assert "a normal hello" in [item.text for item in items]

    assert entered.hide_input
    texts = [row[0] for row in await all_rows(stores, "SELECT text FROM messages")]
    assert not any(PASSPHRASE in text for text in texts)


async def test_the_web_history_after_private_mode_idled_out_shows_the_interval_as_one_placeholder(
    stores, provider, server, clock, passphrase_hash
):
    async with web_side(stores, provider, clock, passphrase_hash=passphrase_hash) as web:
        await web.chat.send(f"/private {PASSPHRASE}")
        await web.chat.send(f"private words {CANARY}")
        await web.settled()
        clock.advance(31 * 60)  # COMPANION_PRIVATE_IDLE_MINUTES (30) passed without a message

        async with web.chat.open_page() as page:
            assert page.transcript.mode == "normal"
            assert [item.is_placeholder for item in page.transcript.items] == [True]


async def test_the_web_account_is_the_owners_and_no_one_else_may_write_there(stores, provider, server, clock):
    async with web_side(
        stores, provider, clock, platforms=frozenset({"web", "telegram"}), owner_accounts=frozenset({"telegram:111"})
    ) as web:
        await web.chat.send("hello from the web")
        owner = await stores.timeline.ensure_account("terminal", "owner", None, clock.now())
        accounts = {(a.platform, a.platform_user_id) for a in await stores.links.accounts_of(owner.person_id)}
        stranger = await web.companion.handle(InboundMessage("web", "owner", "someone", "hi", is_direct=True))

    assert f"{PLATFORM}:{USER}" == WEB_ACCOUNT
    assert accounts == {("terminal", "owner"), ("web", "owner"), ("telegram", "111")}
    assert stranger is not None and stranger.text == copy.NOT_ALLOWED


async def test_a_message_sent_twice_with_the_same_id_is_answered_once(stores, provider, server, clock):
    async with web_side(stores, provider, clock) as web, web.chat.open_page() as page:
        await web.chat.send("once", message_id="page-1")
        await web.chat.send("once", message_id="page-1")  # the page retried its POST
        await next_event(page)
        await web.settled()
        assert page.ready() == []

    assert len(server.requests) == 1


async def test_an_export_reaches_the_page_as_its_words_then_its_file(stores, provider, server, clock):
    async with web_side(stores, provider, clock) as web:
        await web.chat.send("something to export")
        async with web.chat.open_page() as page:
            await web.chat.send("/export")
            words, file = await next_event(page), await next_event(page)

    assert words.kind == "reply"
    assert file.kind == "file" and file.attachment is not None
    assert b"something to export" in file.attachment.data


async def test_a_confirmation_comes_with_its_reply_as_a_button_whose_command_the_page_sends(
    stores, provider, server, clock, passphrase_hash
):
    async with web_side(stores, provider, clock, passphrase_hash=passphrase_hash, allow_private_export=True) as web:
        await web.chat.send(f"/private {PASSPHRASE}")
        await web.chat.send("a private thought")
        async with web.chat.open_page() as page:
            await web.chat.send("/export")
            question = await next_event(page)
            assert question.confirm is not None and question.confirm.command == "/export confirm"
            await web.chat.send(question.confirm.command)  # the button pressed
            events = [await next_event(page), await next_event(page)]

    assert events[1].kind == "file" and events[1].attachment is not None


async def test_a_page_that_falls_behind_is_closed_and_the_others_keep_every_event(stores, provider, server, clock):
    async with web_side(stores, provider, clock) as web:
        other = web_platform(web.entry, EdgeSettings(), transcripts=transcripts(web.companion).read, page_queue=2)
        chat = other.intake
        await chat.start()
        try:
            async with chat.open_page() as slow, chat.open_page() as quick:
                got = []
                for n in range(3):
                    await other.sender.send_text("owner", f"post {n}")
                    got += quick.ready()
                assert [e.text for e in got] == ["post 0", "post 1", "post 2"]
                assert slow.overflowed and chat.pages == 1
                assert [e.text async for e in slow] == ["post 0", "post 1"]  # then it ends: it reopens
        finally:
            await chat.aclose()


async def test_only_the_owners_chat_exists_on_the_web(stores, provider, server, clock):
    async with web_side(stores, provider, clock) as web:
        with pytest.raises(DeliveryFailed) as refused:
            await web.sender.send_text("someone-else", "a binding's test post")

    assert refused.value.permanent


async def test_pages_are_bounded(stores, provider, server, clock):
    async with web_side(stores, provider, clock) as web:
        other = web_platform(web.entry, EdgeSettings(), transcripts=transcripts(web.companion).read, max_pages=1)
        chat = other.intake
        await chat.start()
        try:
            async with chat.open_page():
                with pytest.raises(TooManyPages):
                    async with chat.open_page():
                        pass
        finally:
            await chat.aclose()


async def test_after_the_stop_no_message_is_taken_every_page_ends_and_a_late_reply_waits_pending(
    stores, provider, server, clock
):
    async with web_side(stores, provider, clock) as web:
        async with web.chat.open_page() as page:
            await web.chat.stop_intake()
            with pytest.raises(WebChatStopped):
                await web.chat.send("too late")
            await web.chat.aclose()
            assert [e async for e in page] == []
        # A reply written after the close (a turn cut off by the stop) waits for the next start.
        reply = await web.companion.handle(InboundMessage("web", "owner", "owner", "still here?", is_direct=True))
        assert reply is not None and reply.delivery_id is not None
        assert not await web.outbox.deliver(reply.conversation_id, reply.delivery_id)

    assert await deliveries(stores) == [("reply", "pending", "web", "owner")]


async def test_no_message_text_reaches_the_logs_even_at_debug(stores, provider, server, clock, caplog, passphrase_hash):
    caplog.set_level(logging.DEBUG)
    server.responder = lambda body: f"you said {body['messages'][-1]['content']}"
    # COMPANION_LOG_LEVEL=DEBUG, as `companion run` applies it
    with logging_policy("DEBUG"):
        async with (
            web_side(stores, provider, clock, passphrase_hash=passphrase_hash) as web,
            web.chat.open_page() as page,
        ):
            await web.chat.send(f"normal {CANARY}")
            await web.chat.send(f"/private {PASSPHRASE}")
            await web.chat.send(f"private {CANARY}")
            await web.settled()
            assert any(CANARY in e.text for e in page.ready())

    assert any(r.name.startswith("adapters.web") for r in caplog.records)
    for record in caplog.records:
        assert CANARY not in record.getMessage() and PASSPHRASE not in record.getMessage()


async def test_a_passphrase_typed_in_the_web_chat_is_dropped_by_the_page_and_the_owner_is_not_asked_to_delete_it(
    stores, provider, server, clock, passphrase_hash
):
    async with web_side(stores, provider, clock, passphrase_hash=passphrase_hash) as web, web.chat.open_page() as page:
        entered = await web.chat.send(f"/private {PASSPHRASE}")
        answer = await next_event(page)

    assert entered.hide_input
    assert copy.DELETE_SECRET_NOTE not in answer.text  # nothing of it is left on a page to delete


async def test_a_message_the_stop_cut_off_is_refused_so_the_page_may_send_it_again(stores, provider, server, clock):
    async with web_side(stores, provider, clock) as web:
        await web.companion.finish_turns(0.1)  # the stop closed the conversations' lanes
        with pytest.raises(WebChatStopped):
            await web.chat.send("cut off by the stop")

    assert await all_rows(stores, "SELECT text FROM messages") == []


async def test_a_mistyped_private_command_is_not_kept_by_the_page(stores, provider, server, clock, passphrase_hash):
    async with web_side(stores, provider, clock, passphrase_hash=passphrase_hash) as web:
        mistyped = await web.chat.send(f"/privte {PASSPHRASE}")

    assert mistyped.hide_input
    assert not any(PASSPHRASE in row[0] for row in await all_rows(stores, "SELECT text FROM messages"))


async def test_the_web_history_after_a_private_interval_expired_holds_nothing_of_it(
    stores, provider, server, clock, passphrase_hash
):
    async with web_side(stores, provider, clock, passphrase_hash=passphrase_hash, private_idle_seconds=None) as web:
        await web.chat.send("before")
        await web.chat.send(f"/private {PASSPHRASE} 1m")
        await web.chat.send(f"private words {CANARY}")
        await web.settled()
        clock.advance(120)  # its expiry passed; no sweep ran yet

        async with web.chat.open_page() as page:
            assert page.transcript.mode == "normal"
            assert not any(CANARY in (item.text or "") for item in page.transcript.items)
