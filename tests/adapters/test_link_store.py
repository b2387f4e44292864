"""Merging two people is one transaction of the store: everything of both is kept once, a failure
midway changes nothing, and an open private segment of either refuses it (issue 16)."""

from __future__ import annotations

import pytest

from core.values.errors import LinkConflict, PrivateWriteRefused
from core.values.model import ConversationKey
from tests.helpers import engines
from tests.helpers.chat import all_rows

NOW = 1_800_000_000.0
TABLES = ("people", "accounts", "conversations", "pad_entries", "notes", "note_sources", "goals", "followups")


async def two_people(stores):
    """A Telegram and a Discord person with overlapping memory: one shared pad line, note, goal
    and follow-up each, and one of their own each."""
    people = []
    for platform, user, own in (("telegram", "101", "tea"), ("discord", "202", "coffee")):
        account = await stores.timeline.ensure_account(platform, user, None, NOW)
        chat = await stores.timeline.ensure_conversation(
            ConversationKey(platform, user), "direct", account.person_id, NOW
        )
        person = account.person_id
        await stores.memory.remember(person, chat.id, "sister is Ana", NOW)
        await stores.memory.remember(person, chat.id, f"drinks {own}", NOW)
        message = await stores.timeline.add_message(chat.id, "user", f"I love {own} and Ana", NOW)
        await stores.memory.save_capture(person, "2026-11-30", "talked about Ana", (), [message], NOW)
        await stores.memory.save_capture(person, "2026-11-30", f"talked about {own}", (), [], NOW)
        await stores.memory.add_goal(person, chat.id, "Run a 10k", None, NOW)
        await stores.memory.add_goal(person, chat.id, f"brew {own}", None, NOW)
        await stores.memory.add_followup(person, chat.id, "reminder", "call mum", NOW + 3600, NOW)
        await stores.memory.add_followup(person, chat.id, "watch", f"{own} tasting", NOW + 7200, NOW)
        people.append((account, chat))
    await stores.proactive.set_proactive_pref(people[0][0].person_id, people[0][1].id, "timezone", "Europe/Skopje")
    await stores.proactive.set_proactive_pref(people[1][0].person_id, people[1][1].id, "budget", 2)
    return people


async def snapshot(stores) -> dict[str, list]:
    tables = {t: await all_rows(stores, f"SELECT * FROM {t} ORDER BY 1") for t in TABLES}
    tables["proactive_people"] = await all_rows(stores, "SELECT * FROM proactive_people ORDER BY 1")
    tables["recall_fts"] = await all_rows(stores, "SELECT rowid, text, source, person_id FROM recall_fts ORDER BY 1")
    return tables


async def test_merging_two_people_keeps_every_row_once(stores):
    (tg, _), (dc, _) = await two_people(stores)
    person = await stores.links.merge_accounts(tg.id, dc.id, NOW)
    assert person == tg.person_id
    assert await all_rows(stores, "SELECT id FROM people") == [(tg.person_id,)]
    assert {r[0] for r in await all_rows(stores, "SELECT person_id FROM conversations")} == {person}
    pad = sorted(e.text for e in await stores.timeline.normal_pad(person))
    assert pad == ["drinks coffee", "drinks tea", "sister is Ana"]
    notes = sorted(r[0] for r in await all_rows(stores, "SELECT text FROM notes WHERE person_id = ?", (person,)))
    assert notes == ["talked about Ana", "talked about coffee", "talked about tea"]
    # The kept note took over the sources of its duplicate: both messages still point at it.
    assert len(await all_rows(stores, "SELECT * FROM note_sources")) == 2
    assert sorted(g.title for g in await stores.memory.goals(person)) == ["Run a 10k", "brew coffee", "brew tea"]
    assert sorted(f.text for f in await stores.memory.followups(person)) == [
        "call mum",
        "coffee tasting",
        "tea tasting",
    ]
    prefs = await stores.proactive.proactive_prefs(person)
    assert (prefs.timezone, prefs.budget) == ("Europe/Skopje", 2)
    assert len(await all_rows(stores, "SELECT * FROM proactive_people")) == 1
    # Recall finds what either said, once.
    assert sorted(h.text for h in await stores.memory.recall(person, ("coffee",))) == [
        "I love coffee and Ana",
        "drinks coffee",
        "talked about coffee",
    ]
    assert len(await stores.memory.recall(person, ("sister",))) == 1


async def test_merge_is_one_transaction_a_failure_midway_changes_nothing(stores):
    (tg, _), (dc, _) = await two_people(stores)
    await engines.plant(
        stores,
        "CREATE TRIGGER fail_mid_merge BEFORE UPDATE OF person_id ON followups"
        " BEGIN SELECT RAISE(ABORT, 'injected failure'); END",
    )
    code_hash = "scrypt$not-checked-by-the-store"
    await stores.links.save_link_code(tg.id, code_hash, NOW, NOW + 600)
    (pending,) = await stores.links.pending_link_codes(NOW)
    before = await snapshot(stores)
    with pytest.raises(Exception, match="injected failure"):
        await stores.links.redeem_link_code(pending.id, dc.id, NOW)
    assert await snapshot(stores) == before  # pad, notes and goals had moved before it failed
    assert len(await stores.links.pending_link_codes(NOW)) == 1  # the code was not used up either


@pytest.mark.parametrize("private_side", [0, 1])
async def test_merge_is_refused_by_the_store_while_either_person_has_an_open_segment(stores, private_side):
    people = await two_people(stores)
    (tg, _), (dc, _) = people
    await stores.modes.open_segment(people[private_side][1].id, NOW, None)
    await stores.links.save_link_code(tg.id, "scrypt$x", NOW, NOW + 600)
    (pending,) = await stores.links.pending_link_codes(NOW)
    before = await snapshot(stores)
    with pytest.raises(PrivateWriteRefused):
        await stores.links.redeem_link_code(pending.id, dc.id, NOW)
    with pytest.raises(PrivateWriteRefused):
        await stores.links.merge_accounts(tg.id, dc.id, NOW)
    assert await snapshot(stores) == before
    assert len(await stores.links.pending_link_codes(NOW)) == 1


async def test_unlink_is_refused_by_the_store_while_a_conversation_is_private(stores):
    (tg, tg_chat), (dc, _) = await two_people(stores)
    person = await stores.links.merge_accounts(tg.id, dc.id, NOW)
    await stores.modes.open_segment(tg_chat.id, NOW, None)
    before = await snapshot(stores)
    with pytest.raises(PrivateWriteRefused):
        await stores.links.unlink_account(person, "discord", NOW)
    assert await snapshot(stores) == before


async def test_unlinked_account_keeps_its_conversation_and_no_memory(stores):
    (tg, _), (dc, dc_chat) = await two_people(stores)
    person = await stores.links.merge_accounts(tg.id, dc.id, NOW)
    separated = await stores.links.unlink_account(person, "discord", NOW)
    assert separated is not None and separated.person_id != person
    assert await stores.timeline.normal_pad(separated.person_id) == []
    assert await stores.memory.goals(separated.person_id) == []
    row = await engines.first(stores, "SELECT person_id FROM conversations WHERE id = ?", (dc_chat.id,))
    assert row[0] == separated.person_id
    assert len(await stores.timeline.normal_pad(person)) == 3  # the person keeps all of it
    assert await stores.links.unlink_account(person, "discord", NOW) is None


async def test_a_code_is_used_up_by_the_first_redeem(stores):
    (tg, _), (dc, _) = await two_people(stores)
    await stores.links.save_link_code(tg.id, "scrypt$x", NOW, NOW + 600)
    (pending,) = await stores.links.pending_link_codes(NOW)
    assert await stores.links.redeem_link_code(pending.id, dc.id, NOW) == tg.person_id
    assert await stores.links.redeem_link_code(pending.id, dc.id, NOW) is None
    assert await stores.links.pending_link_codes(NOW) == []


async def test_two_people_with_an_account_on_the_same_platform_are_not_merged(stores):
    (tg, _), _ = await two_people(stores)
    other = await stores.timeline.ensure_account("telegram", "999", None, NOW)
    before = await snapshot(stores)
    with pytest.raises(LinkConflict):
        await stores.links.merge_accounts(tg.id, other.id, NOW)
    assert await snapshot(stores) == before
