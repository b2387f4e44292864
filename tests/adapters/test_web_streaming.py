"""Replies shown in the web chat while the model writes them (issue 24, point 5): the real core, store,
outbox and web chat behind a real WebService on 127.0.0.1, the real model client against the fake model
server streaming one word every `token_seconds`, and GET /events read as a browser reads it.

A streamed answer is one bubble: `partial` frames carry its id and the text so far, then the reply's
`live` frame names the same bubble with the final text. A page that connects mid-stream, or again,
ends with the final answer exactly once. Partial text is shown only to the pages open now: stored
nowhere, logged nowhere, mirrored nowhere."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging

import pytest

from adapters.web.chat import CHAT_ID, KEY, PLATFORM, STREAM_LIMIT
from core.delivery.streams import StreamPacing
from core.values import copy
from core.values.errors import DeliveryFailed
from core.values.model import DeliveryTarget, StreamedReply
from tests.conftest import PASSPHRASE
from tests.helpers import engines
from tests.helpers.chat import all_rows
from tests.helpers.fakes import FakeStreamer
from tests.helpers.logs import logging_policy
from tests.helpers.waiting import wait_for
from tests.helpers.web_chat import web_side
from tests.helpers.web_pages import EventStream, site_served

# Quicker than shipped (one edit a second), so that a test sees several edits in a few seconds.
EDIT_SECONDS = 0.25
QUICK = StreamPacing(edit_seconds=EDIT_SECONDS, first_seconds=0.1)
TOKEN_SECONDS = 0.04  # the fake model: one word every 40 ms (25 tokens a second)
ANSWER = "Here is **the plan** for `Sunday`: " + " ".join(f"step{n}" for n in range(60)) + "."
CANARY = "WEB-STREAM-PRIVATE-CANARY"


def on_disk(stores) -> bytes:
    return engines.stored_bytes(stores)


async def streamed_frames(events: EventStream) -> tuple[list[dict], dict]:
    """The partial frames of the next reply, then its final frame."""
    partials = []
    while True:
        kind, data = await events.next()
        if kind == "partial":
            partials.append(data)
        elif kind == "live" and data["kind"] == "reply":
            return partials, data


async def test_a_streamed_answer_reaches_the_page_early_grows_in_one_bubble_and_ends_formatted_in_it(
    stores, provider, server, clock
):
    server.token_seconds = TOKEN_SECONDS
    server.reply_text(ANSWER)
    async with site_served(stores, provider, clock, pacing=QUICK) as site, EventStream(site.client) as events:
        await events.next("history")
        sending = asyncio.create_task(site.send("Plan my Sunday, please."))
        kind, first = await events.next()
        # The first words, while the model is still writing (the turn, and the POST, are not over).
        assert kind == "partial" and not sending.done()
        assert first["text"] and ANSWER.startswith(first["text"]) and first["text"] != ANSWER
        partials, final = await streamed_frames(events)
        assert await sending == {"hide_input": False}
        chat = (await site.client.get("/")).text  # the page as first sent draws it formatted too
        assert "Here is <strong>the plan</strong> for <code>Sunday</code>: step0" in chat

    assert len(partials) >= 2  # edited as it grew ...
    assert {p["stream"] for p in partials} == {first["stream"]}  # ... in one bubble
    texts = [first["text"], *(p["text"] for p in partials)]
    assert all(ANSWER.startswith(text) for text in texts) and texts == sorted(texts, key=len)
    assert "**the plan**" in texts[-1]  # shown as written while it grows
    # The final text names the same bubble, and comes formatted.
    assert final["stream"] == [first["stream"]] and final["text"] == ANSWER
    assert final["format"]["text"].startswith("Here is the plan for Sunday: step0")
    entities = {
        (e["type"], final["format"]["text"][e["offset"] : e["offset"] + e["length"]])
        for e in final["format"]["entities"]
    }
    assert entities == {("bold", "the plan"), ("code", "Sunday")}
    # At most one edit every EDIT_SECONDS (a tolerance for the relay's timing).
    times = [at for at, kind, _ in events.received if kind == "partial"]
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert sum(gaps) >= 0.8 * EDIT_SECONDS * len(gaps)
    # Stored once, as the reply: one delivery, sent, holding no text; the partial words nowhere.
    assert await all_rows(stores, "SELECT kind, status, text, streamed_ids FROM deliveries") == [
        ("reply", "sent", None, first["stream"])
    ]


async def test_a_page_opened_mid_stream_and_one_reconnecting_end_with_the_final_answer_once(
    stores, provider, server, clock
):
    """A page's history is read in its conversation's lane, after the turn running there: a page
    that opens (or a browser that reconnects) mid-stream draws itself once the reply is stored, with
    the reply in its history; the partial and final events published meanwhile are not shown again."""
    server.token_seconds = TOKEN_SECONDS
    server.reply_text(ANSWER)
    async with site_served(stores, provider, clock, pacing=QUICK) as site, contextlib.AsyncExitStack() as stack:
        first = await stack.enter_async_context(EventStream(site.client))
        await first.next("history")
        sending = asyncio.create_task(site.send("Plan my Sunday, please."))
        await first.next("partial")
        await first.__aexit__(None, None, None)  # the browser lost its stream mid-answer ...
        late = EventStream(site.client)  # ... and another page opens now
        again = EventStream(site.client, headers={"Last-Event-ID": "7"})  # ... as the browser reconnects
        assert not sending.done()
        await asyncio.gather(*(stack.enter_async_context(events) for events in (late, again)))
        for events in (late, again):
            _, history = await events.next("history")
            assert [(item["role"], item["text"]) for item in history["items"]] == [
                ("user", "Plan my Sunday, please."),
                ("assistant", ANSWER),
            ]
            assert history["items"][1]["format"]["entities"]  # drawn formatted
        await sending
        await site.web.settled()  # the reply's final send went out meanwhile
        await site.send("/mode")
        for events in (late, again):
            _, data = await events.next("live")  # the next event is the next answer, not the reply again
            assert "normal" in data["text"].lower() and "stream" not in data
            assert [kind for _, kind, _ in events.received] == ["history", "live"]


async def test_a_private_canary_stream_reaches_no_mirror_and_no_database_byte_after_forget_private(
    stores, provider, server, clock, passphrase_hash, caplog
):
    caplog.set_level(logging.DEBUG)
    telegram = FakeStreamer("telegram")  # the web chat's mirror; it shows replies while written too
    private_answer = f"{CANARY} " + " ".join(f"secret{n}" for n in range(40))
    with logging_policy("DEBUG"):
        async with site_served(
            stores,
            provider,
            clock,
            pacing=QUICK,
            passphrase_hash=passphrase_hash,
            platforms=frozenset({PLATFORM, "telegram"}),
        ) as site:
            site.web.outbox.register(telegram)
            site.web.outbox.register_streamer(telegram)
            server.reply_text("a normal answer")
            await site.send("hello")
            conversation = await stores.timeline.conversation_at(KEY)
            await stores.bindings.add_binding(conversation.id, "telegram", "42", clock.now())
            server.reply_text("mirrored, this one")
            await site.send("hello again")
            await site.web.settled()
            assert any("mirrored, this one" in text for _, text, _ in telegram.sent)  # the binding works

            await site.send(f"/private {PASSPHRASE} 1h")
            server.token_seconds = TOKEN_SECONDS
            server.reply_text(private_answer)
            async with EventStream(site.client) as events:
                await events.next("history")
                sending = asyncio.create_task(site.send("tell me a secret"))
                _, shown = await events.next("partial")
                await wait_for(lambda: any("secret3" in d.get("text", "") for _, k, d in events.received))
                assert CANARY in shown["text"] and not sending.done()  # its own private chat shows it ...
                streaming = await all_rows(
                    stores, "SELECT status, text, segment_id FROM deliveries WHERE status = 'streaming'"
                )
                assert [(status, text) for status, text, _ in streaming] == [("streaming", None)]
                assert streaming[0][2] is not None  # ... its row belongs to the interval, and holds no text
                assert b"secret3" not in on_disk(stores)
                await sending
                _, final = await streamed_frames(events)
                assert final["text"] == private_answer
            await site.web.settled()
            await site.send("/forget private")
            await site.web.settled()
            assert CANARY.encode() not in on_disk(stores)

    shown_there = [text for _, text, _ in telegram.sent] + [text for _, text in telegram.posts_shown]
    assert not any(CANARY in text for text in shown_there)  # no mirror, partial or final
    assert telegram.posts_shown == []
    assert CANARY.encode() not in on_disk(stores)
    assert any(r.name.startswith("adapters.web") for r in caplog.records)
    assert not [r for r in caplog.records if CANARY in r.getMessage() or "secret3" in r.getMessage()]


async def test_an_open_page_is_told_at_once_that_private_mode_expired_mid_answer_and_its_bubble_is_withdrawn(
    stores, provider, server, clock, passphrase_hash
):
    """Issue 29: the page learns the end from the server, at the end, while the answer the end cut off
    may still be in its lane: normal mode's history (the interval as its placeholder) to draw in place
    of everything private, and the bubble's constant line; no word of the answer after that."""
    private_answer = f"{CANARY} " + " ".join(f"secret{n}" for n in range(100))
    async with site_served(stores, provider, clock, pacing=QUICK, passphrase_hash=passphrase_hash) as site:
        await site.send(f"/private {PASSPHRASE} 10m")
        await site.web.settled()  # its answer published before the page opens
        clock.advance(600 - 1)  # the expiry a second away on the clock (which stands still meanwhile)
        server.token_seconds = 0.1  # ten seconds of answer
        server.reply_text(private_answer)
        async with EventStream(site.client) as events:
            _, history = await events.next("history")
            assert history["mode"] == "private"
            sending = asyncio.create_task(site.send("tell me a secret"))
            _, shown = await events.next("partial")
            assert CANARY in shown["text"]
            clock.advance(2)  # the interval expires mid-answer
            _, ended = await events.next("history")
            await wait_for(lambda: any(kind == "live" for _, kind, _ in events.received), what="the withdrawn bubble")
            lives = [data for _, kind, data in events.received if kind == "live"]
            assert len(lives) == 1, lives
            [withdrawn] = lives
            assert await sending == {"hide_input": False}
        # Normal mode's view, at once: the interval is its placeholder, no word of it is drawn.
        assert (ended["mode"], ended["segment"]) == ("normal", None)
        assert ended["items"][-1] == {"placeholder": True} and "secret" not in str(ended)
        # The bubble shown while written becomes the constant line.
        assert withdrawn == {"kind": "retraction", "text": copy.INTERVAL_ENDED_SHOWN, "stream": [shown["stream"]]}
        # After the end: no partial frame, no frame holding a word of the answer.
        kinds = [kind for _, kind, _ in events.received]
        last_partial = max(i for i, kind in enumerate(kinds) if kind == "partial")
        ending = min(
            i
            for i, (_, kind, data) in enumerate(events.received)
            if kind == "live" or (kind == "history" and data["mode"] == "normal")
        )
        assert last_partial < ending
        assert all("secret" not in str(data) for _, _, data in events.received[ending:])
        await site.web.companion.sweep()
        await site.web.settled()
        assert await all_rows(
            stores, "SELECT count(*) FROM deliveries WHERE retracts = 1 OR segment_id IS NOT NULL"
        ) == [(0,)]
        assert CANARY.encode() not in on_disk(stores)


# --- the web chat's streamer (core.ports.BaseStreamer) ------------------------------------------------


def test_a_web_reply_streams_into_one_bubble_holding_back_its_last_grapheme_until_final():
    from adapters.web.chat import WebStreamer

    chat = WebStreamer.__new__(WebStreamer)
    flag = "\U0001f1eb\U0001f1f7"  # a flag: two code points, one grapheme cluster
    long = "word " * 30_000
    assert chat.pieces(f"Bonjour {flag}") == ["Bonjour"]
    assert chat.pieces(f"Bonjour {flag}", final=True) == [f"Bonjour {flag}"]
    assert chat.pieces(long, final=True) == [long.strip()]  # one bubble, however long
    assert len(long) < STREAM_LIMIT


@pytest.mark.parametrize("where", ["someone-else", CHAT_ID])
async def test_a_stream_is_shown_only_in_the_owners_running_web_chat(stores, provider, server, clock, where):
    async with web_side(stores, provider, clock) as web, web.chat.open_page() as page:
        reply = StreamedReply(1, 1, DeliveryTarget(PLATFORM, where), "nonce")
        if where != CHAT_ID:
            with pytest.raises(DeliveryFailed) as refused:
                await web.streamer.post(reply, "text", 0)
            assert refused.value.permanent
            assert page.ready() == []
        else:
            bubble = await web.streamer.post(reply, "so far", 0)
            await web.streamer.edit(reply, bubble, "so far, more")
            assert [(e.kind, e.text, e.stream) for e in page.ready()] == [
                ("partial", "so far", (bubble,)),
                ("partial", "so far, more", (bubble,)),
            ]
        assert web.outbox.streams(PLATFORM)
    assert not web.outbox.streams(PLATFORM)  # closed: replies go whole (a pending row) until the next start
    with pytest.raises(DeliveryFailed):
        await web.streamer.edit(reply, "r1-0", "after the close")


async def test_a_reply_is_drawn_formatted_but_never_as_the_models_html(stores, provider, server, clock):
    written = "**Look** <script>alert(1)</script> [here](javascript:alert(2)) and [there](https://example.org/?a=1&b=2)"
    server.reply_text(written)
    async with site_served(stores, provider, clock, pacing=QUICK) as site, EventStream(site.client) as events:
        await events.next("history")
        await site.send("show me")
        _, data = await events.next("live")
        chat = (await site.client.get("/")).text
    assert data["text"] == written  # as written; and how to draw it:
    assert data["format"]["text"] == "Look <script>alert(1)</script> here and there"
    assert [(e["type"], e.get("url")) for e in data["format"]["entities"]] == [
        ("bold", None),
        ("text_link", "https://example.org/?a=1&b=2"),
    ]
    drawn = chat.split('<li class="msg assistant">')[1].split("</li>")[0]
    assert drawn == (
        "<strong>Look</strong> &lt;script&gt;alert(1)&lt;/script&gt; here and "
        '<a href="https://example.org/?a=1&amp;b=2" rel="noopener noreferrer" target="_blank">there</a>'
    )
