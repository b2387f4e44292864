"""LinkQueries' contract (adapters/storage/links.py) on SQLite and PostgreSQL: a merge keeps every row of both
people once and is one transaction; linking and unlinking are refused while a conversation of either person is
private; recall follows the rows it indexes (issue 16's store tests, moved here from test_link_store.py)."""

from __future__ import annotations

import pytest

from adapters.storage.engine import Database, Fetch, Statement
from adapters.storage.links import LinkQueries
from adapters.storage.memory import MemoryQueries
from adapters.storage.proactive import ProactiveQueries
from core.values.errors import LinkConflict, PrivateWriteRefused
from tests.adapters.store.seed import account, conversation, count, message, open_segment, person, racing

pytestmark = pytest.mark.engines

NOW = 1_800_000_000.0
TABLES = ("people", "accounts", "conversations", "pad_entries", "notes", "note_sources", "goals", "followups")


async def _two_people(engine: Database) -> list[tuple[int, int, int]]:
    """A Telegram and a Discord person with overlapping memory: one shared pad line, note, goal and follow-up
    each, and one of their own each. (account, person, conversation) of each."""
    memory, proactive = MemoryQueries(engine), ProactiveQueries(engine)
    people = []
    for platform, user, own in (("telegram", "101", "tea"), ("discord", "202", "coffee")):
        who = await person(engine, user)
        acc = await account(engine, who, platform, user)
        chat = await conversation(engine, who, chat=user, platform=platform)
        await memory.remember(who, chat, "sister is Ana", NOW)
        await memory.remember(who, chat, f"drinks {own}", NOW)
        said = await message(engine, chat, f"I love {own} and Ana", at=NOW)
        await memory.save_capture(who, "2026-11-30", "talked about Ana", (), [said], NOW)
        await memory.save_capture(who, "2026-11-30", f"talked about {own}", (), [], NOW)
        await memory.add_goal(who, chat, "Run a 10k", None, NOW)
        await memory.add_goal(who, chat, f"brew {own}", None, NOW)
        await memory.add_followup(who, chat, "reminder", "call mum", NOW + 3600, NOW)
        await memory.add_followup(who, chat, "watch", f"{own} tasting", NOW + 7200, NOW)
        people.append((acc, who, chat))
    await proactive.set_proactive_pref(people[0][1], people[0][2], "timezone", "Europe/Skopje")
    await proactive.set_proactive_pref(people[1][1], people[1][2], "budget", 2)
    return people


async def _rows(engine: Database, sql: str) -> list[tuple[object, ...]]:
    (found,) = await engine.read(Statement(sql, fetch=Fetch.ALL))
    return [tuple(row.values()) for row in found.rows]


async def _snapshot(engine: Database) -> dict[str, list[tuple[object, ...]]]:
    tables = {t: await _rows(engine, f"SELECT * FROM {t} ORDER BY 1, 2") for t in TABLES}
    tables["proactive_people"] = await _rows(engine, "SELECT * FROM proactive_people ORDER BY 1")
    tables["recall"] = await _rows(
        engine,
        "SELECT id, text, source, person_id FROM recall_index ORDER BY 1"
        if engine.dialect.name == "postgres"
        else "SELECT rowid, text, source, person_id FROM recall_fts ORDER BY 1",
    )
    return tables


async def test_merging_two_people_keeps_every_row_once(engine: Database) -> None:
    links, memory, proactive = LinkQueries(engine), MemoryQueries(engine), ProactiveQueries(engine)
    (tg, kept, _), (dc, _, _) = await _two_people(engine)

    merged = await links.merge_accounts(tg, dc, NOW)

    assert merged == kept
    assert await _rows(engine, "SELECT id FROM people") == [(kept,)]
    assert {r[0] for r in await _rows(engine, "SELECT person_id FROM conversations")} == {kept}
    pad = sorted(r[0] for r in await _rows(engine, "SELECT text FROM pad_entries"))
    assert pad == ["drinks coffee", "drinks tea", "sister is Ana"]
    notes = sorted(n.text for n in await memory.notes(kept))
    assert notes == ["talked about Ana", "talked about coffee", "talked about tea"]
    # The kept note took over the sources of its duplicate: both messages still point at it.
    assert await count(engine, "SELECT count(*) FROM note_sources") == 2
    assert sorted(g.title for g in await memory.goals(kept)) == ["Run a 10k", "brew coffee", "brew tea"]
    assert sorted(f.text for f in await memory.followups(kept)) == ["call mum", "coffee tasting", "tea tasting"]
    prefs = await proactive.proactive_prefs(kept)
    assert (prefs.timezone, prefs.budget) == ("Europe/Skopje", 2)
    assert await count(engine, "SELECT count(*) FROM proactive_people") == 1
    # Recall finds what either said, once.
    assert sorted(h.text for h in await memory.recall(kept, ("coffee",))) == [
        "I love coffee and Ana",
        "drinks coffee",
        "talked about coffee",
    ]
    assert len(await memory.recall(kept, ("sister",))) == 1
    assert sorted(await links.memory_origins(kept)) == sorted(
        [f"pad:{i}" for (i,) in await _rows(engine, "SELECT id FROM pad_entries")]
        + [f"goal:{i}" for (i,) in await _rows(engine, "SELECT id FROM goals")]
        + [f"followup:{i}" for (i,) in await _rows(engine, "SELECT id FROM followups")]
    )


_FAIL_MID_MERGE = {
    "sqlite": (
        "CREATE TRIGGER fail_mid_merge BEFORE UPDATE OF person_id ON followups"
        " BEGIN SELECT RAISE(ABORT, 'injected failure'); END",
    ),
    "postgres": (
        "CREATE FUNCTION fail_mid_merge() RETURNS trigger LANGUAGE plpgsql AS"
        " 'BEGIN RAISE EXCEPTION ''injected failure''; END'",
        "CREATE TRIGGER fail_mid_merge BEFORE UPDATE OF person_id ON followups"
        " FOR EACH ROW EXECUTE FUNCTION fail_mid_merge()",
    ),
}


async def test_a_merge_is_one_transaction_a_failure_midway_changes_nothing(engine: Database) -> None:
    links = LinkQueries(engine)
    (tg, _, _), (dc, _, _) = await _two_people(engine)
    await engine.write(*(Statement(sql) for sql in _FAIL_MID_MERGE[engine.dialect.name]))
    await links.save_link_code(tg, "scrypt$not-checked-by-the-store", NOW, NOW + 600)
    (pending,) = await links.pending_link_codes(NOW)
    before = await _snapshot(engine)

    with pytest.raises(Exception, match="injected failure"):
        await links.redeem_link_code(pending.id, dc, NOW)

    assert await _snapshot(engine) == before  # pad, notes and goals had moved before it failed
    assert len(await links.pending_link_codes(NOW)) == 1  # the code was not used up either


@pytest.mark.parametrize("private_side", [0, 1])
async def test_a_link_is_refused_while_either_person_is_private(engine: Database, private_side: int) -> None:
    links = LinkQueries(engine)
    people = await _two_people(engine)
    (tg, _, _), (dc, _, _) = people
    await open_segment(engine, people[private_side][2], at=NOW)
    await links.save_link_code(tg, "scrypt$x", NOW, NOW + 600)
    (pending,) = await links.pending_link_codes(NOW)
    before = await _snapshot(engine)

    with pytest.raises(PrivateWriteRefused):
        await links.redeem_link_code(pending.id, dc, NOW)
    with pytest.raises(PrivateWriteRefused):
        await links.merge_accounts(tg, dc, NOW)

    assert await _snapshot(engine) == before
    assert len(await links.pending_link_codes(NOW)) == 1


async def test_an_unlink_is_refused_while_a_conversation_is_private(engine: Database) -> None:
    links = LinkQueries(engine)
    (tg, _, tg_chat), (dc, _, _) = await _two_people(engine)
    merged = await links.merge_accounts(tg, dc, NOW)
    await open_segment(engine, tg_chat, at=NOW)
    before = await _snapshot(engine)

    with pytest.raises(PrivateWriteRefused):
        await links.unlink_account(merged, "discord", NOW)

    assert await _snapshot(engine) == before


async def test_an_unlinked_account_keeps_its_conversation_and_recall_of_it_and_no_memory(engine: Database) -> None:
    links, memory = LinkQueries(engine), MemoryQueries(engine)
    (tg, _, _), (dc, _, dc_chat) = await _two_people(engine)
    merged = await links.merge_accounts(tg, dc, NOW)

    separated = await links.unlink_account(merged, "discord", NOW)

    assert separated is not None and separated.person_id != merged and separated.id == dc
    assert await memory.goals(separated.person_id) == []
    assert await count(engine, "SELECT count(*) FROM pad_entries WHERE person_id = :p", p=separated.person_id) == 0
    assert await _rows(engine, f"SELECT person_id FROM conversations WHERE id = {dc_chat}") == [(separated.person_id,)]
    assert [a.platform for a in await links.accounts_of(separated.person_id)] == ["discord"]
    assert [a.platform for a in await links.accounts_of(merged)] == ["telegram"]
    assert await count(engine, "SELECT count(*) FROM pad_entries WHERE person_id = :p", p=merged) == 3
    assert [h.text for h in await memory.recall(separated.person_id, ("coffee",))] == ["I love coffee and Ana"]
    assert "I love coffee and Ana" not in [h.text for h in await memory.recall(merged, ("coffee",))]
    assert await links.unlink_account(merged, "discord", NOW) is None  # its only account now


async def test_a_code_is_used_up_by_the_first_redeem_and_expired_ones_are_dropped(engine: Database) -> None:
    links = LinkQueries(engine)
    (tg, kept, _), (dc, _, _) = await _two_people(engine)
    await links.save_link_code(dc, "scrypt$old", NOW - 900, NOW - 300)
    await links.save_link_code(tg, "scrypt$first", NOW - 10, NOW + 600)
    await links.save_link_code(tg, "scrypt$x", NOW, NOW + 600)  # replaces the first; drops the expired one
    (pending,) = await links.pending_link_codes(NOW)

    assert pending.code_hash == "scrypt$x" and await count(engine, "SELECT count(*) FROM link_codes") == 1
    assert await links.redeem_link_code(pending.id, dc, NOW) == kept
    assert await links.redeem_link_code(pending.id, dc, NOW) is None
    assert await links.pending_link_codes(NOW) == []


async def test_two_people_with_an_account_on_the_same_platform_are_not_merged(engine: Database) -> None:
    links = LinkQueries(engine)
    (tg, kept, _), _ = await _two_people(engine)
    other = await account(engine, await person(engine, "999"), "telegram", "999")
    before = await _snapshot(engine)

    with pytest.raises(LinkConflict):
        await links.merge_accounts(tg, other, NOW)

    assert await _snapshot(engine) == before
    assert await links.merge_accounts(tg, tg, NOW) == kept  # one person already: nothing to do


async def test_a_link_behind_a_segment_being_opened_is_refused(engine: Database) -> None:
    links = LinkQueries(engine)
    (tg, _, _), (dc, _, dc_chat) = await _two_people(engine)
    before = await _snapshot(engine)

    merged = await racing(links.merge_accounts(tg, dc, NOW), engine, dc_chat)

    with pytest.raises(PrivateWriteRefused):
        await merged
    after = await _snapshot(engine)
    assert {t: rows for t, rows in after.items() if t != "segments"} == before
