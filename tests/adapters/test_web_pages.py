"""The web chat's pages (adapters/web/*_page.py) over a real WebService on 127.0.0.1, with the real
core, store, outbox, web chat and model client (against the fake model server), driven with httpx as
the pages' forms and script drive them. The browser itself: tests/bot/test_web_browser_wire.py."""

from __future__ import annotations

import asyncio
import html
import json
import logging
import re

from adapters.web import stream
from adapters.web.chat import KEY
from core.ports.tools import ServedTool, ServerState
from core.values import copy
from core.values.model import ConversationKey, ProactiveDecision, Summary
from tests.conftest import PASSPHRASE
from tests.helpers import engines
from tests.helpers.chat import all_rows, say
from tests.helpers.fakes import FakeToolServers
from tests.helpers.logs import logging_policy
from tests.helpers.waiting import wait_for
from tests.helpers.web_pages import EventStream, SiteSide, site_served

CANARY = "PAGES-PRIVATE-CANARY"
PAGES = ("/", "/context", "/memory", "/privacy")


async def web_conversation(site: SiteSide):
    conversation = await engines.stores_of(site.web.companion).timeline.conversation_at(KEY)
    assert conversation is not None
    return conversation


async def enter_private_mode(site: SiteSide) -> None:
    """The chat page's form, as its script sends it."""
    answer = await site.post(
        "/private", {"passphrase": PASSPHRASE, "expiry": "2h"}, headers={"Accept": "application/json"}
    )
    assert answer.json() == {"hide_input": True}


async def a_private_interval_with_canaries(site: SiteSide, stores) -> None:
    """Private mode entered from the form, a canary said there, and a private summary and pad fact
    holding it, as a private fold writes them."""
    await enter_private_mode(site)
    await site.send(f"only private mode may read this: {CANARY}")
    conversation = await web_conversation(site)
    segment = await stores.modes.open_segment_of(conversation.id)
    assert segment is not None
    await stores.timeline.save_summary(
        conversation.id,
        Summary(f"they said {CANARY} in the summary", segment.anchor_message_id + 1),
        1.0,
        segment_id=segment.id,
        pad_person_id=conversation.person_id,
        pad_facts=(f"a fact of {CANARY}",),
    )


async def page_text(site: SiteSide, path: str) -> str:
    answer = await site.client.get(path)
    assert answer.status_code == 200, (path, answer.status_code)
    return answer.text


async def flash_of(site: SiteSide, path: str) -> str:
    match = re.search(r'<p class="flash" role="status">(.*?)</p>', await page_text(site, path), re.S)
    assert match is not None, "the page shows no answer"
    return match.group(1)


# --- the chat: live answers, across the two event loops -------------------------------------------


async def test_an_answer_reaches_an_open_page_as_a_server_sent_event_without_a_reload(stores, provider, server, clock):
    server.reply_text("Hello from the model.")
    async with site_served(stores, provider, clock) as site, EventStream(site.client) as events:
        assert events.status == 200
        assert await events.next("history") == ("history", {"mode": "normal", "segment": None, "items": []})
        assert await site.send("Hello!") == {"hide_input": False}
        kind, data = await events.next("live")
        assert (kind, data["kind"], data["text"]) == ("live", "reply", "Hello from the model.")
        # A page drawn now shows both, from the store.
        chat = await page_text(site, "/")
        assert '<li class="msg user">Hello!</li>' in chat and "Hello from the model." in chat


async def test_a_page_whose_browser_left_is_closed_on_the_core_loop(stores, provider, server, clock):
    async with site_served(stores, provider, clock) as site:
        async with EventStream(site.client) as events:
            await events.next("history")
            assert site.web.chat.pages == 1
        # Looked at every stream.LEFT_SECONDS.
        await wait_for(lambda: site.web.chat.pages == 0, what="the page closing on the core loop")


async def test_the_service_stopping_ends_every_event_stream(stores, provider, server, clock):
    async with site_served(stores, provider, clock) as site, EventStream(site.client) as events:
        await events.next("history")
        await site.service.aclose()  # the web chat still runs: the service ends its streams itself
        await events.ended()
        await wait_for(lambda: site.web.chat.pages == 0, what="the page closing on the core loop")


async def test_a_relay_too_far_behind_is_cut_off_rather_than_grow(stores, provider, server, clock):
    async with site_served(stores, provider, clock) as site:
        relay = stream.Relay(site.service.bridge, size=3)
        for _ in range(5):
            relay.put(stream.Refused("an event"))
        relay.put(stream.Refused("after the cut"))
        received = []
        async with asyncio.timeout(10):
            while (item := await asyncio.wrap_future(_on_service_loop(site, relay.get()))) is not None:
                received.append(item)
        assert relay.overflowed and len(received) == 3


def _on_service_loop(site: SiteSide, coroutine):
    loop = site.service.bridge.service_loop
    assert loop is not None
    return asyncio.run_coroutine_threadsafe(coroutine, loop)


# --- private mode: the form, the banner, the wall -------------------------------------------------------


async def test_the_passphrase_form_enters_private_mode_and_the_passphrase_reaches_no_page_row_or_log_line(
    stores, provider, server, clock, passphrase_hash, caplog
):
    caplog.set_level(logging.DEBUG)
    with logging_policy("DEBUG"):
        async with site_served(stores, provider, clock, passphrase_hash=passphrase_hash) as site:
            async with EventStream(site.client) as events:
                await events.next("history")
                await enter_private_mode(site)
                _, answer = await events.next("live")
                _, mode = await events.next("mode")
            assert mode["mode"] == "private" and mode["ends"] and mode["remaining"] > 0
            assert PASSPHRASE not in answer["text"]
            pages = [await page_text(site, path) for path in PAGES]
            chat = pages[0]
            assert '<section class="enter-private" id="enter-private" hidden>' in chat  # hidden: private mode is on
            await site.post("/normal")
            entry = await page_text(site, "/")
    assert 'type="password" name="passphrase" id="passphrase" required autocomplete="off"' in entry
    assert not any(PASSPHRASE in page for page in [*pages, entry])
    assert await all_rows(stores, "SELECT text FROM messages WHERE kind = 'command'") == [
        ("/private [redacted]",),
        ("/normal",),
    ]
    assert PASSPHRASE.encode() not in engines.stored_bytes(stores)
    assert any(r.name.startswith("adapters.web") for r in caplog.records)
    assert not [r for r in caplog.records if PASSPHRASE in r.getMessage()]


async def test_private_mode_puts_its_banner_with_its_end_on_every_page_and_normal_mode_has_none(
    stores, provider, server, clock, passphrase_hash
):
    async with site_served(stores, provider, clock, passphrase_hash=passphrase_hash) as site:
        for path in PAGES:
            assert 'id="private-banner"' not in await page_text(site, path)
        await enter_private_mode(site)
        for path in PAGES:
            page = await page_text(site, path)
            assert 'id="private-banner"' in page and '<body class="private"' in page, path
            assert 'It ends at <time id="private-ends">2027-01-15 08:30 UTC</time>' in page  # idle: 30 minutes
            assert 'action="/normal"' in page


async def test_no_page_but_the_live_private_chat_shows_what_private_mode_holds(
    stores, provider, server, clock, passphrase_hash
):
    async with site_served(stores, provider, clock, passphrase_hash=passphrase_hash) as site:
        await site.send("I like walking by the river.")
        await a_private_interval_with_canaries(site, stores)
        assert CANARY in await page_text(site, "/")  # the live private chat, while it is open
        for path in ("/context", "/memory", "/privacy"):
            assert CANARY not in await page_text(site, path), path
        await site.post("/normal")
        for path in PAGES:
            page = await page_text(site, path)
            assert CANARY not in page, path
        assert '<li class="msg placeholder">' in await page_text(site, "/")


async def test_an_open_chat_page_learns_that_private_mode_ended_and_draws_itself_again(
    stores, provider, server, clock, passphrase_hash
):
    async with site_served(stores, provider, clock, passphrase_hash=passphrase_hash) as site:
        await enter_private_mode(site)
        await site.send(f"private words {CANARY}")
        async with EventStream(site.client) as events:
            _, history = await events.next("history")
            assert history["mode"] == "private" and any(CANARY in i.get("text", "") for i in history["items"])
            await site.post("/normal")
            # Normal mode's view at once, to draw in place of the private one: the placeholder, no word of it.
            _, ended = await events.next("history")
            assert (ended["mode"], ended["segment"]) == ("normal", None)
            assert {"placeholder": True} in ended["items"] and CANARY not in str(ended)
            # And from the privacy page, which sends no message to the chat:
            await enter_private_mode(site)
            await events.next("mode")
            await site.post("/privacy", {"conversation": str((await web_conversation(site)).id)})
            _, ended = await events.next("history")
            assert ended["mode"] == "normal" and CANARY not in str(ended)


async def test_a_mistyped_private_command_sent_from_the_page_is_not_drawn_back(
    stores, provider, server, clock, passphrase_hash
):
    async with site_served(stores, provider, clock, passphrase_hash=passphrase_hash) as site:
        assert await site.send(f"/privte {PASSPHRASE}") == {"hide_input": True}
        assert PASSPHRASE not in await page_text(site, "/")


# --- what normal mode sees ---------------------------------------------------------------------


async def test_the_context_page_is_the_next_request_body_byte_for_byte_with_the_interval_as_one_placeholder(
    stores, provider, server, clock, passphrase_hash
):
    nxt = "What shall we cook tonight?"
    async with site_served(stores, provider, clock, passphrase_hash=passphrase_hash) as site:
        await site.send("I like lentils.")
        await a_private_interval_with_canaries(site, stores)
        await site.post("/normal")
        page = (await site.post("/context", {"next": nxt})).text
        assert CANARY not in page
        match = re.search(
            r'<section class="request"[^>]*data-platform="web">.*?<pre class="request-body"[^>]*>(.*?)</pre>',
            page,
            re.S,
        )
        assert match is not None
        body = html.unescape(match.group(1)).encode()
        assert sum(1 for m in json.loads(body)["messages"] if m["content"] == copy.PLACEHOLDER) == 1
        sent = len(server.raw_requests)
        await site.send(nxt)
        assert server.raw_requests[sent] == body
        assert f"<strong>{len(body):,} bytes</strong>" in page


async def test_the_context_page_lists_the_served_tools_offered_with_their_servers_and_the_servers_down(
    stores, provider, server, clock
):
    schema = {"type": "object", "properties": {}}
    servers = FakeToolServers(
        [ServedTool("calendar", "list_events", "The person's events.", schema, private_allowed=False)],
        [ServerState("calendar", "stdio", True, "", 1), ServerState("home", "http", False, "starting", 0)],
    )
    async with site_served(stores, provider, clock, servers=servers) as site:
        await site.send("Hello!")
        page = await page_text(site, "/context")
    assert '<code>list_events</code>: The person&#x27;s events. <span class="muted">(served by calendar)</span>' in page
    assert "not reachable now, so none of their tools: home" in page
    body = re.search(r'<pre class="request-body"[^>]*>(.*?)</pre>', page, re.S)
    assert body is not None and "list_events" in {
        t["function"]["name"] for t in json.loads(html.unescape(body.group(1)))["tools"]
    }


async def test_a_memory_removed_on_the_page_is_gone_from_the_next_request(stores, provider, server, clock):
    fact = "has a sister called Ana"
    async with site_served(stores, provider, clock) as site:
        await site.send(f"/remember {fact}")
        (entry,) = await all_rows(stores, "SELECT id FROM pad_entries WHERE text = ?", (fact,))
        assert fact in await page_text(site, "/memory")
        assert fact in await page_text(site, "/context")
        await site.post("/memory", {"do": "forget-memory", "id": str(entry[0])})
        assert await flash_of(site, "/memory") == f"Forgot memory #{entry[0]}."
        assert fact not in await page_text(site, "/memory")
        sent = len(server.raw_requests)
        await site.send("Who is in my family?")
        assert fact.encode() not in server.raw_requests[sent]


# --- memory and settings: the same commands, the same rules ----------------------------------------------


async def test_page_changes_are_refused_in_private_mode_as_the_typed_commands_are(
    stores, provider, server, clock, passphrase_hash
):
    async with site_served(stores, provider, clock, passphrase_hash=passphrase_hash) as site:
        await site.send("/remember likes tea")
        await site.send("/goal run a 10k")
        (entry,) = await all_rows(stores, "SELECT id FROM pad_entries")
        (goal,) = await all_rows(stores, "SELECT id FROM goals")
        await enter_private_mode(site)
        for change in (
            {"do": "forget-memory", "id": str(entry[0])},
            {"do": "goal-done", "id": str(goal[0])},
            {"do": "nudges", "value": "off"},
            {"do": "quiet", "value": "21:00-07:00"},
        ):
            answer = await site.post("/memory", change, headers={"Accept": "application/json"})
            assert "not available here" in answer.json()["answer"], change
        assert await all_rows(stores, "SELECT text FROM pad_entries") == [("likes tea",)]
        assert await all_rows(stores, "SELECT status FROM goals") == [("active",)]
        assert await all_rows(stores, "SELECT budget, quiet FROM proactive_people") == [(None, None)]


async def test_each_thing_on_the_memory_page_changes_with_one_click_through_its_command(
    stores, provider, server, clock
):
    async with site_served(stores, provider, clock) as site:
        await site.send("/goal learn the cello")
        await site.send("/followup 2h call the plumber")
        await site.send("/watch the concert on Friday")
        (goal,) = await all_rows(stores, "SELECT id FROM goals")
        reminder, watch = await all_rows(stores, "SELECT id FROM followups ORDER BY id")
        changes = [
            ({"do": "goal-drop", "id": str(goal[0])}, f"Goal #{goal[0]} updated."),
            ({"do": "followup-pause", "id": str(reminder[0])}, f"Follow-up #{reminder[0]} paused."),
            ({"do": "followup-cancel", "id": str(watch[0])}, f"Follow-up #{watch[0]} cancelled."),
            ({"do": "nudges", "value": "3"}, "Nudges: at most 3 a day"),
            ({"do": "quiet", "value": "21:30-07:00"}, "Quiet hours: 21:30-07:00"),
            ({"do": "cooldown", "value": "6h"}, "Cooldown: at least 6 hours between two"),
            ({"do": "timezone", "value": "Europe/Berlin"}, "Time zone: Europe/Berlin"),
            ({"do": "nudges", "value": "off; /forget 1"}, "not one I understand"),
            ({"do": "drop-table", "id": "1"}, "not something this page can do"),
        ]
        for change, said in changes:
            await site.post("/memory", change)
            assert said in await flash_of(site, "/memory"), change
        assert await all_rows(stores, "SELECT status FROM goals") == [("dropped",)]
        assert await all_rows(stores, "SELECT status FROM followups ORDER BY id") == [("paused",), ("cancelled",)]
        assert await all_rows(stores, "SELECT budget, quiet, timezone, cooldown FROM proactive_people") == [
            (3, "21:30-07:00", "Europe/Berlin", 6 * 3600.0)
        ]
        assert "Europe/Berlin" in await page_text(site, "/memory")


async def test_a_daily_note_forgotten_on_the_page_leaves_the_notes_and_recall(stores, provider, server, clock):
    async with site_served(stores, provider, clock) as site:
        await site.send("hello")
        conversation = await web_conversation(site)
        note = await stores.memory.save_capture(
            conversation.person_id, "2027-01-15", "Talked about the harbour.", (), [], 1.0
        )
        assert "Talked about the harbour." in await page_text(site, "/memory")
        assert await stores.memory.recall(conversation.person_id, ("harbour",))
        await site.post("/memory", {"do": "forget-note", "id": str(note)})
        assert await flash_of(site, "/memory") == f"Forgot note #{note}."
        assert await stores.memory.notes(conversation.person_id) == []
        assert await stores.memory.recall(conversation.person_id, ("harbour",)) == []


async def test_the_memory_page_lists_decisions_by_kind_and_reason_and_none_of_private_mode(
    stores, provider, server, clock, passphrase_hash
):
    async with site_served(stores, provider, clock, passphrase_hash=passphrase_hash) as site:
        await site.send("hello")
        conversation = await web_conversation(site)
        person = conversation.person_id
        await stores.proactive.record_decision(
            ProactiveDecision(person, "goal", "goal:7", "skipped", "quiet", "2027-01-15", 2.0)
        )
        await enter_private_mode(site)
        segment = await stores.modes.open_segment_of(conversation.id)
        await stores.proactive.record_decision(
            ProactiveDecision(person, "reminder", "followup:9", "skipped", "private", "2027-01-15", 3.0, segment.id)
        )
        assert [d.reason for d in await stores.proactive.latest_decisions(person)] == ["quiet"]
        page = await page_text(site, "/memory")
        assert "quiet hours" in page and "private" not in page.split('id="decisions"')[1]


async def test_a_mirror_is_removed_from_the_page_in_the_conversation_it_belongs_to(stores, provider, server, clock):
    async with site_served(stores, provider, clock) as site:
        await say(site.web.companion, "hello from the terminal")
        terminal = await stores.timeline.conversation_at(ConversationKey("terminal", "terminal"))
        binding = await stores.bindings.add_binding(terminal.id, "web", "owner", clock.now())
        assert "web:owner" in await page_text(site, "/memory")
        await site.post("/memory", {"do": "unmirror", "id": str(binding.id)})  # not the web chat's: nothing there
        assert "There is no mirror" in await flash_of(site, "/memory")
        await site.post("/memory", {"do": "unmirror", "id": str(binding.id), "conversation": str(terminal.id)})
        assert "is removed" in await flash_of(site, "/memory")
        assert await stores.bindings.bindings_of(terminal.id) == []


async def test_a_page_cannot_act_in_a_conversation_that_is_not_the_owners(stores, provider, server, clock):
    async with site_served(stores, provider, clock) as site:
        await site.send("hello")
        stranger = await stores.timeline.ensure_account("telegram", "999", None, clock.now())
        theirs = await stores.timeline.ensure_conversation(
            ConversationKey("telegram", "999"), "direct", stranger.person_id, 1.0
        )
        await stores.bindings.add_binding(theirs.id, "web", "owner", clock.now())
        await site.post("/privacy", {"conversation": str(theirs.id)})
        assert "not yours" in await flash_of(site, "/privacy")
        await site.post("/memory", {"do": "unmirror", "id": "1", "conversation": str(theirs.id)})
        assert "not yours" in await flash_of(site, "/memory")
        assert len(await stores.bindings.bindings_of(theirs.id)) == 1


# --- the privacy page -----------------------------------------------------------------------------


async def test_the_privacy_page_lists_intervals_by_their_times_alone_and_ends_them_in_their_own_conversation(
    stores, provider, server, clock, passphrase_hash
):
    async with site_served(stores, provider, clock, passphrase_hash=passphrase_hash) as site:
        await a_private_interval_with_canaries(site, stores)
        companion = site.web.companion
        await say(companion, f"/private {PASSPHRASE}")
        await say(companion, f"terminal secret {CANARY}")
        await say(companion, "/normal")
        web = await web_conversation(site)
        terminal = await stores.timeline.conversation_at(ConversationKey("terminal", "terminal"))
        page = await page_text(site, "/privacy")
        assert CANARY not in page
        assert f'id="intervals-{web.id}"' in page and f'id="intervals-{terminal.id}"' in page
        assert "open now" in page.split(f'id="intervals-{web.id}"')[1].split("</section>")[0]
        assert "deleted at 2027-01-15 10:00 UTC" in page  # the web interval's 2h expiry
        await site.post("/privacy", {"conversation": str(terminal.id)})
        assert "1 private interval of this conversation was deleted" in await flash_of(site, "/privacy")
        assert await stores.modes.private_intervals(terminal.id, clock.now()) == []
        assert len(await stores.modes.private_intervals(web.id, clock.now())) == 1  # the web chat's stays, private
        assert CANARY.encode() not in b"".join(
            row[0].encode()
            for row in await all_rows(stores, "SELECT text FROM messages WHERE conversation_id = ?", (terminal.id,))
        )


async def test_looking_at_the_privacy_page_never_ends_private_mode(stores, provider, server, clock, passphrase_hash):
    async with site_served(stores, provider, clock, passphrase_hash=passphrase_hash) as site:
        companion = site.web.companion
        await say(companion, "hello")
        await say(companion, f"/private {PASSPHRASE}")
        clock.advance(31 * 60)  # idle past its time: the next turn there ends it, and says so
        assert "open now" in await page_text(site, "/privacy")
        terminal = await stores.timeline.conversation_at(ConversationKey("terminal", "terminal"))
        assert await stores.modes.open_segment_of(terminal.id) is not None
        reply = await say(companion, "back again")
        assert reply is not None and reply.text.startswith("Private mode ended after 30 minutes")


async def test_an_expired_interval_is_on_no_page_even_before_the_sweep(
    stores, provider, server, clock, passphrase_hash
):
    async with site_served(stores, provider, clock, passphrase_hash=passphrase_hash) as site:
        companion = site.web.companion
        await say(companion, f"/private {PASSPHRASE} 30m")
        await say(companion, "/normal")
        assert "intervals-" in await page_text(site, "/privacy")
        clock.advance(31 * 60)
        page = await page_text(site, "/privacy")
        assert "intervals-" not in page and 'id="no-intervals"' in page


# --- what the pages are made of ------------------------------------------------------------------


async def test_pages_load_their_script_and_style_from_the_service_alone(stores, provider, server, clock):
    async with site_served(stores, provider, clock) as site:
        for path in PAGES:
            page = await page_text(site, path)
            sources = re.findall(r'(?:src|href)="([^"]+)"', page)
            assert sources and all(s.startswith("/") for s in sources), sources
        for name, kind in (("app.js", "text/javascript"), ("style.css", "text/css")):
            answer = await site.client.get(f"/static/{name}")
            assert answer.status_code == 200 and answer.headers["content-type"].startswith(kind)
            assert "script-src 'self'" in answer.headers["content-security-policy"]
        assert (await site.client.get("/static/../../bot/settings.py")).status_code == 404
