"""Edits (issue 15): an edit replaces the stored text in its own mode and segment, and the recall
index with it; only the newest message, answered under two minutes ago, is answered again."""

from __future__ import annotations

import itertools

import pytest

from core.values import copy
from core.values.model import InboundMessage
from tests.conftest import PASSPHRASE
from tests.helpers import engines
from tests.helpers.chat import all_rows, conversation_of
from tests.helpers.fakes import request_text

pytestmark = pytest.mark.engines

USER = "100"
CANARY = "EDIT-CANARY-93be"
_ids = itertools.count(1)


@pytest.fixture
async def companion(make_companion):
    return await make_companion(allowed_accounts=frozenset({f"telegram:{USER}"}))


async def tell(companion, text: str, *, mid: str | None = None, edited: bool = False):
    mid = mid or f"e{next(_ids)}"
    reply = await companion.handle(InboundMessage("telegram", USER, USER, text, True, message_id=mid, edited=edited))
    return reply, mid


async def text_of(stores, mid: str) -> list[tuple]:
    found = await all_rows(stores, "SELECT text, mode, segment_id FROM messages WHERE platform_message_id = ?", (mid,))
    return [(engines.opened(stores, seg, "messages.text", text), mode, seg is not None) for text, mode, seg in found]


async def recall(companion, stores, word: str) -> list[str]:
    conversation = await conversation_of(companion, "telegram", USER)
    return [hit.text for hit in await stores.memory.recall(conversation.person_id, (word,))]


async def test_an_edit_of_the_newest_answered_message_is_answered_as_a_correction(companion, provider, stores):
    _, mid = await tell(companion, "meet me at the statoin")
    reply, _ = await tell(companion, "meet me at the station", mid=mid, edited=True)
    assert reply is not None and reply.text
    request = provider.last_reply_request()
    assert request.messages[-1].content == copy.EDIT_CORRECTION
    users = [m.content for m in request.messages if m.role == "user"]
    assert users == ["meet me at the station"]  # the stored message itself changed: one row
    assert await text_of(stores, mid) == [("meet me at the station", "normal", 0)]
    assert await recall(companion, stores, "station") == ["meet me at the station"]
    assert await recall(companion, stores, "statoin") == []


async def test_an_edit_after_two_minutes_or_of_an_older_message_updates_the_text_and_sends_nothing(
    companion, provider, stores, clock
):
    _, first = await tell(companion, "first wording")
    _, second = await tell(companion, "second wording")
    calls = len(provider.requests)
    reply, _ = await tell(companion, "first, edited", mid=first, edited=True)
    assert reply is None and len(provider.requests) == calls
    assert await text_of(stores, first) == [("first, edited", "normal", 0)]
    clock.advance(121)
    reply, _ = await tell(companion, "second, edited late", mid=second, edited=True)
    assert reply is None and len(provider.requests) == calls
    assert await text_of(stores, second) == [("second, edited late", "normal", 0)]


async def test_an_edit_made_in_normal_mode_of_a_private_message_is_dropped_and_sends_nothing(
    companion, provider, stores
):
    await tell(companion, f"/private {PASSPHRASE} 1h")
    _, mid = await tell(companion, "private first wording")
    await tell(companion, "/normal")
    calls = len(provider.requests)
    reply, _ = await tell(companion, f"private edited {CANARY}", mid=mid, edited=True)
    assert reply is None and len(provider.requests) == calls
    # Words typed in normal mode never go into an interval's row: the private row is unchanged.
    assert await text_of(stores, mid) == [("private first wording", "private", 1)]
    assert await engines.ids_saying(stores, "messages", f"%{CANARY}%", like=True) == []
    assert await recall(companion, stores, CANARY.split("-")[0]) == []
    # Not in the index at all, not merely filtered out by recall's own predicates.
    assert await engines.recall_entries(stores, f"%{CANARY}%") == []
    await tell(companion, "back in normal")
    assert CANARY not in request_text(provider.last_reply_request())


async def test_an_edit_of_a_message_whose_interval_expired_is_dropped_and_never_stored_as_normal(
    companion, provider, stores, clock
):
    await tell(companion, f"/private {PASSPHRASE} 1h")
    _, mid = await tell(companion, "private words")
    clock.advance(2 * 3600)  # expired; the sweep has not run yet, so its rows are still there
    reply, _ = await tell(companion, f"edited {CANARY}", mid=mid, edited=True)
    assert reply is None
    assert await engines.ids_saying(stores, "messages", f"%{CANARY}%", like=True) == []
    await companion.sweep()
    reply, _ = await tell(companion, f"edited again {CANARY}", mid=mid, edited=True)
    assert reply is None
    assert await engines.ids_saying(stores, "messages", f"%{CANARY}%", like=True) == []


async def test_an_edit_into_a_passphrase_is_not_kept_and_the_message_is_deleted(companion, provider, stores):
    _, mid = await tell(companion, "harmless")
    reply, _ = await tell(companion, f"/private {PASSPHRASE}", mid=mid, edited=True)
    assert reply is not None and reply.delete_inbound and reply.text == copy.EDIT_NOT_KEPT
    assert await text_of(stores, mid) == [("harmless", "normal", 0)]
    assert await all_rows(stores, "SELECT count(*) FROM segments") == [(0,)]  # an edit never runs a command


async def test_an_edit_of_a_message_never_stored_stores_nothing(companion, provider, stores):
    reply, _ = await tell(companion, "never seen before", mid="nowhere", edited=True)
    assert reply is None
    assert await all_rows(stores, "SELECT count(*) FROM messages") == [(0,)]


async def test_an_update_that_leaves_the_words_unchanged_is_not_answered_again(companion, provider, stores):
    # Discord sends MESSAGE_UPDATE for a link preview or a pin too: the words are the same.
    _, mid = await tell(companion, "look: https://example.org")
    calls = len(provider.requests)
    reply, _ = await tell(companion, "look: https://example.org", mid=mid, edited=True)
    assert reply is None and len(provider.requests) == calls


async def test_an_edit_typed_while_private_never_changes_the_normal_row_and_stays_in_its_interval(
    companion, provider, stores
):
    _, mid = await tell(companion, "lunch on Friday")
    await tell(companion, f"/private {PASSPHRASE} 1h")
    reply, _ = await tell(companion, f"lunch with {CANARY}", mid=mid, edited=True)
    assert reply is None
    # The normal row keeps its words; the edit is private input, a row of the open interval.
    assert await text_of(stores, mid) == [("lunch on Friday", "normal", 0)]
    kept = await engines.rows_saying(
        stores, "SELECT mode, segment_id IS NOT NULL FROM messages WHERE {saying}", f"%{CANARY}%", like=True
    )
    assert kept == [("private", 1)]
    await tell(companion, "/normal")
    await tell(companion, "what's on for Friday?")
    assert CANARY not in request_text(provider.last_reply_request())
    assert "lunch on Friday" in request_text(provider.last_reply_request())
    assert await recall(companion, stores, CANARY.split("-")[0]) == []
    assert await engines.recall_entries(stores, f"%{CANARY}%") == []
    reply, _ = await tell(companion, f"/recall {CANARY.split('-')[0]}")
    assert reply is not None and CANARY not in reply.text
    await tell(companion, "/forget private")
    assert await engines.ids_saying(stores, "messages", f"%{CANARY}%", like=True) == []


async def test_an_edit_typed_while_private_of_a_message_of_its_own_interval_changes_it_in_place(
    companion, provider, stores
):
    await tell(companion, f"/private {PASSPHRASE} 1h")
    _, mid = await tell(companion, "private first wording")
    await tell(companion, "something else")  # not the newest any more: no correction is answered
    reply, _ = await tell(companion, f"private second wording {CANARY}", mid=mid, edited=True)
    assert reply is None
    assert await text_of(stores, mid) == [(f"private second wording {CANARY}", "private", 1)]
