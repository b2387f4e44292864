"""The four walls (seed 000): personas, summaries, pads, segment masking."""

from __future__ import annotations

import pytest

from core.memory.context import ContextBudget, Persona
from core.values import copy
from core.values.model import Summary
from core.values.modes import NORMAL
from tests.conftest import PASSPHRASE
from tests.helpers import engines
from tests.helpers.chat import all_rows, conversation_of, say, segments_of
from tests.helpers.fakes import placeholders, request_text

pytestmark = [pytest.mark.engines, pytest.mark.privacy]


async def interval(companion, *lines: str) -> None:
    await say(companion, f"/private {PASSPHRASE} 7d")
    for line in lines:
        await say(companion, line)
    await say(companion, "/normal")


def users(request) -> list[str]:
    return [m.content for m in request.messages if m.role == "user"]


async def test_normal_history_is_retained_on_both_sides_of_a_private_interval(companion, provider):
    # Seed 000, incident three: masking once deleted the whole prefix.
    await say(companion, "before the interval")
    await interval(companion, "PRIVATE-ONE")
    await say(companion, "after the interval")
    request = provider.last_reply_request()
    assert users(request) == ["before the interval", "after the interval"]
    assert "PRIVATE-ONE" not in request_text(request)


async def test_each_private_interval_becomes_exactly_one_placeholder(companion, provider):
    await say(companion, "hello")
    await interval(companion, "p1", "p2", "p3", "p4")
    await say(companion, "back")
    request = provider.last_reply_request()
    assert placeholders(request) == 1
    texts = [m.content for m in request.messages]
    assert texts.index(copy.PLACEHOLDER) == texts.index("hello") + 2  # after hello and its reply


async def test_an_empty_interval_still_becomes_one_placeholder(companion, provider):
    await say(companion, "hello")
    await interval(companion)
    await say(companion, "back")
    assert placeholders(provider.last_reply_request()) == 1


async def test_multiple_intervals_stay_separate(companion, provider):
    await say(companion, "one")
    await interval(companion, "SECRET-A")
    await say(companion, "two")
    await interval(companion, "SECRET-B")
    await say(companion, "three")
    request = provider.last_reply_request()
    assert placeholders(request) == 2
    sequence = [m.content for m in request.messages if m.content in {"one", "two", "three", copy.PLACEHOLDER}]
    assert sequence == ["one", copy.PLACEHOLDER, "two", copy.PLACEHOLDER, "three"]


async def test_the_placeholder_is_a_constant_never_derived_from_the_interval(companion, provider):
    await interval(companion, "a long and very specific confession about the dentist")
    await say(companion, "x")
    first = [m.content for m in provider.last_reply_request().messages if m.role == "system"][1]
    await interval(companion, "something else entirely")
    await say(companion, "y")
    seconds = [m.content for m in provider.last_reply_request().messages if m.role == "system"][1:]
    assert first == copy.PLACEHOLDER and set(seconds) == {copy.PLACEHOLDER}


async def test_private_mode_sees_its_own_interval_and_the_normal_history(companion, provider):
    await say(companion, "normal before")
    await interval(companion, "OLD-SECRET")
    await say(companion, f"/private {PASSPHRASE}")
    await say(companion, "current secret")
    request = provider.last_reply_request()
    assert users(request) == ["normal before", "current secret"]
    assert "OLD-SECRET" not in request_text(request)  # another segment: a placeholder there too
    assert placeholders(request) == 1


async def test_a_private_summary_never_folds_in_an_earlier_interval(make_companion, provider):
    companion = await make_companion(budget=SMALL)
    await say(companion, "normal before")
    await interval(companion, "EARLIER-INTERVAL-CANARY " + "e" * 60)
    await say(companion, f"/private {PASSPHRASE}")
    entered = len(provider.requests)
    for i in range(12):
        await say(companion, f"current interval {i} " + "c" * 60)
        await fold_all(companion)
    folds = [r for r in provider.requests[entered:] if r.purpose == "summary"]
    assert any("current interval" in request_text(r) for r in folds), "the current interval's summary folded"
    assert all("EARLIER-INTERVAL-CANARY" not in request_text(r) for r in folds)


async def test_every_request_of_a_private_turn_and_of_its_summary_fold_is_marked_private_and_no_other(
    make_companion, provider
):
    # What the provider and the context budget learn from a private request must not shape a normal one:
    # they can keep it apart only if each request says whose it is.
    companion = await make_companion(budget=SMALL)
    for i in range(6):
        await say(companion, f"normal before {i} " + "n" * 60)
        await fold_all(companion)
    await say(companion, f"/private {PASSPHRASE}")
    entered = len(provider.requests)
    for i in range(6):
        await say(companion, f"current interval {i} " + "c" * 60)
        await fold_all(companion)
    left = len(provider.requests)
    await say(companion, "/normal")
    await say(companion, "normal after " + "a" * 60)
    await fold_all(companion)
    inside, outside = provider.requests[entered:left], provider.requests[:entered] + provider.requests[left:]
    assert {r.purpose for r in inside} == {"reply", "summary"} and all(r.private for r in inside)
    assert {"reply", "summary"} <= {r.purpose for r in outside} and not any(r.private for r in outside)


async def test_the_private_persona_exists_only_in_private_prompts(make_companion, provider):
    companion = await make_companion(persona=Persona(private_additions="PRIVATE-PERSONA-MARKER"))
    await say(companion, "normal turn")
    assert "PRIVATE-PERSONA-MARKER" not in request_text(provider.last_reply_request())
    await say(companion, f"/private {PASSPHRASE}")
    await say(companion, "private turn")
    private_request = provider.last_reply_request()
    assert "PRIVATE-PERSONA-MARKER" in request_text(private_request)
    assert copy.PRIVATE_SYSTEM_LINE in request_text(private_request)
    await say(companion, "/normal")
    await say(companion, "normal again")
    assert "PRIVATE-PERSONA-MARKER" not in request_text(provider.last_reply_request())
    assert all("PRIVATE-PERSONA-MARKER" not in request_text(r) for r in provider.requests if r.purpose != "reply")


SMALL = ContextBudget(total_tokens=320, fold_min=2, fold_batch=6)


async def fold_all(companion) -> None:
    await companion.drain()


async def test_summary_watermarks_advance_independently(make_companion, stores):
    companion = await make_companion(budget=SMALL)
    for i in range(12):
        await say(companion, f"normal message {i} " + "n" * 60)
        await fold_all(companion)
    conversation = await conversation_of(companion)
    normal_before = await stores.timeline.normal_summary(conversation.id)
    await say(companion, f"/private {PASSPHRASE}")
    for i in range(12):
        await say(companion, f"private message {i} " + "p" * 60)
        await fold_all(companion)
    (segment,) = await segments_of(stores, conversation.id)
    private = await stores.timeline.private_summary(segment.id)
    normal_after = await stores.timeline.normal_summary(conversation.id)
    assert private is not None and private.watermark > normal_before.watermark
    assert normal_after == normal_before  # private turns never moved the normal watermark
    await say(companion, "/normal")
    for i in range(12):
        await say(companion, f"normal again {i} " + "m" * 60)
        await fold_all(companion)
    assert (await stores.timeline.normal_summary(conversation.id)).watermark > normal_before.watermark
    assert await stores.timeline.private_summary(segment.id) == private  # and normal turns never moved the private one


async def test_normal_summary_input_holds_zero_private_characters(make_companion, provider):
    companion = await make_companion(budget=SMALL)
    marker = "Q7Z"  # characters that appear nowhere else
    for i in range(6):
        await say(companion, f"plain talk {i} " + "a" * 60)
        await fold_all(companion)
    await interval(companion, *[f"{marker} secret {i} " + marker * 20 for i in range(6)])
    for i in range(20):
        await say(companion, f"plain talk again {i} " + "b" * 60)
        await fold_all(companion)
    normal_folds = [r for r in provider.requests if r.purpose == "summary" and marker not in request_text(r)]
    all_folds = [r for r in provider.requests if r.purpose == "summary"]
    folds_in_normal_mode = [r for r in all_folds if "plain talk again" in request_text(r)]
    assert folds_in_normal_mode, "the normal summary folded after the interval"
    for request in folds_in_normal_mode:
        assert marker not in request_text(request)
    assert any(copy.PLACEHOLDER in request_text(r) for r in normal_folds)


async def test_the_private_pad_is_never_loaded_in_normal_mode(companion, stores, provider):
    await say(companion, "hi")
    conversation = await conversation_of(companion)
    await stores.memory.remember(conversation.person_id, conversation.id, "likes tea", 1.0)
    await say(companion, f"/private {PASSPHRASE}")
    await say(companion, "x")
    (segment,) = await segments_of(stores, conversation.id)
    await stores.timeline.save_summary(
        conversation.id,
        Summary("s", 1),
        2.0,
        segment_id=segment.id,
        pad_person_id=conversation.person_id,
        pad_facts=("PRIVATE-PAD-FACT",),
    )
    await say(companion, "y")
    private_request = provider.last_reply_request()
    assert "PRIVATE-PAD-FACT" in request_text(private_request) and "likes tea" in request_text(private_request)
    await say(companion, "/normal")
    await say(companion, "z")
    normal_request = provider.last_reply_request()
    assert "likes tea" in request_text(normal_request)  # incognito: existing memory is read
    assert "PRIVATE-PAD-FACT" not in request_text(normal_request)


async def test_the_private_pad_never_reaches_normal_mode_in_another_chat_while_its_interval_is_open(
    companion, stores, provider
):
    await say(companion, "hi", chat="first")
    first = await conversation_of(companion, chat="first")
    await say(companion, f"/private {PASSPHRASE}", chat="first")
    (segment,) = await segments_of(stores, first.id)
    await stores.timeline.save_summary(
        first.id,
        Summary("s", 1),
        2.0,
        segment_id=segment.id,
        pad_person_id=first.person_id,
        pad_facts=("OTHER-CHAT-PAD-CANARY",),
    )
    await say(companion, "hello from my other chat", chat="second")  # the same person, normal mode
    second = await conversation_of(companion, chat="second")
    assert second.person_id == first.person_id
    assert "OTHER-CHAT-PAD-CANARY" not in request_text(provider.last_reply_request())


async def test_the_private_pad_is_filled_only_by_the_private_summary_consolidation(make_companion, stores, provider):
    from core.values.model import Completion

    companion = await make_companion(budget=SMALL)
    await say(companion, f"/private {PASSPHRASE}")
    provider.script = []
    for i in range(10):
        await say(companion, f"private detail {i} " + "q" * 60)
        provider.script.append(Completion(f"reply {i}"))
        provider.script.append(Completion("SUMMARY:\nfolded\nFACTS:\n- has a cat named Miso"))
        await fold_all(companion)
    conversation = await conversation_of(companion)
    (segment,) = await segments_of(stores, conversation.id)
    rows = await all_rows(stores, "SELECT mode, segment_id, text FROM pad_entries")
    rows = [(mode, seg, engines.opened(stores, seg, "pad_entries.text", text)) for mode, seg, text in rows]
    assert rows == [("private", segment.id, "has a cat named Miso")]  # tied to its segment, once


async def test_private_pad_entries_and_summary_go_when_their_segment_expires(companion, stores, clock):
    await say(companion, f"/private {PASSPHRASE} 1h")
    await say(companion, "x")
    conversation = await conversation_of(companion)
    (segment,) = await segments_of(stores, conversation.id)
    await stores.timeline.save_summary(
        conversation.id,
        Summary("private sum", 5),
        clock.now(),
        segment_id=segment.id,
        pad_person_id=conversation.person_id,
        pad_facts=("fact",),
    )
    clock.advance(3601)
    await companion.sweep()
    for table in ("segments", "pad_entries", "summaries"):
        assert await all_rows(stores, f"SELECT count(*) FROM {table}") == [(0,)], table
    assert await all_rows(stores, "SELECT count(*) FROM messages WHERE mode = 'private'") == [(0,)]


async def test_normal_mode_retrieval_reads_only_the_masked_view(companion, stores):
    await say(companion, "visible")
    await interval(companion, "HIDDEN-1", "HIDDEN-2")
    conversation = await conversation_of(companion)
    items = await stores.timeline.view(conversation.id, visible_segment=None, after=0, limit=10_000)
    texts = [i.text for i in items if not i.is_placeholder]
    assert "HIDDEN-1" not in texts and "HIDDEN-2" not in texts and "visible" in texts
    assert sum(i.is_placeholder for i in items) == 1


async def test_a_group_conversation_never_loads_a_personal_pad(make_companion, stores, provider):
    companion = await make_companion(allowed_accounts=frozenset({"telegram:5"}))
    await say(companion, "hi", platform="telegram", chat="5", user="5")
    direct = await conversation_of(companion, "telegram", "5")
    await stores.memory.remember(direct.person_id, direct.id, "PERSONAL-FACT", 1.0)
    await say(companion, "hi all", platform="telegram", chat="-100", user="5", direct=False)
    assert "PERSONAL-FACT" not in request_text(provider.last_reply_request())


async def test_assembled_context_in_normal_mode_holds_no_private_row(companion, stores):
    await interval(companion, "NEVER-SEEN")
    conversation = await conversation_of(companion)
    context = await companion.context.assemble(conversation, NORMAL)
    assert all("NEVER-SEEN" not in (m.content or "") for m in context.messages)
