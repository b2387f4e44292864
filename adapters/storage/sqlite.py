"""The SQLite store: a facade over the query classes, which share one explicit Database.

Every SQL statement of the companion lives in the query modules, with the privacy predicates
inside it: timeline.py (messages, the masked view, summaries, pads), modes.py (segments,
offsets, the valve's attempts), memory.py (memory, goals, follow-ups, capture, analytics),
privacy.py (forgetting, checkpoints, export, crossings), bindings.py (mirrors), proactive.py
(reminders and nudges), links.py (linked accounts) and outbox.py. Every lasting write
passes through the one guard of guard.py.
"""

from __future__ import annotations

import os
from typing import Any

import aiosqlite

from adapters.storage.bindings import BindingQueries
from adapters.storage.chats import ChatQueries
from adapters.storage.database import Database, Params
from adapters.storage.links import LinkQueries
from adapters.storage.memory import MemoryQueries
from adapters.storage.modes import ModeQueries
from adapters.storage.privacy import Checkpoints, LifetimeQueries
from adapters.storage.proactive import ProactiveQueries
from adapters.storage.quotes import QuoteQueries
from adapters.storage.timeline import TimelineQueries


class SqliteStore:
    """Implements core.ports.BaseStore: each port's methods are those of one query class,
    bound here by name, so the facade adds no behaviour of its own."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.database = Database(path)
        self.path = self.database.path
        self.timeline = TimelineQueries(self.database)
        self.checkpoints = Checkpoints(self.database)
        self.modes = ModeQueries(self.database, self.checkpoints)
        self.memory = MemoryQueries(self.database)
        self.lifetime = LifetimeQueries(self.database, self.timeline, self.checkpoints)
        self.bindings = BindingQueries(self.database)
        self.proactive = ProactiveQueries(self.database)
        self.links = LinkQueries(self.database)
        self.chats = ChatQueries(self.database)

        # core.ports.TimelineStore
        self.ensure_account = self.timeline.ensure_account
        self.ensure_conversation = self.timeline.ensure_conversation
        self.conversation_at = self.timeline.conversation_at
        self.conversations_of = self.timeline.conversations_of
        self.add_message = self.timeline.add_message
        self.add_inbound = self.timeline.add_inbound
        self.record_reply = self.timeline.record_reply
        self.open_turns = self.timeline.open_turns
        self.turn_is_open = self.timeline.turn_is_open
        self.view = self.timeline.view
        self.has_items_before = self.timeline.has_items_before
        self.normal_summary = self.timeline.normal_summary
        self.private_summary = self.timeline.private_summary
        self.save_summary = self.timeline.save_summary
        self.normal_pad = self.timeline.normal_pad
        self.private_pad = self.timeline.private_pad

        # core.ports.ModeStore, and the adapters' offsets
        self.open_segment = self.modes.open_segment
        self.open_segment_of = self.modes.open_segment_of
        self.close_segment = self.modes.close_segment
        self.close_open_segments = self.modes.close_open_segments
        self.close_crash_open_segments = self.modes.close_crash_open_segments
        self.restart_segment_for = self.modes.restart_segment_for
        self.delete_expired_segments = self.modes.delete_expired_segments
        self.private_intervals = self.modes.private_intervals
        self.failed_attempts_since = self.modes.failed_attempts_since
        self.record_failed_attempt = self.modes.record_failed_attempt
        self.clear_failed_attempts = self.modes.clear_failed_attempts
        self.get_adapter_state = self.modes.get_adapter_state
        self.set_adapter_state = self.modes.set_adapter_state

        # core.ports.MemoryStore, and the report
        self.remember = self.memory.remember
        self.forget_pad_entry = self.memory.forget_pad_entry
        self.forget_pad_matching = self.memory.forget_pad_matching
        self.recall = self.memory.recall
        self.add_goal = self.memory.add_goal
        self.goals = self.memory.goals
        self.update_goal = self.memory.update_goal
        self.add_followup = self.memory.add_followup
        self.followups = self.memory.followups
        self.set_followup_status = self.memory.set_followup_status
        self.record_tool_operation = self.memory.record_tool_operation
        self.pending_capture = self.memory.pending_capture
        self.save_capture = self.memory.save_capture
        self.skip_capture = self.memory.skip_capture
        self.notes = self.memory.notes
        self.forget_note = self.memory.forget_note
        self.save_run = self.memory.save_run
        self.report_rows = self.memory.report_rows

        # core.ports.LifetimeStore, and the WAL checkpoints deletions owe
        self.delete_segments_of = self.lifetime.delete_segments_of
        self.delete_expired_artifacts = self.lifetime.delete_expired_artifacts
        self.export_items = self.lifetime.export_items
        self.segment_items = self.lifetime.segment_items
        self.request_crossing = self.lifetime.request_crossing
        self.confirm_crossing = self.lifetime.confirm_crossing
        self.checkpoint = self.checkpoints.run

        # core.ports.BindingStore (mirrors)
        self.add_binding = self.bindings.add_binding
        self.bindings_of = self.bindings.bindings_of
        self.remove_binding = self.bindings.remove_binding
        self.checkpoint_if_owed = self.checkpoints.finish_owed

        # core.ports.ProactiveStore (reminders and nudges)
        self.due_candidates = self.proactive.due_candidates
        self.waiting_in_private = self.proactive.waiting_in_private
        self.nudges_sent_on = self.proactive.nudges_sent_on
        self.latest_decisions = self.proactive.latest_decisions
        self.record_decision = self.proactive.record_decision
        self.claim_and_send = self.proactive.claim_and_send
        self.settle_without_message = self.proactive.settle_without_message
        self.proactive_prefs = self.proactive.proactive_prefs
        self.set_proactive_pref = self.proactive.set_proactive_pref

        # core.ports.LinkStore (linked accounts)
        self.save_link_code = self.links.save_link_code
        self.pending_link_codes = self.links.pending_link_codes
        self.redeem_link_code = self.links.redeem_link_code
        self.merge_accounts = self.links.merge_accounts
        self.failed_link_attempts_since = self.links.failed_link_attempts_since
        self.record_failed_link_attempt = self.links.record_failed_link_attempt
        self.clear_failed_link_attempts = self.links.clear_failed_link_attempts
        self.accounts_of = self.links.accounts_of
        self.memory_origins = self.links.memory_origins
        self.unlink_account = self.links.unlink_account

        # core.ports.ChatStore (chats a platform moved to a new id)
        self.move_chat = self.chats.move_chat

        # core.ports.QuoteStore (quotes and edits, issue 15)
        self.quotes = QuoteQueries(self.database)
        self.quoted_message = self.quotes.quoted_message
        self.visible_texts = self.quotes.visible_texts
        self.conversation_of_chat = self.quotes.conversation_of_chat
        self.private_interval_at = self.quotes.private_interval_at
        self.editable_message = self.quotes.editable_message
        self.edit_message = self.quotes.edit_message
        self.answered_since = self.quotes.answered_since

    # --- lifecycle ----------------------------------------------------------

    async def start(self) -> None:
        await self.database.start()

    async def aclose(self) -> None:
        await self.database.aclose()

    async def __aenter__(self) -> SqliteStore:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # --- raw SQL, for tests and bench/ only ---------------------------------

    async def _all(self, sql: str, params: Params = ()) -> list[aiosqlite.Row]:
        return await self.database.all(sql, params)

    async def _one(self, sql: str, params: Params = ()) -> Any:
        return await self.database.one(sql, params)

    async def _planted(self, sql: str, params: Params = ()) -> None:
        """A write straight into the database, past every mutator and guard: tests plant rows
        with it to show what the queries themselves refuse."""
        async with self.database.tx() as db:
            await db.execute(sql, params)
