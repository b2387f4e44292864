"""Seed 001's list of failure modes, one test each, named after the failure it prevents.
Each one fails if its failure comes back."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from adapters.storage.backup import backup, restore
from core.memory.operations import default_tools, words_of
from core.memory.tools import PRIVATE_FORBIDDEN
from core.values import copy
from core.values.model import Completion, Conversation, Summary, ToolCall
from core.values.modes import NORMAL
from tests.conftest import PASSPHRASE
from tests.helpers import engines
from tests.helpers.chat import all_rows, conversation_of, say, segments_of
from tests.helpers.fakes import request_text

ROOT = Path(__file__).resolve().parents[2]
CANARY = "FAILURE-MODE-CANARY"

pytestmark = [pytest.mark.engines, pytest.mark.privacy]


async def private_turn(companion, text: str = f"{CANARY} said in private", expiry: str = "1h") -> None:
    await say(companion, f"/private {PASSPHRASE} {expiry}")
    await say(companion, text)


async def test_failure_mode_private_replies_marked_pending_for_capture(companion, stores):
    await private_turn(companion)
    rows = await all_rows(stores, "SELECT role, capture FROM messages WHERE mode = 'private' AND kind = 'chat'")
    assert {r[0] for r in rows} == {"user", "assistant"} and {r[1] for r in rows} == {"skipped"}
    assert await companion.capture.run_once() == 0


async def test_failure_mode_recall_excludes_private_notes_but_still_searches_private_messages(companion, stores):
    await private_turn(companion)
    await say(companion, "/normal")
    conversation = await conversation_of(companion)
    assert await stores.memory.recall(conversation.person_id, words_of(CANARY)) == []
    assert await engines.recall_hits(stores, CANARY) == 0


def test_failure_mode_goal_tool_hidden_while_scheduling_tools_stay_exposed():
    from core.values.model import Conversation, Segment
    from core.values.modes import PrivateState

    state = PrivateState(Segment(1, 1, 0, 0.0, 0.0, None, None, None))
    offered = default_tools().tools_for(Conversation(1, "t", "t", "direct", 1), state)
    exposed_tags = set().union(*(t.tags for t in offered))
    assert not exposed_tags & PRIVATE_FORBIDDEN
    assert not {"schedule_followup", "watch_event", "set_goal", "list_goals"} & {t.name for t in offered}


async def test_failure_mode_structural_events_retain_private_ids(companion, stores, provider):
    await private_turn(companion)
    provider.fail_all = True
    await say(companion, "failing private turn")
    assert await all_rows(stores, "SELECT count(*) FROM agent_runs") == [(0,)]
    assert await all_rows(stores, "SELECT count(*) FROM agent_events") == [(0,)]


async def test_failure_mode_delivery_row_created_before_a_later_private_check_drops_it(companion, stores):
    # The only paths out of a thread today are /export and a crossing: in private mode
    # neither writes a row unless the operator allowed crossings and the person confirmed.
    await private_turn(companion)
    for command in ("/export", "/export confirm"):
        assert not (await say(companion, command)).attachments
    for table in ("crossings", "artifacts"):
        assert await all_rows(stores, f"SELECT count(*) FROM {table}") == [(0,)]


async def test_failure_mode_expired_threads_leave_orphaned_operations_or_runs(companion, stores, clock, provider):
    await say(companion, f"/private {PASSPHRASE} 1h")
    provider.script = [Completion("", (ToolCall("c1", "current_time", "{}"),)), Completion("ok")]
    await say(companion, "use a tool in private")
    assert await all_rows(stores, "SELECT count(*) FROM tool_operations WHERE segment_id IS NOT NULL") == [(1,)]
    clock.advance(3601)
    await companion.sweep()
    for table, column in (
        ("tool_operations", "segment_id"),
        ("messages", "segment_id"),
        ("summaries", "segment_id"),
        ("pad_entries", "segment_id"),
        ("crossings", "segment_id"),
    ):
        orphans = await all_rows(
            stores,
            f"SELECT count(*) FROM {table} WHERE {column} IS NOT NULL AND {column} NOT IN (SELECT id FROM segments)",
        )
        assert orphans == [(0,)] and await all_rows(
            stores, f"SELECT count(*) FROM {table} WHERE {column} IS NOT NULL"
        ) == [(0,)]


async def test_failure_mode_private_summary_enters_a_global_prompt(companion, stores, provider, clock):
    await private_turn(companion)
    conversation = await conversation_of(companion)
    (segment,) = await segments_of(stores, conversation.id)
    await stores.timeline.save_summary(
        conversation.id, Summary(f"{CANARY} private summary", 3), clock.now(), segment_id=segment.id
    )
    await say(companion, "private again")
    assert f"{CANARY} private summary" in request_text(provider.last_reply_request())
    await say(companion, "/normal")
    await say(companion, "normal turn")
    assert all(CANARY not in request_text(r) for r in provider.requests if r.purpose == "transition")
    assert CANARY not in request_text(provider.last_reply_request())


@pytest.mark.sqlite_only("`companion backup` and the file are SQLite's; PostgreSQL's are test_postgres_shredding.py's")
async def test_failure_mode_search_indexes_or_backups_retain_content_past_its_lifetime(
    companion, stores, clock, tmp_path
):
    await private_turn(companion)
    made = backup(engines.sqlite_file(stores), tmp_path / "bk", retention_days=14)
    assert CANARY.encode() not in made.path.read_bytes()
    clock.advance(3601)
    await companion.sweep()
    for path in engines.sqlite_file(stores).parent.glob(engines.sqlite_file(stores).name + "*"):
        assert CANARY.encode() not in path.read_bytes(), path.name


@pytest.mark.sqlite_only("`companion restore` of a file is SQLite's; PostgreSQL restores with its own tools")
async def test_failure_mode_restore_reintroduces_a_thread_that_expired_after_the_snapshot(
    companion, stores, clock, tmp_path
):
    await private_turn(companion)
    snapshot = tmp_path / "snapshot.db"
    with sqlite3.connect(engines.sqlite_file(stores)) as live, sqlite3.connect(snapshot) as dest:
        live.backup(dest)
    clock.advance(3601)
    await companion.sweep()
    await stores.database.aclose()
    restore(snapshot, engines.sqlite_file(stores))
    await stores.database.start()
    assert await all_rows(stores, "SELECT count(*) FROM segments") == [(0,)]
    assert CANARY.encode() not in engines.sqlite_file(stores).read_bytes()


async def test_failure_mode_publishing_from_private_content_without_a_named_confirmation(make_companion, stores):
    companion = await make_companion(allow_private_export=True)
    await private_turn(companion)
    first = await say(companion, "/export")
    assert not first.attachments and "terminal's current folder" in first.text  # the destination is named
    assert await all_rows(stores, "SELECT count(*) FROM artifacts") == [(0,)]
    await say(companion, "something else")  # not a confirmation
    assert await all_rows(stores, "SELECT count(*) FROM artifacts") == [(0,)]
    assert (await say(companion, "/export confirm")).attachments
    assert await all_rows(stores, "SELECT count(*) FROM artifacts") == [(1,)]
    every_tool = default_tools().tools_for(Conversation(1, "t", "t", "direct", 1), NORMAL)
    assert not {t.name for t in every_tool} & {"export", "publish", "publish_app"}


def _all_copy() -> str:
    texts = [v for k, v in vars(copy).items() if k.isupper() and isinstance(v, str)]
    texts += [(ROOT / name).read_text() for name in ("PRIVACY.md", "README.md") if (ROOT / name).exists()]
    return "\n".join(texts)


async def test_failure_mode_copy_says_nothing_is_remembered_while_memory_is_still_read(companion):
    claims = re.compile(
        r"nothing (is|will be) remembered|i remember nothing|forget everything|no memory at all", re.IGNORECASE
    )
    help_text = (await say(companion, "/help")).text
    assert not claims.search(_all_copy() + help_text)
    assert "I still read what I already know about you" in help_text


async def test_failure_mode_user_expects_blank_slate_from_an_incognito_design(companion):
    await say(companion, f"/private {PASSPHRASE}")
    mode_text = (await say(companion, "/mode")).text
    help_text = (await say(companion, "/help")).text
    for text in (mode_text, help_text, (ROOT / "PRIVACY.md").read_text()):
        assert "incognito, not a blank slate" in text
