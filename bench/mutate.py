"""Mutation testing of our own: named one-line bugs planted in a copy of the tree, the suite run for each.

python bench/mutate.py --list                      # the mutations, by name and category
python bench/mutate.py --check                     # every original text is found exactly once (no run)
python bench/mutate.py --jobs 2                    # all of them on the fast layers (tests/core tests/adapters)
python bench/mutate.py --only recall-pad-predicate --suite tests
python bench/mutate.py --jobs 2 -- --deselect tests/x.py::test_flaky   # anything after -- goes to pytest

Each mutation replaces one exact text (usually one line) of one file. For each, the tracked
and untracked-but-not-ignored files are copied to a temporary folder, the replacement is
applied (it fails loudly unless the original occurs exactly once, so the list stays honest as
the code moves), and pytest runs there with PYTHONPATH set to the copy, without -x: the
number of failing tests per mutation is the point. A mutation is killed when at least one test
fails, errors or the run times out. A clean copy runs first (the baseline); tests failing there
are not counted against any mutation.

Exit status: 0 when every privacy-guard mutation is killed, 1 when one survives, 2 when the
list no longer matches the code or the baseline cannot run. Standard library only.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import dataclasses
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FAST_LAYERS = ("tests/core", "tests/adapters")
PRIVACY = "privacy guard"
RELIABILITY = "reliability"


@dataclasses.dataclass(frozen=True, slots=True)
class Mutation:
    """Replace `original` (found exactly once in `path`) by `replacement`.

    `also`: test paths run with this mutation whatever the suite (the tests of a layer outside
    the fast ones that guard it, e.g. the gateway's schedule)."""

    name: str
    category: str
    path: str
    original: str
    replacement: str
    also: tuple[str, ...] = ()


M = Mutation
MUTATIONS: tuple[Mutation, ...] = (
    # --- the valve (core/privacy/valve.py) ---------------------------------------------------------
    M(
        "valve-expiry-ignored-at-read",
        PRIVACY,
        "core/privacy/valve.py",
        "if segment.expires_at is not None and now >= segment.expires_at:",
        "if False:",
    ),
    M(
        "valve-expired-not-deleted-at-read",
        PRIVACY,
        "core/privacy/valve.py",
        "            try:  # its life is over: delete it now rather than at the next sweep\n"
        "                await self._store.delete_expired_segments(now)",
        "            try:  # its life is over: delete it now rather than at the next sweep\n                pass",
    ),
    M(
        "valve-group-read-stays-private",
        PRIVACY,
        "core/privacy/valve.py",
        '        if not conversation.is_direct:\n            await self._close_quietly(segment, "group")',
        '        if False:\n            await self._close_quietly(segment, "group")',
    ),
    M(
        "valve-malformed-segment-stays-private",
        PRIVACY,
        "core/privacy/valve.py",
        "        if not _well_formed(segment):",
        "        if False:",
    ),
    M(
        "valve-wrong-passphrase-accepted",
        PRIVACY,
        "core/privacy/valve.py",
        "        if not ok:",
        "        if False:",
    ),
    M(
        "valve-lockout-ignored",
        PRIVACY,
        "core/privacy/lockout.py",
        "        if until is not None and now < until:",
        "        if False:",
    ),
    M(
        "valve-failed-exit-not-held-normal",
        PRIVACY,
        "core/privacy/valve.py",
        "            self._leaving.add(conversation.id)\n            return True",
        "            return True",
    ),
    M(
        "valve-idle-ignores-activity",  # issue 12 gap: private activity did not extend the idle timeout
        RELIABILITY,
        "core/privacy/valve.py",
        "now - segment.last_activity_at >= self._idle:",
        "now - segment.started_at >= self._idle:",
    ),
    # --- context assembly (core/memory/context.py) -----------------------------------------------
    M(
        "context-private-pad-in-normal-mode",
        PRIVACY,
        "core/memory/context.py",
        "            if state.is_private:\n                private_pad =",
        "            if True:\n                private_pad =",
    ),
    M(
        "context-private-fold-saved-as-normal-summary",
        PRIVACY,
        "core/memory/context.py",
        "        if state.segment_id is not None:\n            await self._store.save_summary(",
        "        if False:\n            await self._store.save_summary(",
    ),
    M(
        "context-fold-watermark-first-item",  # issue 12 gap: folds re-summarised
        RELIABILITY,
        "core/memory/context.py",
        "new = Summary(text or context.summary.text, batch[-1].position)",
        "new = Summary(text or context.summary.text, batch[0].position)",
    ),
    M(
        "context-window-may-be-empty",
        RELIABILITY,
        "core/memory/context.py",
        "if kept and used + cost > budget_tokens:",
        "if used + cost > budget_tokens:",
    ),
    # --- what normal mode sees (core/turn/preview.py, issue 23) ------------------------------------
    M(
        "preview-in-private-modes-view",
        PRIVACY,
        "core/turn/preview.py",
        "prepared = await self._responder.prepare(conversation, NORMAL, upcoming=upcoming)",
        "prepared = await self._responder.prepare(conversation, "
        '__import__("core.values.modes", fromlist=["x"]).PrivateState(segment) if segment else NORMAL, '
        "upcoming=upcoming)",
    ),
    M(
        "preview-outside-the-lane",  # a fold queued before the preview would be missed
        RELIABILITY,
        "core/turn/preview.py",
        "return await self._lanes.run(key, lambda: self._build(conversation, upcoming))",
        "return await self._build(conversation, upcoming)",
    ),
    M(
        "preview-next-message-added-after-the-fit",  # the window would not make room for it
        RELIABILITY,
        "core/memory/context.py",
        "        if upcoming is not None:\n"
        '            fetched.append(TimelineItem(UPCOMING_POSITION, "user", upcoming))\n'
        "        ratio = self.ratio.value  # read once, after the reads: the budget and the window use the same\n"
        "        remaining = self._budget.total_tokens // shrink - estimate_tokens(system, ratio)\n"
        "        window = _fit(fetched, remaining, ratio)\n",
        "        ratio = self.ratio.value\n"
        "        remaining = self._budget.total_tokens // shrink - estimate_tokens(system, ratio)\n"
        "        window = _fit(fetched, remaining, ratio)\n"
        "        if upcoming is not None:\n"
        '            window.append(TimelineItem(UPCOMING_POSITION, "user", upcoming))\n',
    ),
    M(
        "preview-fetch-limit-ignores-the-next-message",
        RELIABILITY,
        "core/memory/context.py",
        "limit = self._budget.max_items if upcoming is None else self._budget.max_items - 1",
        "limit = self._budget.max_items",
    ),
    # --- the web chat (adapters/web/chat.py, core/turn/transcript.py, issue 23) ---------------------
    M(
        "web-history-mode-read-past-the-valve",  # an interval idle past its time would still be shown
        PRIVACY,
        "core/turn/transcript.py",
        "        state = await self._valve.settle(conversation)\n",
        "        segment = await self._store.open_segment_of(conversation.id)\n"
        '        modes = __import__("core.values.modes", fromlist=["x"])\n'
        "        state = modes.PrivateState(segment) if segment else modes.NORMAL\n",
    ),
    M(
        "web-page-keeps-the-passphrase",
        PRIVACY,
        "adapters/web/chat.py",
        "hide = carries_secret(inbound.text) or (reply is not None and reply.delete_inbound)",
        "hide = False",
    ),
    M(
        "web-page-shows-a-message-twice",
        RELIABILITY,
        "adapters/web/chat.py",
        "if item.conversation_id == self.transcript.conversation_id and item.message_id in self._shown:",
        "if False:",
    ),
    M(
        "web-page-queue-unbounded",
        RELIABILITY,
        "adapters/web/chat.py",
        "        if self._queue.qsize() >= self._size:",
        "        if False:",
    ),
    M(
        "web-account-not-the-owners",
        RELIABILITY,
        "bot/bootstrap.py",
        '        web_owner=config.web_owner or (config.platforms is not None and "web" in config.platforms),',
        "        web_owner=config.web_owner,",
    ),
    M(
        "web-any-chat-is-the-owners",
        RELIABILITY,
        "adapters/web/chat.py",
        "        if chat_id != CHAT_ID:\n            raise DeliveryFailed",
        "        if False:\n            raise DeliveryFailed",
    ),
    # --- the web chat's pages (adapters/web/*_page.py, core/turn/controls.py, issue 23) -----------------
    M(
        "web-memory-page-reads-the-private-pad",
        PRIVACY,
        "core/turn/controls.py",
        "pad=tuple(await store.normal_pad(person)),",
        "pad=tuple(await store.private_pad(person)),",
    ),
    M(
        "web-memory-page-lists-private-decisions",
        PRIVACY,
        "adapters/storage/proactive.py",
        '" WHERE person_id = ? AND segment_id IS NULL ORDER BY id DESC LIMIT ?",',
        '" WHERE person_id = ? ORDER BY id DESC LIMIT ?",',
    ),
    M(
        "web-privacy-page-lists-an-expired-interval",
        PRIVACY,
        "adapters/storage/modes.py",
        '" AND (expires_at IS NULL OR expires_at > ?) ORDER BY id",',
        '" AND ? IS NOT NULL ORDER BY id",',
    ),
    M(
        "web-note-forgotten-while-private",
        PRIVACY,
        "adapters/storage/memory.py",
        '        async with lasting_tx(self._db, origin, "change to memory") as db:\n'
        '            cur = await db.execute("DELETE FROM notes',
        '        async with self._db.tx() as db:\n            cur = await db.execute("DELETE FROM notes',
    ),
    M(
        "web-private-banner-missing",
        PRIVACY,
        "adapters/web/layout.py",
        '    if not mode.is_private:\n        return ""',
        '    if True:\n        return ""',
    ),
    M(
        "web-open-page-not-told-the-mode-changed",  # private text would stay on a page after /normal
        PRIVACY,
        "adapters/web/stream.py",
        "                if current == mode:\n                    continue",
        "                if True:\n                    continue",
    ),
    M(
        "web-privacy-page-end-not-told-to-open-pages",
        PRIVACY,
        "adapters/web/privacy_page.py",
        "    await request.app[BRIDGE].call(site.core.chat.mode_changed)",
        "    pass",
    ),
    M(
        "web-passphrase-field-shown-as-typed",
        PRIVACY,
        "adapters/web/chat_page.py",
        '<input type="password" name="passphrase"',
        '<input type="text" name="passphrase"',
    ),
    M(
        "web-context-page-redraws-the-body",
        RELIABILITY,
        "adapters/web/context_page.py",
        '{esc(preview.body.decode("utf-8"))}',
        '{esc(__import__("json").dumps(__import__("json").loads(preview.body)))}',
    ),
    M(
        "web-stream-outlives-its-browser",
        RELIABILITY,
        "adapters/web/chat_page.py",
        "            if request.transport is None or request.transport.is_closing():",
        "            if False:",
    ),
    M(
        "web-stream-outlives-the-service",
        RELIABILITY,
        "adapters/web/pages.py",
        "        app.on_shutdown.append(site.end_streams)",
        "        pass",
    ),
    M(
        "web-stream-relay-unbounded",
        RELIABILITY,
        "adapters/web/stream.py",
        "        if item is not _END and self._queue.qsize() >= self._size:",
        "        if False:",
    ),
    M(
        "web-page-forms-send-a-null-origin",  # every form of the pages would be refused by the Origin check
        RELIABILITY,
        "adapters/web/layout.py",
        'headers={"Referrer-Policy": "same-origin"}',
        "headers={}",
        also=("tests/bot/test_web_browser_wire.py",),
    ),
    # --- the core's other walls -----------------------------------------------------------
    M(
        "tools-lasting-tools-offered-in-private",
        PRIVACY,
        "core/memory/tools.py",
        "        if state.is_private:\n            return [t for t in self._tools.values()",
        "        if False:\n            return [t for t in self._tools.values()",
    ),
    M(
        "commands-lasting-command-runs-in-private",
        PRIVACY,
        "core/turn/commanding.py",
        "if state.is_private and info.refused_while_private(args):",
        "if False:",
    ),
    M(
        "companion-passphrase-stored-unredacted",
        PRIVACY,
        "core/turn/commanding.py",
        'stored = f"/{info.name} [redacted]" if carries_secret else turn.message.text',
        "stored = turn.message.text",
    ),
    M(
        "companion-open-private-turn-answered-after-restart",
        PRIVACY,
        "core/turn/recovery.py",
        "        if state.is_private or state.unreadable:\n            return None",
        "        if state.unreadable:\n            return None",
    ),
    M(
        "secrets-lookalike-command-not-a-secret",
        PRIVACY,
        "core/commands/registry.py",
        "    return mistyped_secret_command(text)",
        "    return False",
    ),
    # --- storage SQL: masks, pad, segment and recall predicates ---------------------------
    M(
        "recall-message-predicate",
        PRIVACY,
        "adapters/storage/memory.py",
        "\"   AND (f.source <> 'message' OR (m.mode <> 'private' AND m.segment_id IS NULL))\"",
        '""',
    ),
    M(
        "recall-pad-predicate",  # issue 12 gap
        PRIVACY,
        "adapters/storage/memory.py",
        "\"   AND (f.source <> 'pad' OR (p.mode <> 'private' AND p.segment_id IS NULL))\"",
        '""',
    ),
    M(
        "recall-index-takes-private-messages",
        PRIVACY,
        "migrations/0003_memory.sql",
        "WHEN new.mode = 'normal' AND new.segment_id IS NULL AND new.kind = 'chat'",
        "WHEN new.kind = 'chat'",
    ),
    M(
        "mask-normal-view-reads-private-rows",
        PRIVACY,
        "adapters/storage/timeline.py",
        "\" WHERE conversation_id = :c AND segment_id IS NULL AND kind = 'chat' AND mode <> 'private'\"",
        "\" WHERE conversation_id = :c AND kind = 'chat'\"",
    ),
    M(
        "mask-private-view-reads-other-segments",
        PRIVACY,
        "adapters/storage/timeline.py",
        "\" WHERE segment_id = :s AND conversation_id = :c AND kind = 'chat'\"",
        "\" WHERE segment_id IS NOT NULL AND conversation_id = :c AND kind = 'chat'\"",
    ),
    M(
        "summary-normal-reads-private-summary",
        PRIVACY,
        "adapters/storage/timeline.py",
        "\"SELECT text, watermark FROM summaries WHERE conversation_id = ? AND segment_id IS NULL AND mode = 'normal'\"",
        '"SELECT text, watermark FROM summaries WHERE conversation_id = ? ORDER BY id DESC"',
    ),
    M(
        "pad-normal-pad-reads-private-entries",
        PRIVACY,
        "adapters/storage/timeline.py",
        "\"SELECT id, text FROM pad_entries WHERE person_id = ? AND mode = 'normal' AND segment_id IS NULL ORDER BY id\"",
        '"SELECT id, text FROM pad_entries WHERE person_id = ? ORDER BY id"',
    ),
    M(
        "segment-activity-not-extended-by-a-user-message",  # issue 12 gap (one of its three writes)
        RELIABILITY,
        "adapters/storage/timeline.py",
        "                (conversation_id, segment_id, account_id, mode, text, capture, now, platform_message_id, said),\n"
        "            )\n            if cur.rowcount == 0:\n                return None\n            if segment_id is not None:\n",
        "                (conversation_id, segment_id, account_id, mode, text, capture, now, platform_message_id, said),\n"
        "            )\n            if cur.rowcount == 0:\n                return None\n            if False:\n",
    ),
    M(
        "capture-private-span-not-skipped",
        PRIVACY,
        "adapters/storage/memory.py",
        '" OR EXISTS (SELECT 1 FROM segments s WHERE s.conversation_id = messages.conversation_id"',
        '" OR 0 AND EXISTS (SELECT 1 FROM segments s WHERE s.conversation_id = messages.conversation_id"',
    ),
    M(
        "memory-write-while-private",
        PRIVACY,
        "adapters/storage/memory.py",
        'async with lasting_tx(self._db, origin, "memory") as db:',
        "async with self._db.tx() as db:",
    ),
    M(
        "goal-update-while-private",  # issue 12 gap
        PRIVACY,
        "adapters/storage/memory.py",
        'async with lasting_tx(self._db, origin, "change to a goal") as db:',
        "async with self._db.tx() as db:",
    ),
    M(
        "lasting-write-guard-refuses-nothing",
        PRIVACY,
        "adapters/storage/guard.py",
        '        "SELECT 1 FROM segments WHERE conversation_id = ? AND ended_at IS NULL LIMIT 1", (origin,)',
        '        "SELECT 1 FROM segments WHERE 0 AND conversation_id = ? AND ended_at IS NULL LIMIT 1", (origin,)',
    ),
    M(
        "link-guard-refuses-nothing",
        PRIVACY,
        "adapters/storage/guard.py",
        '        f" WHERE s.ended_at IS NULL AND c.person_id IN ({marks}) LIMIT 1",',
        '        f" WHERE 0 AND s.ended_at IS NULL AND c.person_id IN ({marks}) LIMIT 1",',
    ),
    M(
        "forget-while-private",
        PRIVACY,
        "adapters/storage/memory.py",
        "    async def forget_pad_entry(self, person_id: int, origin: int, entry_id: int) -> int:\n"
        '        async with lasting_tx(self._db, origin, "change to memory") as db:',
        "    async def forget_pad_entry(self, person_id: int, origin: int, entry_id: int) -> int:\n"
        "        async with self._db.tx() as db:",
    ),
    M(
        "followup-update-while-private",
        PRIVACY,
        "adapters/storage/memory.py",
        'async with lasting_tx(self._db, origin, "change to a follow-up") as db:',
        "async with self._db.tx() as db:",
    ),
    M(
        "segments-left-open-at-start",
        PRIVACY,
        "adapters/storage/modes.py",
        'f" WHERE ended_at IS NULL{scope}",',
        'f" WHERE 0{scope}",',
    ),
    M(
        "restart-message-lands-in-normal-mode",
        PRIVACY,
        "adapters/storage/modes.py",
        'return row["id"] if sent_at < row["restart_at"] else None',
        "return None",
    ),
    M(
        "forget-private-deletes-nothing",
        PRIVACY,
        "adapters/storage/privacy.py",
        '"DELETE FROM segments WHERE conversation_id = ?"',
        '"DELETE FROM segments WHERE conversation_id = ? AND 0"',
    ),
    M(
        "expired-segment-deletion-owes-no-checkpoint",
        PRIVACY,
        "adapters/storage/modes.py",
        "            deleted = cur.rowcount\n            if deleted:\n                await owe_checkpoint(db)",
        "            deleted = cur.rowcount",
    ),
    M(
        "store-secure-delete-off",
        PRIVACY,
        "adapters/storage/database.py",
        '    await db.execute("PRAGMA secure_delete = ON")\n',
        "",
    ),
    M(
        "backup-keeps-segments",
        PRIVACY,
        "adapters/storage/backup.py",
        '_PRIVATE_TABLES = ("segments", "crossings")',
        '_PRIVATE_TABLES = ("crossings",)',
    ),
    M(
        "restore-resurrects-expired-artifacts",  # issue 12 gap
        PRIVACY,
        "adapters/storage/backup.py",
        'db.execute("DELETE FROM artifacts WHERE expires_at IS NOT NULL AND expires_at <= ?", (now,))',
        "pass",
    ),
    # --- Telegram: secrets and confirmation order ------------------------------------------
    M(
        "telegram-core-failure-keeps-passphrase",
        PRIVACY,
        "adapters/telegram/adapter.py",
        "reply = Reply(HANDLER_FAILED, delete_inbound=carries_secret(inbound.text))",
        "reply = Reply(HANDLER_FAILED)",
    ),
    M(
        "telegram-passphrase-never-deleted",
        PRIVACY,
        "adapters/telegram/adapter.py",
        "if reply.delete_inbound and not await delivery.delete(message.chat_id, message.message_id):",
        "if reply.delete_inbound and not False:",
    ),
    M(
        "telegram-no-delete-note",
        PRIVACY,
        "adapters/telegram/adapter.py",
        'text = f"{text}\\n\\n{DELETE_SECRET_NOTE}"',
        "text = text",
    ),
    M(
        "telegram-token-in-logs",
        PRIVACY,
        "adapters/telegram/adapter.py",
        "                record.msg, record.args = message, None",
        "                pass",
    ),
    M(
        "telegram-confirmed-at-dispatch",  # issue 12 gap: confirmed before it was handled
        RELIABILITY,
        "adapters/telegram/adapter.py",
        "        self._ledger.begin(update.update_id)\n        chat = update.effective_chat",
        "        self._ledger.finish(update.update_id)\n        chat = update.effective_chat",
    ),
    M(
        "telegram-stored-before-handled",  # issue 12 gap: stored before it was handled
        RELIABILITY,
        "adapters/telegram/adapter.py",
        "                await self._process(update)\n                queue.popleft()\n"
        "                self._ledger.finish(update.update_id)\n                self._progress.set()\n"
        "                await self._persist()",
        "                self._ledger.finish(update.update_id)\n                await self._persist()\n"
        "                await self._process(update)\n                queue.popleft()\n"
        "                self._progress.set()",
    ),
    M(
        "telegram-redelivery-handled-again",
        RELIABILITY,
        "adapters/telegram/adapter.py",
        "fresh = [u for u in updates if not self._ledger.is_known(u.update_id)]",
        "fresh = list(updates)",
    ),
    M(
        "telegram-ledger-settles-past-a-running-update",
        RELIABILITY,
        "adapters/telegram/ledger.py",
        "settled = [i for i in self.above if floor is None or i < floor]",
        "settled = list(self.above)",
    ),
    # --- Discord: secrets, mentions, nonces ----------------------------------------------------
    M(
        "discord-core-failure-keeps-passphrase",  # issue 12 gap
        PRIVACY,
        "adapters/discord/adapter.py",
        "reply = Reply(HANDLER_FAILED, delete_inbound=carries_secret(inbound.text))",
        "reply = Reply(HANDLER_FAILED)",
    ),
    M(
        "discord-passphrase-never-deleted",
        PRIVACY,
        "adapters/discord/adapter.py",
        "        if reply.delete_inbound:\n            # The message carried the passphrase",
        "        if False:\n            # The message carried the passphrase",
    ),
    M(
        "discord-no-delete-note",
        PRIVACY,
        "adapters/discord/adapter.py",
        'text = f"{text}\\n\\n{DELETE_SECRET_NOTE}"',
        "text = text",
    ),
    M(
        "discord-mentions-allowed",
        RELIABILITY,
        "adapters/discord/client.py",
        "NO_MENTIONS = discord.AllowedMentions.none()",
        "NO_MENTIONS = discord.AllowedMentions.all()",
    ),
    M(
        "discord-retry-without-nonce",
        RELIABILITY,
        "adapters/discord/adapter.py",
        "nonce=part_nonce(delivery.nonce, index),",
        "nonce=None,",
    ),
    # --- the real-server proof's wire tap (bench/_wire_tap.py, issue 29): it passes what it carries ----
    M(
        "wire-tap-gathers-the-answer-first",  # a stream then reaches the companion only at its end
        RELIABILITY,
        "bench/_wire_tap.py",
        "                async for piece in upstream.content.iter_any():",
        "                for piece in [await upstream.read()]:",
        also=("tests/bench/test_wire_tap.py",),
    ),
    M(
        "wire-tap-drops-the-content-type",  # the tap of old: the companion never saw a stream
        RELIABILITY,
        "bench/_wire_tap.py",
        "                if name.lower() not in _HOP:",
        '                if name.lower() not in _HOP | {"content-type"}:',
        also=("tests/bench/test_wire_tap.py",),
    ),
    M(
        "wire-tap-records-no-stream",  # every stream recorded as an unreadable whole answer
        RELIABILITY,
        "bench/_wire_tap.py",
        '            record = StreamRecord() if content_type.startswith("text/event-stream") else None',
        "            record = None",
        also=("tests/bench/test_wire_tap.py",),
    ),
    M(
        "wire-tap-joins-a-repeated-name",  # llama-cpp-python names a forced call in every chunk
        RELIABILITY,
        "bench/_wire_tap.py",
        '        current.name = current.name or function.get("name") or ""',
        '        current.name += function.get("name") or ""',
        also=("tests/bench/test_wire_tap.py",),
    ),
    # --- the gateway's schedule (bot/) -------------------------------------------------------
    M(
        "gateway-expiry-sweep-not-scheduled",  # issue 12 gap
        PRIVACY,
        "bot/bootstrap.py",
        '        Job("expiry-sweep", settings.expiry_sweep_seconds, companion.sweep),\n',
        "",
        also=("tests/bot/test_gateway_sweep.py", "tests/bot/test_scheduler.py"),
    ),
    # --- quotes, edits and bursts (issue 15) ---------------------------------------------------
    M(
        "quote-reads-private-text",
        PRIVACY,
        "adapters/storage/quotes.py",
        "CASE WHEN {_READABLE} THEN m.text END AS text",
        "m.text AS text",
    ),
    M(
        "quote-reads-another-interval",
        PRIVACY,
        "adapters/storage/quotes.py",
        "(:s IS NOT NULL AND m.segment_id = :s)",
        "(m.segment_id IS NOT NULL)",
    ),
    M(
        "quote-matches-private-replies",
        PRIVACY,
        "adapters/storage/quotes.py",
        "AND m.kind = 'chat'\"\n            f\" AND {_READABLE}",
        "AND m.kind = 'chat'\"\n            f\" AND 1",
    ),
    M(
        "quote-unknown-included-in-direct-chat",
        PRIVACY,
        "core/turn/quotes.py",
        "    if not conversation.is_direct:\n        # The companion's own group replies",
        "    if True:\n        # The companion's own group replies",
    ),
    M(
        "quote-carries-secret",
        PRIVACY,
        "core/turn/quotes.py",
        "(carries_secret(quoted) or not quoted.strip())",
        "(not quoted.strip())",
    ),
    M(
        "edit-revives-expired-interval",
        PRIVACY,
        "adapters/storage/quotes.py",
        '    " (SELECT g.id FROM segments g WHERE g.id = m.segment_id AND (g.expires_at IS NULL OR g.expires_at > :now))))"',
        '    " (SELECT g.id FROM segments g WHERE g.id = m.segment_id)))"',
    ),
    M(
        "edit-indexes-private-text",
        PRIVACY,
        "migrations/0010_message_edits.sql",
        "WHEN new.mode = 'normal' AND new.segment_id IS NULL AND new.kind = 'chat'",
        "WHEN new.kind = 'chat'",
    ),
    M(
        "burst-answered-after-its-interval",
        PRIVACY,
        "core/turn/companion.py",
        "            if current.unreadable or current.segment_id != burst.state.segment_id:",
        "            if False:",
    ),
    M(
        "burst-spans-a-command",
        RELIABILITY,
        "core/turn/companion.py",
        "            await self._flush_burst(conversation.id)  # a burst never spans a command",
        "            pass",
    ),
    # --- the wall at the edges (issue 22): one gate, and the SQL behind it --------------------
    M(
        "gate-caught-up-command-runs-in-normal-mode",
        PRIVACY,
        "core/turn/companion.py",
        "if event.restarted is not None and not _private_mode_runs(event):",
        "if event.restarted is not None and event.kind is EventKind.MESSAGE:",
    ),
    M(
        "edit-typed-while-private-changes-the-normal-row",
        PRIVACY,
        "core/turn/edits.py",
        "    if stored.segment_id != state.segment_id:\n        if state.is_private:",
        "    if False:\n        if state.is_private:",
    ),
    M(
        "edit-sql-ignores-the-mode-it-is-made-in",
        PRIVACY,
        "adapters/storage/quotes.py",
        ' AND {_NOT_EXPIRED} AND {_EDITED_IN_ITS_OWN_MODE}",',
        ' AND {_NOT_EXPIRED}",',
    ),
    M(
        "unknown-command-answer-outside-its-interval",
        PRIVACY,
        "core/turn/companion.py",
        "turn, UNKNOWN_COMMAND.format(name=event.command.name), segment_id=state.segment_id",
        "turn, UNKNOWN_COMMAND.format(name=event.command.name)",
    ),
    M(
        "mistyped-answer-outside-its-interval",
        PRIVACY,
        "core/turn/companion.py",
        "turn, MISTYPED_LOOKALIKE, segment_id=state.segment_id, delete_inbound=True",
        "turn, MISTYPED_LOOKALIKE, delete_inbound=True",
    ),
    M(
        "delivery-outside-the-open-interval-accepted",
        PRIVACY,
        "migrations/0011_private_edges.sql",
        "WHERE s.conversation_id = new.conversation_id AND s.ended_at IS NULL AND s.id IS NOT new.segment_id",
        "WHERE 0",
    ),
    M(
        "mirror-notice-outside-the-open-interval",
        PRIVACY,
        "adapters/storage/outbox.py",
        'segment_id=open_segment["id"] if open_segment is not None else None,',
        "segment_id=None,",
    ),
    M(
        "outbox-due-picks-an-expired-interval",
        PRIVACY,
        "adapters/storage/outbox.py",
        '            f" AND {_INTERVAL_OPEN}"\n',
        "",
    ),
    M(
        "outbox-pending-of-sends-an-expired-interval",
        PRIVACY,
        "adapters/storage/outbox.py",
        'f" AND {_INTERVAL_OPEN} ORDER BY id",',
        '" ORDER BY id",',
    ),
    # --- the end of an interval ends what it shows (issue 29) --------------------------------------------
    M(
        "outbox-sends-a-closed-interval",
        PRIVACY,
        "adapters/storage/outbox.py",
        '" AND g.ended_at IS NULL AND (g.expires_at IS NULL OR g.expires_at > :now)))"',
        '" AND (g.expires_at IS NULL OR g.expires_at > :now)))"',
    ),
    M(
        "interval-end-leaves-what-was-shown",
        PRIVACY,
        "adapters/storage/outbox.py",
        'f" WHERE segment_id IN ({segments}) AND streamed_ids IS NOT NULL',
        'f" WHERE 0 AND segment_id IN ({segments}) AND streamed_ids IS NOT NULL',
    ),
    M(
        "interval-end-leaves-unsent-replies-pending",
        PRIVACY,
        "adapters/storage/outbox.py",
        "f\" WHERE segment_id IN ({segments}) AND status IN ('streaming', 'pending')\",",
        "f\" WHERE 0 AND segment_id IN ({segments}) AND status IN ('streaming', 'pending')\",",
    ),
    M(
        "valve-close-withdraws-nothing",
        PRIVACY,
        "adapters/storage/modes.py",
        '            await end_shown(db, "SELECT id FROM segments WHERE id = ? AND ended_at IS NULL", (segment_id,), now)\n',
        "",
    ),
    M(
        "normal-withdraws-nothing",
        PRIVACY,
        "adapters/storage/modes.py",
        "            await end_shown(\n"
        '                db, "SELECT id FROM segments WHERE conversation_id = ? AND ended_at IS NULL", (conversation_id,), now\n'
        "            )\n",
        "",
    ),
    M(
        "restart-close-withdraws-nothing",
        PRIVACY,
        "adapters/storage/modes.py",
        '            await end_shown(db, f"SELECT id FROM segments WHERE ended_at IS NULL{scope}", params, now or 0.0)\n',
        "",
    ),
    M(
        "expiry-deletion-withdraws-nothing",
        PRIVACY,
        "adapters/storage/modes.py",
        '            await end_shown(db, "SELECT id FROM segments WHERE expires_at IS NOT NULL AND expires_at <= ?", (now,), now)\n',
        "",
    ),
    M(
        "forget-private-withdraws-nothing",
        PRIVACY,
        "adapters/storage/privacy.py",
        '            await end_shown(db, "SELECT id FROM segments WHERE conversation_id = ?", (conversation_id,), now)\n',
        "",
    ),
    M(
        "reply-written-into-an-ended-interval",
        PRIVACY,
        "adapters/storage/timeline.py",
        '"SELECT 1 FROM segments WHERE id = ? AND ended_at IS NULL AND (expires_at IS NULL OR expires_at > ?)",',
        '"SELECT 1 WHERE ? IS NOT NULL AND ? IS NOT NULL",',
    ),
    M(
        "stream-opened-in-an-ended-interval",
        PRIVACY,
        "adapters/storage/outbox.py",
        "                if segment is None:\n                    raise IntervalEnded(",
        "                if segment is None and False:\n                    raise IntervalEnded(",
    ),
    M(
        "stream-shown-past-its-expiry",
        PRIVACY,
        "adapters/storage/outbox.py",
        "        return row is not None\n\n    async def retract(",
        "        return True\n\n    async def retract(",
    ),
    M(
        "stream-held-back-by-an-ended-interval",
        RELIABILITY,
        "adapters/storage/outbox.py",
        "AND e.id < d.id AND {_interval_open('e')})\",",
        'AND e.id < d.id)",',
    ),
    M(
        "stream-edited-past-its-expiry",
        PRIVACY,
        "core/delivery/streams.py",
        "        return None if reply.ends_at is None else reply.ends_at - self._now()",
        "        return None",
    ),
    M(
        "stream-request-not-cut-at-expiry",
        PRIVACY,
        "core/delivery/streams.py",
        "            bound = asyncio.timeout(left)",
        "            bound = asyncio.timeout(None)",
    ),
    M(
        "send-not-cut-at-expiry",
        PRIVACY,
        "core/delivery/ends.py",
        "                done, _ = await asyncio.wait({task}, timeout=left)",
        "                done, _ = await asyncio.wait({task}, timeout=None)",
    ),
    M(
        "send-not-cancelled-when-the-interval-ends",
        PRIVACY,
        "core/delivery/ends.py",
        "            send.end()",
        "            pass",
    ),
    M(
        "send-picked-before-the-end-starts-after-it",
        PRIVACY,
        "core/delivery/ends.py",
        "            if ends is not None and self.ends(delivery.conversation_id) != ends:",
        "            if False:",
    ),
    M(
        "outbox-not-told-that-an-interval-ended",
        PRIVACY,
        "bot/bootstrap.py",
        "        ended=outbox.interval_ended if outbox is not None else None,",
        "        ended=None,",
    ),
    M(
        "valve-leave-tells-no-one",
        PRIVACY,
        "core/privacy/valve.py",
        "        if closed > 0:\n            self._tell_ended(conversation.id)",
        "        if False:\n            self._tell_ended(conversation.id)",
    ),
    M(
        "withdrawn-line-counted-in-metrics",
        PRIVACY,
        "core/delivery/outbox.py",
        "        if delivery.retracts:  # what a private answer showed, withdrawn",
        "        if False:  # what a private answer showed, withdrawn",
    ),
    M(
        "withdrawn-line-kept-once-sent",
        PRIVACY,
        "adapters/storage/outbox.py",
        '"DELETE FROM deliveries WHERE id = ? AND retracts = 1"',
        '"DELETE FROM deliveries WHERE id = ? AND retracts = 1 AND 0"',
    ),
    M(
        "backup-keeps-withdrawn-lines",
        PRIVACY,
        "adapters/storage/backup.py",
        '        db.execute("DELETE FROM deliveries WHERE retracts = 1")',
        '        db.execute("DELETE FROM deliveries WHERE retracts = 1 AND 0")',
    ),
    M(
        "answer-of-an-open-interval-withdrawn",
        PRIVACY,
        "adapters/storage/outbox.py",
        'if row["status"] not in ("streaming", "pending") or (row["open"] and not row["retracts"]):',
        'if row["status"] not in ("streaming", "pending"):',
    ),
    M(
        "turn-apologises-once-its-interval-ended",
        PRIVACY,
        "core/turn/companion.py",
        "            reply = await self._dispatch(turn, event)\n        except IntervalEnded:",
        "            reply = await self._dispatch(turn, event)\n        except ModuleNotFoundError:",
    ),
    M(
        "turn-runs-on-once-its-stream-ended",
        RELIABILITY,
        "core/turn/streaming.py",
        "        if self._stream is not None and self._stream.ended:",
        "        if False:",
    ),
    M(
        "sweep-leaves-withdrawn-lines-unsent",
        PRIVACY,
        "core/turn/companion.py",
        "        if deleted and self.outbox is not None:\n            self.outbox.interval_ended()",
        "        if deleted and self.outbox is not None:\n            pass",
    ),
    M(
        "web-page-not-told-at-expiry",
        PRIVACY,
        "adapters/web/stream.py",
        "                    event = await asyncio.wait_for(anext(page), _until_end(mode, now))",
        "                    event = await asyncio.wait_for(anext(page), None)",
    ),
    M(
        "web-end-read-as-still-private",
        PRIVACY,
        "core/privacy/valve.py",
        "        return segment if ends is None or self._clock.now() < ends else None",
        "        return segment",
    ),
    M(
        "web-withdrawn-bubble-drawn-as-a-reply",
        PRIVACY,
        "adapters/web/chat.py",
        "                RETRACTION if delivery.retracts else delivery.kind,",
        "                delivery.kind,",
    ),
    M(
        "restart-answer-kept-in-the-closed-interval",
        RELIABILITY,
        "core/turn/recovery.py",
        "            segment_id=answer_segment,\n            answers=message_id if kind",
        "            segment_id=answer_segment if answer_segment is not None else closed.segment_id,\n"
        "            answers=message_id if kind",
    ),
    M(
        "mirror-copies-the-quote-of-a-private-message",
        PRIVACY,
        "adapters/storage/bindings.py",
        "'you: ' || coalesce(u.said, u.text) || char(10)",
        "'you: ' || u.text || char(10)",
    ),
    M(
        "mirror-words-not-kept-apart-from-the-quote",
        PRIVACY,
        "core/turn/quotes.py",
        "    return Composed(text, said if lines else None, unread)",
        "    return Composed(text, None, unread)",
    ),
    M(
        "forward-of-a-private-message-read-by-its-id",
        PRIVACY,
        "core/turn/quotes.py",
        "            return copy.PLACEHOLDER if found.text is None else None",
        "            return None",
    ),
    M(
        "forward-sent-in-a-private-interval-read",
        PRIVACY,
        "core/turn/quotes.py",
        "    if message.forwarded_at is not None and await store.private_interval_at(",
        "    if False and await store.private_interval_at(",
    ),
    M(
        "forward-of-a-message-not-kept-read",
        PRIVACY,
        "core/turn/quotes.py",
        "        if not any(_within(message.text, text) for text in readable):",
        "        if False:",
    ),
    M(
        "telegram-forward-origin-not-named",
        PRIVACY,
        "adapters/telegram/context.py",
        "        if sender is not None and _may_be_from_our_chat(origin, sender, bot_id):",
        "        if False:",
    ),
    M(
        "discord-forward-origin-not-named",
        PRIVACY,
        "adapters/discord/context.py",
        '            "forwarded_chat_id": str(reference.channel_id),',
        '            "forwarded_chat_id": None,',
    ),
    M(
        "mirror-copies-the-placeholder-of-a-forward",
        PRIVACY,
        "core/turn/quotes.py",
        "    said = copy.FORWARD_UNREAD_SAID if unread else words",
        "    said = words",
    ),
    M(
        "forward-not-read-never-told",
        RELIABILITY,
        "core/turn/companion.py",
        "            told = (copy.FORWARD_NOT_READ,)",
        "            told = ()",
    ),
    M(
        "telegram-edit-read-at-its-message-date",
        RELIABILITY,
        "adapters/telegram/adapter.py",
        "        if edited and message.edit_date is not None:",
        "        if False:",
    ),
    M(
        "discord-edit-read-at-its-message-date",
        RELIABILITY,
        "adapters/discord/adapter.py",
        "        if edited and message.edited_at is not None:",
        "        if False:",
    ),
    M(
        "reply-delivery-depends-on-a-registered-sender",
        RELIABILITY,
        "core/turn/responder.py",
        "        return self._platforms is None or platform in self._platforms",
        "        return self._outbox.serves(platform)",
    ),
    M(
        "chat-move-waits-on-its-lane",
        RELIABILITY,
        "core/turn/companion.py",
        "        return await self._people.chat_moved(platform, old_chat_id, new_chat_id)",
        "        return await self._lanes.run(\n            _key_of(platform, old_chat_id),\n"
        "            functools.partial(self._people.chat_moved, platform, old_chat_id, new_chat_id),\n        )",
    ),
    M(
        "stop-leaves-held-bursts-unanswered",
        RELIABILITY,
        "core/turn/companion.py",
        "            self._burst_quiet(conversation_id, generation)\n\n",
        "            pass\n\n",
    ),
    M(
        "stop-cancels-sends-in-flight",
        RELIABILITY,
        "core/delivery/outbox.py",
        "        if self._handed:\n            await asyncio.wait(set(self._handed), timeout=max(deadline - loop.time(), 0.0))",
        "        for task in list(self._handed):\n            task.cancel()",
    ),
    M(
        "edit-answered-when-unchanged",
        RELIABILITY,
        "adapters/storage/quotes.py",
        " AND m.text IS NOT :t",
        "",
    ),
    # --- the HTTP service (issue 23): metrics that count no private turn, sign-in, requests -------------
    M(
        "metrics-private-turn-recorded",
        PRIVACY,
        "core/turn/responder.py",
        "recorder = None if state.is_private else RunRecorder(self._clock, conversation.id, self._metrics)",
        "recorder = RunRecorder(self._clock, conversation.id, self._metrics)",
    ),
    M(
        "metrics-private-reply-write-timed",
        PRIVACY,
        "core/turn/responder.py",
        "        if run is not None:  # a normal turn's reply",
        "        if True:  # a normal turn's reply",
    ),
    M(
        "metrics-private-delivery-counted",
        PRIVACY,
        "core/delivery/outbox.py",
        "        if delivery.in_segment:\n            return\n",
        "        if False:\n            return\n",
    ),
    M(
        "metrics-private-delivery-not-marked",
        PRIVACY,
        "adapters/storage/outbox.py",
        'in_segment=bool(row["in_segment"]),',
        "in_segment=False,",
    ),
    M(
        "metrics-private-decision-counted",
        PRIVACY,
        "core/proactive/service.py",
        "                result.private += 1\n",
        "                result.private += 1\n                self._counted(decision)\n",
    ),
    M(
        "metrics-label-any-value",
        PRIVACY,
        "adapters/web/metrics.py",
        "    return value if value in allowed else OTHER",
        "    return value",
    ),
    M(
        "web-sign-in-code-reusable",
        PRIVACY,
        "adapters/storage/web.py",
        '"DELETE FROM web_login_codes WHERE code_hash = ? AND expires_at > ? RETURNING id"',
        '"SELECT id FROM web_login_codes WHERE code_hash = ? AND expires_at > ?"',
    ),
    M(
        "web-sign-in-code-never-expires",
        PRIVACY,
        "adapters/storage/web.py",
        'RETURNING id", (code_hash, now)',
        'RETURNING id", (code_hash, 0.0)',
    ),
    M(
        "web-signed-out-session-kept-in-memory",
        PRIVACY,
        "adapters/web/auth.py",
        "            self._known = OrderedDict((k, v) for k, v in self._known.items() if v[0] != session.id)\n",
        "",
    ),
    M(
        "web-known-session-outlives-its-expiry",
        PRIVACY,
        "adapters/web/auth.py",
        "min(now + SESSION_RECHECK_SECONDS, stored.expires_at)",
        "now + SESSION_RECHECK_SECONDS",
    ),
    M(
        "web-session-never-expires",
        PRIVACY,
        "adapters/storage/web.py",
        'WHERE token_hash = ? AND expires_at > ?", (token_hash, now)',
        'WHERE token_hash = ? AND expires_at > ?", (token_hash, 0.0)',
    ),
    M(
        "web-sign-in-code-stored-plain",
        PRIVACY,
        "adapters/web/auth.py",
        'await store.save_login_code(secret_hash(code, "login"), now, now + CODE_SECONDS)',
        "await store.save_login_code(code, now, now + CODE_SECONDS)",
    ),
    M(
        "web-sign-in-not-rate-limited",
        PRIVACY,
        "adapters/web/auth.py",
        "        if locked is not None:",
        "        if False:",
    ),
    M(
        "web-session-cookie-readable-by-scripts",
        PRIVACY,
        "adapters/web/auth.py",
        '            path="/",\n            httponly=True,',
        '            path="/",\n            httponly=False,',
    ),
    M(
        "web-csrf-unchecked",
        PRIVACY,
        "adapters/web/auth.py",
        "        if not given or not any(hmac.compare_digest(given.encode(), token.encode()) for token in expected):",
        "        if False:",
    ),
    M(
        "web-host-unchecked",
        PRIVACY,
        "adapters/web/service.py",
        '        if not self.allowed.allows_host(request.headers.get("Host")):',
        "        if False:",
    ),
    M(
        "web-origin-unchecked",
        PRIVACY,
        "adapters/web/service.py",
        '        if origin is not None and not self.allowed.allows_origin(origin, request.headers.get("Host")):',
        "        if False:",
    ),
    M(
        "web-origin-port-ignored",
        PRIVACY,
        "adapters/web/hosts.py",
        '        return (origin_name.rstrip("."), origin_port or default) == (host_name.rstrip("."), host_port or default)',
        '        return origin_name.rstrip(".") == host_name.rstrip(".")',
    ),
    M(
        "web-query-string-logged",
        PRIVACY,
        "adapters/web/service.py",
        "            request.rel_url.path,",
        "            request.path_qs,",
    ),
    M(
        "web-cors-header-kept",
        PRIVACY,
        "adapters/web/service.py",
        "        del response.headers[name]  # no CORS, whatever a handler set",
        "        pass",
    ),
    M(
        "web-exposed-without-allowed-hosts",
        PRIVACY,
        "bot/settings.py",
        "if self.http_port is not None and not self.http_allowed_host_set and not is_loopback(self.http_host):",
        "if False:",
        also=("tests/bot/test_settings.py",),
    ),
    M(
        "backup-keeps-web-sessions",
        PRIVACY,
        "adapters/storage/backup.py",
        "    for table in _PRIVATE_TABLES + _CREDENTIAL_TABLES:",
        "    for table in _PRIVATE_TABLES:",
    ),
    M(
        "web-takes-requests-after-the-stop",
        RELIABILITY,
        "adapters/web/service.py",
        "        if self.stopping and request.method in UNSAFE_METHODS:",
        "        if False:",
    ),
    M(
        "readyz-ignores-a-stale-telegram-poll",
        RELIABILITY,
        "adapters/telegram/adapter.py",
        "        if waited > self._stale_after:",
        "        if False:",
    ),
    M(
        "readyz-ignores-a-discord-disconnect",
        RELIABILITY,
        "adapters/discord/adapter.py",
        '        if self._down:\n            return "gateway disconnected; reconnecting"',
        '        if False:\n            return "gateway disconnected; reconnecting"',
    ),
    M(
        "readyz-ignores-a-failed-database-write",
        RELIABILITY,
        "adapters/web/operators.py",
        '            self._failure = f"not writable ({type(exc).__name__})"',
        "            self._failure = None",
    ),
    M(
        "livez-ignores-a-stuck-core-loop",
        RELIABILITY,
        "adapters/web/service.py",
        '        return f"the event loop has not answered for {waited:.0f} s" if waited > self._live_limit else None',
        "        return None",
    ),
    M(
        "web-owner-not-linked",
        RELIABILITY,
        "core/turn/people.py",
        "        self._owner = owner_accounts | {WEB_OWNER} if web_owner else owner_accounts",
        "        self._owner = owner_accounts",
    ),
    # --- the model's answers and tool support (issue 25) -----------------------------------------------
    M(
        "answer-tool-syntax-shown-as-reply",
        RELIABILITY,
        "core/turn/responder.py",
        "                if only_tool_call(text, self._tools.names) or",
        "                if False or",
    ),
    M(
        "answer-silence-with-tools-shown-as-reply",  # llama-cpp-python's chatml-function-calling ends a message empty
        RELIABILITY,
        "core/turn/responder.py",
        " or (not text and request.tools):",
        " or False:",
    ),
    M(
        "answer-tool-syntax-asked-again-with-tools",
        RELIABILITY,
        "core/turn/responder.py",
        "                    asked_without_tools = True\n"
        "                    request = _round_request(messages, offered, last=True, private=private)",
        "                    asked_without_tools = True\n"
        "                    request = _round_request(messages, offered, last=False, private=private)",
    ),
    M(
        "answer-tool-syntax-recognised-anywhere",  # "only a tool call": a reply that mentions one is sent
        RELIABILITY,
        "core/memory/tool_syntax.py",
        "            return False\n        found, rest = True, after.strip()",
        "            return found\n        found, rest = True, after.strip()",
    ),
    M(
        "tools-refusal-forgotten-after-the-turn",
        RELIABILITY,
        "core/memory/tools.py",
        "        self._enabled = False\n",
        "        pass\n",
    ),
    M(
        "tools-offered-although-off",
        RELIABILITY,
        "core/turn/responder.py",
        "tuple(self._tools.tools_for(conversation, state)) if self._tool_support.enabled_for(private=private) else ()",
        "tuple(self._tools.tools_for(conversation, state))",
    ),
    M(
        "help-silent-when-tools-are-off",
        RELIABILITY,
        "core/commands/registry.py",
        "    if not services.tools.enabled:",
        "    if False:",
    ),
    M(
        "tool-schema-says-no-length",  # a grammar-bound model then writes what the handler refuses
        RELIABILITY,
        "core/memory/operations.py",
        '    return {"type": "string", "maxLength": limit}',
        '    return {"type": "string"}',
    ),
    # --- companion doctor (issue 25): it never writes, never prints a secret, and probes for real -------
    M(
        "doctor-leaves-wal-files-behind",
        RELIABILITY,
        "adapters/storage/inspection.py",
        '    mode = "mode=ro" if wal.exists() else "mode=ro&immutable=1"',
        '    mode = "mode=ro"',
        also=("tests/bot/test_doctor.py",),
    ),
    M(
        "doctor-prints-a-secret-a-server-echoed",
        RELIABILITY,
        "bot/doctor.py",
        "            text = text.replace(secret, WITHHELD)",
        "            pass",
        also=("tests/bot/test_doctor.py",),
    ),
    M(
        "doctor-tool-probe-not-forced",
        RELIABILITY,
        "adapters/llm/probe.py",
        "force_tool=PROBE_TOOL.name",
        "force_tool=None",
        also=("tests/bot/test_doctor.py",),
    ),
    M(
        "doctor-words-with-tools-unchecked",
        RELIABILITY,
        "adapters/llm/probe.py",
        "        if not text or only_tool_call(text, {PROBE_TOOL.name}):",
        "        if False:",
        also=("tests/bot/test_doctor.py",),
    ),
    M(
        "doctor-context-window-unchecked",
        RELIABILITY,
        "bot/doctor.py",
        "    if size < need:",
        "    if False:",
        also=("tests/bot/test_doctor.py",),
    ),
    M(
        "doctor-intent-unchecked",
        RELIABILITY,
        "adapters/probes.py",
        "    if flags & (GATEWAY_MESSAGE_CONTENT | GATEWAY_MESSAGE_CONTENT_LIMITED):",
        "    if True:",
        also=("tests/bot/test_doctor.py",),
    ),
    M(
        "provider-tools-refusal-unclassified",
        RELIABILITY,
        "adapters/llm/openai_compat.py",
        "            if request.tools and code in _TOOLS_REFUSED_STATUSES and _TOOLS_REFUSED.search(error_text):",
        "            if False:",
    ),
    # --- streaming: the web chat (adapters/web/chat.py, adapters/web/static/app.js, issue 24) ---------
    M(
        "web-stream-not-registered",  # the web chat's replies would only ever go whole
        RELIABILITY,
        "adapters/web/chat.py",
        "            self._outbox.register_streamer(self)\n",
        "            pass\n",
    ),
    M(
        "web-stream-outlives-the-chat",  # a closed chat would still be asked to show replies while written
        RELIABILITY,
        "adapters/web/chat.py",
        "            self._outbox.unregister_streamer(self)\n",
        "            pass\n",
    ),
    M(
        "web-stream-final-not-in-its-bubble",  # the final would be a second bubble under the partial one
        RELIABILITY,
        "adapters/web/chat.py",
        "                stream=delivery.streamed,\n",
        "                stream=(),\n",
    ),
    M(
        "web-stream-partial-before-the-page-began",  # a page opened mid-stream would show the answer twice
        RELIABILITY,
        "adapters/web/chat.py",
        "        if event.kind == PARTIAL and not self._begun:",
        "        if False:",
    ),
    M(
        "web-stream-shows-the-unfinished-grapheme",  # a flag or a family emoji would flicker in halves
        RELIABILITY,
        "adapters/web/chat.py",
        "        return stream_pieces(text, STREAM_LIMIT, final=final)",
        "        return stream_pieces(text, STREAM_LIMIT, final=True)",
    ),
    M(
        "web-stream-final-drawn-as-a-new-bubble",  # the page's script: the final under the partial text
        RELIABILITY,
        "adapters/web/static/app.js",
        "    var li = ids.length ? bubble(ids[0]) : null;",
        "    var li = null;",
        also=("tests/bot/test_web_browser_wire.py",),
    ),
    M(
        "web-stream-final-unformatted",  # the page's script: the final drawn as written, markers and all
        RELIABILITY,
        "adapters/web/static/app.js",
        "      draw(li, data.text, data.format);",
        "      li.textContent = data.text;",
        also=("tests/bot/test_web_browser_wire.py",),
    ),
    M(
        "web-stream-typing-never-shown",  # the page's script: nothing but silence until the first words
        RELIABILITY,
        "adapters/web/static/app.js",
        "    shown(li);\n    typing(true);",
        "    shown(li);",
        also=("tests/bot/test_web_browser_wire.py",),
    ),
    M(
        "web-reply-drawn-as-the-models-html",  # a reply's <script> would be markup (the CSP still blocks it)
        RELIABILITY,
        "adapters/web/formatting.py",
        'out.append(html.escape(units[2 * at : 2 * end].decode("utf-16-le", errors="replace"), quote=True))',
        'out.append(units[2 * at : 2 * end].decode("utf-16-le", errors="replace"))',
    ),
    # --- streaming: Telegram (issue 24) --------------------------------------------------------------
    M(
        "telegram-stream-not-modified-is-an-error",
        RELIABILITY,
        "adapters/telegram/streaming.py",
        "            if not_modified(exc):\n                return",
        "            if False:\n                return",
    ),
    M(
        "telegram-stream-429-stops-the-stream",
        RELIABILITY,
        "adapters/telegram/streaming.py",
        "    if isinstance(exc, RetryAfter):\n        return DeliveryThrottled(retry_after_seconds(exc))",
        "    if False:\n        return DeliveryThrottled(retry_after_seconds(exc))",
    ),
    M(
        "telegram-stream-typing-not-stopped-by-the-first-piece",
        RELIABILITY,
        "adapters/telegram/streaming.py",
        "        self._first_shown(message.chat_id)",
        "        pass",
    ),
    M(
        "telegram-stream-group-reply-quotes-nothing",
        RELIABILITY,
        "adapters/telegram/streaming.py",
        "        reply_to = quotable(target.reply_to) if index == 0 else None",
        "        reply_to = None",
    ),
    M(
        "telegram-streamer-not-registered",
        RELIABILITY,
        "adapters/telegram/adapter.py",
        "            self._outbox.register_streamer(self._streamer)",
        "            pass",
    ),
    M(
        "telegram-streamed-reply-posted-again-not-edited",
        RELIABILITY,
        "adapters/telegram/adapter.py",
        "            if delivery.streamed:",
        "            if False:",
    ),
    M(
        "telegram-streamed-final-rendered-whole-not-per-piece",
        RELIABILITY,
        "adapters/telegram/formatting.py",
        "    return tuple(part for piece in pieces for part in telegram_parts(piece, limit))",
        "    return telegram_parts(markdown, limit)",
    ),
    M(
        "telegram-streamed-final-not-modified-is-an-error",
        RELIABILITY,
        "adapters/telegram/delivery.py",
        '            if "message is not modified" in exc.message.lower():',
        "            if False:",
    ),
    M(
        "telegram-streamed-final-from-the-first-part-again",
        RELIABILITY,
        "adapters/telegram/delivery.py",
        "        for number in range(start, len(parts)):",
        "        for number in range(0, len(parts)):",
    ),
    M(
        "telegram-streamed-leftover-messages-kept",
        RELIABILITY,
        "adapters/telegram/delivery.py",
        "            await self.delete(int(chat_id), int(message_id))",
        "            pass",
    ),
    M(
        "telegram-streamed-deleted-message-fails-the-reply",
        RELIABILITY,
        "adapters/telegram/delivery.py",
        "                return False\n            raise\n        return True",
        "                raise\n            raise\n        return True",
    ),
    M(
        "telegram-typing-not-held-for-a-burst",
        RELIABILITY,
        "adapters/telegram/adapter.py",
        "            self._typing_until[message.chat_id] = self._monotonic() + self._typing_hold",
        "            self._typing_done(message.chat_id)",
        also=(
            "tests/bot/test_streaming_telegram_wire.py"
            "::test_a_stop_mid_stream_lets_the_answer_finish_within_the_grace_and_sends_it_once",
        ),
    ),
    # --- streaming: the model link (adapters/llm/streaming.py, adapters/llm/openai_compat.py) ------------
    M(
        "stream-tool-arguments-last-piece-only",
        RELIABILITY,
        "adapters/llm/streaming.py",
        "            current.arguments.append(arguments_text(function.arguments))",
        "            current.arguments[:] = [arguments_text(function.arguments)]",
    ),
    M(
        "stream-ollama-calls-numbered-0-merged",
        RELIABILITY,
        "adapters/llm/streaming.py",
        "        if current is not None and delta.id and current.id and delta.id != current.id and function.name:",
        "        if False:",
    ),
    M(
        "stream-tool-call-start-not-said",
        RELIABILITY,
        "adapters/llm/streaming.py",
        "    if began:\n        await partial(Partial(assembly.text, calling=True))",
        "    if False:\n        await partial(Partial(assembly.text, calling=True))",
    ),
    M(
        "stream-usage-not-kept",
        RELIABILITY,
        "adapters/llm/streaming.py",
        "        if chunk.usage is not None:\n            self.usage = chunk.usage",
        "        if False:\n            self.usage = chunk.usage",
    ),
    M(
        "stream-length-not-truncated",
        RELIABILITY,
        "adapters/llm/streaming.py",
        '            truncated=self.finish_reason == "length",',
        "            truncated=False,",
    ),
    M(
        "stream-answer-without-finish-accepted",  # Ollama's failed model would read as a shorter answer
        RELIABILITY,
        "adapters/llm/streaming.py",
        "    if assembly.finish_reason is None:",
        "    if False:",
    ),
    M(
        "stream-error-event-ignored",
        RELIABILITY,
        "adapters/llm/streaming.py",
        "    if chunk.error is not None:",
        "    if False:",
    ),
    M(
        "stream-error-field-ignored",  # llama.cpp of early 2025: `error:` then `data: [DONE]`
        RELIABILITY,
        "adapters/llm/streaming.py",
        '        if line.startswith("error:"):',
        '        if line.startswith("never:"):',
    ),
    M(
        "stream-keepalive-comment-read-as-data",
        RELIABILITY,
        "adapters/llm/streaming.py",
        '        if line.startswith("data:"):\n            data.append(line[5:].removeprefix(" "))',
        '        if line.startswith(("data:", ":")):\n            data.append(line[5:].removeprefix(" "))',
    ),
    M(
        "stream-surrogate-pair-not-joined",
        RELIABILITY,
        "adapters/llm/streaming.py",
        '        if "\\ud800" <= text[-1] <= "\\udbff":',
        "        if False:",
    ),
    M(
        "stream-lone-surrogate-kept",  # a text that cannot be encoded: no platform, no database takes it
        RELIABILITY,
        "adapters/llm/streaming.py",
        "    if not _SURROGATE.search(text):\n        return text",
        "    if True:\n        return text",
    ),
    M(
        "stream-not-remembered-as-not-streaming",
        RELIABILITY,
        "adapters/llm/learned.py",
        "        learned.setdefault(trait, why)\n",
        "        pass\n",
    ),
    M(
        "stream-one-piece-answer-read-as-events",
        RELIABILITY,
        "adapters/llm/openai_compat.py",
        '            if not response.headers.get("content-type", "").startswith("text/event-stream"):',
        "            if False:",
    ),
    M(
        "stream-4xx-held-against-streaming-before-the-whole-answer",
        RELIABILITY,
        "adapters/llm/openai_compat.py",
        '            return _Unstreamed(f"it failed a streamed request with {exc.status}", request)',
        '            self._traits.refused(stream_trait(request), request, "refused")\n'
        '            return _Unstreamed(f"it failed a streamed request with {exc.status}", request)',
    ),
    M(
        "stream-image-refusal-not-streamed-again",
        RELIABILITY,
        "adapters/llm/openai_compat.py",
        "                return await self._complete_streamed(without_images(request), partial)",
        '                return _Unstreamed("images", request)',
    ),
    M(
        "stream-too-long-in-stream-unclassified",  # the core's retry with half the window never comes
        RELIABILITY,
        "adapters/llm/openai_compat.py",
        "        if _TOO_LONG.search(exc.reported):",
        "        if False:",
    ),
    M(
        "stream-timeout-bounds-the-whole-answer",
        RELIABILITY,
        "adapters/llm/openai_compat.py",
        "                assembly = await read_stream(paced_lines(response.aiter_bytes()), sink)",
        "                assembly = await asyncio.wait_for(\n"
        "                    read_stream(paced_lines(response.aiter_bytes()), sink), self._timeout\n"
        "                )",
    ),
    M(
        "stream-broken-answer-asked-again",  # the words shown would be shown a second time
        RELIABILITY,
        "adapters/llm/openai_compat.py",
        "                # Not retried: the answer is on screen already, and a second one would double it.\n",
        "                if isinstance(exc, httpx.RemoteProtocolError):\n"
        "                    return await self._complete_streamed(request, partial)\n",
    ),
    M(
        "stream-server-error-text-in-the-exception",  # the error may quote the model's words
        PRIVACY,
        "adapters/llm/openai_compat.py",
        'raise ProviderBadResponse(f"{self._where} streamed something that is not an answer: {exc}") from exc',
        'raise ProviderBadResponse(f"{self._where} streamed something that is not an answer: {exc} {exc.reported}") from exc',
    ),
    M(
        "doctor-stream-probe-not-a-turns-request",
        RELIABILITY,
        "adapters/llm/probe.py",
        "            await self.provider.complete(request, partial=dropped)",
        "            await self.provider.complete(request)",
        also=("tests/bot/test_doctor.py",),
    ),
    M(
        "doctor-failing-streams-not-a-problem",  # every streamed turn would fail, and the report says all is well
        RELIABILITY,
        "bot/doctor.py",
        '    elif stream.kind == "stream-failed":',
        "    elif False:",
        also=("tests/bot/test_doctor.py",),
    ),
    M(
        "doctor-streaming-probed-while-off",
        RELIABILITY,
        "bot/doctor.py",
        "    if settings.stream_edit_seconds is None:",
        "    if False:",
        also=("tests/bot/test_doctor.py",),
    ),
    # --- streaming: a stream that fails before anything was shown (issue 29, point 1) -------------------
    M(
        "stream-failed-before-words-not-asked-unstreamed",  # llama-cpp-python with tools: every turn an apology
        RELIABILITY,
        "adapters/llm/openai_compat.py",
        "                if not shown and not _TOO_LONG.search(exc.reported):",
        "                if False:",
        also=("tests/bot/test_stream_fallback_wire.py",),
    ),
    M(
        "stream-failed-connection-kept",  # the unstreamed retry meets the connection uvicorn closed: an apology
        RELIABILITY,
        "adapters/llm/openai_compat.py",
        "            if not ended:",
        "            if False:",
        also=("tests/bot/test_doctor.py",),
    ),
    M(
        "stream-broken-before-words-not-asked-unstreamed",  # a stream closed after its headers: an apology
        RELIABILITY,
        "adapters/llm/openai_compat.py",
        "                if not shown:\n",
        "                if False:\n",
        also=("tests/bot/test_stream_fallback_wire.py",),
    ),
    M(
        "stream-500-not-asked-unstreamed",
        RELIABILITY,
        "adapters/llm/openai_compat.py",
        "            if exc.status != 500:",
        "            if True:",
    ),
    M(
        "stream-words-shown-asked-again-unstreamed",  # the words shown would be shown a second time
        RELIABILITY,
        "adapters/llm/openai_compat.py",
        "            shown = True\n",
        "            pass\n",
    ),
    M(
        "stream-silence-until-the-timeout-asked-again",  # the person would wait a second timeout for nothing
        RELIABILITY,
        "adapters/llm/openai_compat.py",
        "                if isinstance(exc, httpx.TimeoutException | TimeoutError):\n                    # Not sent again",
        "                if shown and isinstance(exc, httpx.TimeoutException | TimeoutError):\n"
        "                    # Not sent again",
    ),
    M(
        "stream-shapes-learned-as-one",  # a server streaming only without tools would never stream at all
        RELIABILITY,
        "adapters/llm/learned.py",
        "    return Trait.STREAM_WITH_TOOLS if request.tools else Trait.STREAM_WITHOUT_TOOLS",
        "    return Trait.STREAM_WITHOUT_TOOLS",
    ),
    M(
        "stream-learned-although-the-unstreamed-request-failed-too",
        RELIABILITY,
        "adapters/llm/openai_compat.py",
        "        completion = await self._complete_whole(streamed.request)\n"
        "        self._traits.refused(stream_trait(request), request, streamed.why)\n",
        "        self._traits.refused(stream_trait(request), request, streamed.why)\n"
        "        completion = await self._complete_whole(streamed.request)\n",
    ),
    M(
        "stream-learned-warned-for-each-mode",  # one warning per shape and run
        RELIABILITY,
        "adapters/llm/learned.py",
        "        if trait in self._warned:\n            return\n",
        "        if False:\n            return\n",
    ),
    M(
        "context-preview-streams-every-shape",  # /context would show a streamed request sent unstreamed
        RELIABILITY,
        "adapters/llm/openai_compat.py",
        "streamed=streamed and self._traits.allows(stream_trait(prepared), prepared)",
        "streamed=streamed",
    ),
    M(
        "doctor-stream-probe-offers-no-tools",  # "OK streaming" for a server that streams only without tools
        RELIABILITY,
        "adapters/llm/probe.py",
        "            tools=(PROBE_TOOL,) if tools else (),",
        "            tools=(),",
        also=("tests/bot/test_doctor.py",),
    ),
    M(
        "doctor-stream-probe-not-given-the-turns-tools",
        RELIABILITY,
        "bot/doctor.py",
        "    stream = await probe.streaming(tools=settings.llm_tools)",
        "    stream = await probe.streaming(tools=False)",
        also=("tests/bot/test_doctor.py",),
    ),
    M(
        "doctor-streams-only-without-tools-said-ok",
        RELIABILITY,
        "adapters/llm/probe.py",
        "        if why is None:\n",
        "        if True:\n",
        also=("tests/bot/test_doctor.py",),
    ),
    # --- private turns teach normal mode nothing (issue 29, point 5) ----------------------------------------
    M(
        "private-turn-teaches-the-token-ratio",  # a private turn's size would size the next normal window
        PRIVACY,
        "core/turn/responder.py",
        "        if not request.private:\n            self._context.ratio.observe(",
        "        if True:\n            self._context.ratio.observe(",
    ),
    M(
        "private-turn-request-not-marked",
        PRIVACY,
        "core/turn/responder.py",
        "        private = state.is_private  # the gate's answer, carried by every request of the turn",
        "        private = False",
    ),
    M(
        "private-summary-fold-request-not-marked",
        PRIVACY,
        "core/memory/context.py",
        "        request = summary_request(context.summary.text, batch, private=state.is_private)",
        "        request = summary_request(context.summary.text, batch)",
    ),
    M(
        "private-tools-refusal-turns-normal-tools-off",
        PRIVACY,
        "core/turn/responder.py",
        "                self._tool_support.refused(private=private)",
        "                self._tool_support.refused(private=False)",
    ),
    M(
        "private-request-teaches-the-provider",  # streaming and images learned from private requests
        PRIVACY,
        "adapters/llm/learned.py",
        "        learned = self._private if request.private else self._normal",
        "        learned = self._normal",
    ),
    M(
        "private-refusal-forgotten-by-private-requests",  # each private turn would fail the same way again
        RELIABILITY,
        "adapters/llm/learned.py",
        "        return not (request.private and trait in self._private)",
        "        return True",
    ),
    M(
        "private-turn-told-the-image-note-for-normal-mode",
        PRIVACY,
        "core/turn/media.py",
        "told = {(conversation_id, False), (conversation_id, True)} if private else {(conversation_id, False)}",
        "told = {(conversation_id, False), (conversation_id, True)}",
    ),
    # --- streaming: Discord (adapters/discord/streaming.py, adapter.py, client.py) ---------------------
    M(
        "discord-stream-not-registered",
        RELIABILITY,
        "adapters/discord/adapter.py",
        "            self._outbox.register_streamer(self._streamer)",
        "            pass",
    ),
    M(
        "discord-stream-429-slept-through",
        RELIABILITY,
        "adapters/discord/client.py",
        "    if params.response.status == 429 and _RAISE_429.get():",
        "    if False:",
    ),
    M(
        "discord-stream-request-unbounded",
        RELIABILITY,
        "adapters/discord/streaming.py",
        "                async with asyncio.timeout(self._timeout):",
        "                async with asyncio.timeout(None):",
    ),
    M(
        "discord-stream-typing-renewed-after-first-post",
        RELIABILITY,
        "adapters/discord/adapter.py",
        "        typing = self._typing.pop(channel_id, None)",
        "        typing = None",
    ),
    M(
        "discord-stream-first-post-not-a-reply",
        RELIABILITY,
        "adapters/discord/streaming.py",
        "                reference=reference_of(reply.target) if index == 0 else None,  # type: ignore[arg-type]",
        "                reference=None,",
    ),
    M(
        "discord-stream-post-without-the-parts-nonce",
        RELIABILITY,
        "adapters/discord/streaming.py",
        "                nonce=part_nonce(reply.nonce, index),",
        "                nonce=None,",
    ),
    M(
        "discord-streamed-reply-sent-as-new-messages",
        RELIABILITY,
        "adapters/discord/adapter.py",
        "        if delivery.streamed:\n            return await self._finish_stream(channel, delivery, view)",
        "        if False:\n            return await self._finish_stream(channel, delivery, view)",
    ),
    M(
        "discord-streamed-reply-cut-unlike-its-stream",
        RELIABILITY,
        "adapters/discord/adapter.py",
        "        pieces = self._streamer.pieces(delivery.text, final=True)",
        "        pieces = split_message(delivery.text, MESSAGE_LIMIT)",
    ),
    M(
        "discord-streamed-extra-messages-kept",
        RELIABILITY,
        "adapters/discord/adapter.py",
        "        for message_id in shown[len(pieces) :]:",
        "        for message_id in ():",
    ),
    M(
        "discord-streamed-deleted-message-not-replaced",
        RELIABILITY,
        "adapters/discord/adapter.py",
        "                    if await self._edit_part(channel, shown[index], pieces[index], view=view_here):",
        "                    if await self._edit_part(channel, shown[index], pieces[index], view=view_here) or True:",
    ),
    M(
        "discord-part-taken-back-by-nonce-not-edited",
        RELIABILITY,
        "adapters/discord/adapter.py",
        "        if message.content != content:",
        "        if False:",
    ),
    # --- streaming: reading and cutting (adapters/llm/streaming.py, adapters/rendering/pieces.py) -------------
    M(
        "stream-read-once-a-token",  # a wake-up and a socket read per token: the CPU bench's 2.7x
        RELIABILITY,
        "adapters/llm/streaming.py",
        "        if waited:\n            await sleep(gap)",
        "        if False:\n            await sleep(gap)",
    ),
    M(
        "stream-read-waits-for-what-was-received",  # buffered events held back a gap each
        RELIABILITY,
        "adapters/llm/streaming.py",
        "        waited = monotonic() - asked > BUFFERED",
        "        waited = True",
    ),
    M(
        "pieces-fast-path-strips-a-joined-space",
        RELIABILITY,
        "adapters/rendering/pieces.py",
        "    if _units(text) <= limit and _clean_start(text):",
        "    if _units(text) <= limit:",
    ),
    M(
        "pieces-fast-path-shows-the-unfinished-cluster",
        RELIABILITY,
        "adapters/rendering/pieces.py",
        "        shown = (text if final else _without_last_cluster(text)).strip()",
        "        shown = text.strip()",
    ),
    M(
        "stream-constant-line-replaced-by-a-scrap",  # "(one moment…)" gives way to "Fou"
        RELIABILITY,
        "core/turn/streaming.py",
        "        if (self._stream is None or self._calling) and (",
        "        if (self._stream is None) and (",
    ),
    M(
        "report-streamed-replies-not-counted",
        RELIABILITY,
        "adapters/storage/outbox.py",
        "status = 'sent' AND streamed_ids IS NOT NULL",
        "status = 'sent' AND streamed_ids IS NULL",
    ),
    # --- the edge (issue 30): the core's entry and its one hand-off ------------------------------
    M(
        "entry-core-failure-keeps-passphrase",
        PRIVACY,
        "core/turn/entry.py",
        "            result = Reply(copy.HANDLER_FAILED, delete_inbound=secret)",
        "            result = Reply(copy.HANDLER_FAILED, delete_inbound=False)",
    ),
    M(
        "entry-raises-when-the-hand-off-fails",
        RELIABILITY,
        "core/turn/entry.py",
        "        except Exception as exc:  # noqa: BLE001 - receive never raises: a row stays for the dispatcher",
        "        except ModuleNotFoundError as exc:  # noqa: BLE001 - receive never raises: a row stays for the dispatcher",
    ),
    M(
        "entry-secret-confirmation-drawn-as-a-button",
        PRIVACY,
        "core/turn/entry.py",
        "        if reply.confirm is not None and command_of(PREFIX + reply.confirm.command) is None:",
        "        if False:",
    ),
    M(
        "entry-held-message-stops-typing",
        RELIABILITY,
        "core/turn/entry.py",
        "            self._typing.hold(target, self._edge.typing_hold)",
        "            self._typing.done(event.platform, event.chat_id)",
    ),
    M(
        "entry-caught-up-stranger-refused",
        RELIABILITY,
        "core/turn/entry.py",
        "            if event.caught_up:",
        "            if False:",
    ),
    M(
        "entry-event-not-counted-at-intake",
        RELIABILITY,
        "core/turn/entry.py",
        "        self._metrics.update_received(event.platform)\n",
        "",
    ),
    M(
        "press-may-send-a-secret-command",
        PRIVACY,
        "core/commands/registry.py",
        "    if not COMMAND.fullmatch(text) or carries_secret(text):",
        "    if not COMMAND.fullmatch(text):",
    ),
    M(
        "cut-off-turn-acknowledged",  # the platform would never offer it again: lost across the restart
        RELIABILITY,
        "core/values/edge.py",
        "    return not (isinstance(outcome, Silent) and outcome.reason is Silence.CUT_OFF)",
        "    return True",
    ),
    M(
        "handoff-no-delete-note",
        PRIVACY,
        "core/delivery/handoff.py",
        "                    text += note\n",
        "",
    ),
    M(
        "handoff-note-not-in-row",
        PRIVACY,
        "core/delivery/handoff.py",
        "                        await self.outbox.append_text(row, note)",
        "                        pass",
    ),
    M(
        "handoff-row-answered-directly",  # sent once now and once more by the dispatcher
        RELIABILITY,
        "core/delivery/handoff.py",
        "        row = reply.delivery_id if self.outbox is not None else None",
        "        row = None",
    ),
    M(
        "handoff-answers-of-a-chat-out-of-order",
        RELIABILITY,
        "core/delivery/handoff.py",
        "        async with self._chats.of((platform, event.chat_id)):",
        "        async with KeyedLocks[tuple[str, str]]().of((platform, event.chat_id)):",
    ),
    M(
        "handoff-row-button-left-behind",
        RELIABILITY,
        "core/delivery/handoff.py",
        "                    self._extras.expect(row, reply.confirm, target.route)",
        "                    pass",
    ),
    M(
        "platform-streamer-not-attached",
        RELIABILITY,
        "core/delivery/handoff.py",
        "            self.outbox.register_streamer(shown)",
        "            pass",
    ),
)


# --- running --------------------------------------------------------------------------------


@dataclasses.dataclass
class Outcome:
    mutation: Mutation | None  # None: the baseline
    failing: set[str]
    status: str  # "ran", "timeout", "broken" (pytest did not report)
    seconds: float
    detail: str = ""

    def failing_beyond(self, baseline: set[str]) -> set[str]:
        return self.failing - baseline

    def killed(self, baseline: set[str]) -> bool:
        return self.status != "ran" or bool(self.failing_beyond(baseline))


class ListOutOfDate(Exception):
    """A mutation's original text is not found exactly once: the list must follow the code."""


def check(mutation: Mutation, root: Path = ROOT) -> str:
    """The mutated text of the file; raises ListOutOfDate unless the original occurs exactly once."""
    path = root / mutation.path
    if not path.is_file():
        raise ListOutOfDate(f"{mutation.name}: {mutation.path} does not exist")
    text = path.read_text(encoding="utf-8")
    found = text.count(mutation.original)
    if found != 1:
        raise ListOutOfDate(f"{mutation.name}: the original text occurs {found} times in {mutation.path}, not once")
    return text.replace(mutation.original, mutation.replacement)


def tree_files(root: Path) -> list[str]:
    """The files of the tree: tracked, and untracked but not ignored (new tests not committed yet)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=root,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return [name for name in listed.split("\0") if name and (root / name).is_file()]


def copy_tree(root: Path, files: list[str], dest: Path) -> None:
    for name in files:
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, target)


def suite_for(mutation: Mutation | None, suite: list[str]) -> list[str]:
    paths = list(suite)
    for extra in mutation.also if mutation else ():
        if not any(extra == s or extra.startswith(s.rstrip("/") + "/") for s in suite):
            paths.append(extra)
    return paths


def run_one(
    mutation: Mutation | None, suite: list[str], snapshot: Path, files: list[str], timeout: float, extra: list[str]
) -> Outcome:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="companion-mutant-") as folder:
        copy = Path(folder) / "tree"
        copy_tree(snapshot, files, copy)
        if mutation is not None:
            (copy / mutation.path).write_text(check(mutation, copy), encoding="utf-8")
        junit = Path(folder) / "junit.xml"
        env = {k: v for k, v in os.environ.items() if not k.startswith("COMPANION_")}
        env["PYTHONPATH"] = str(copy)
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        argv = [
            sys.executable,
            "-m",
            "pytest",
            *suite_for(mutation, suite),
            "-p",
            "no:cacheprovider",
            "-q",
            f"--junitxml={junit}",
            # Its own temporary folder: pytest's shared default keeps only the three newest sessions'
            # folders and deletes older ones, so parallel runs would delete each other's files.
            f"--basetemp={Path(folder) / 'tmp'}",
            *extra,
        ]
        # Its own session, so a stop of this script ends the whole pytest run (and its children).
        process = subprocess.Popen(
            argv, cwd=copy, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
        _RUNNING.add(process)
        try:
            output, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop(process)
            return Outcome(mutation, set(), "timeout", time.monotonic() - started, f"over {timeout:.0f} s")
        finally:
            _RUNNING.discard(process)
        seconds = time.monotonic() - started
        if not junit.exists():
            tail = output.strip().splitlines()[-3:]
            return Outcome(mutation, set(), "broken", seconds, " / ".join(tail))
        return Outcome(mutation, failing_tests(junit), "ran", seconds)


_RUNNING: set[subprocess.Popen[str]] = set()


def _stop(process: subprocess.Popen[str]) -> None:
    """End a pytest run and everything it started (its process group)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _on_sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # unwinds like Ctrl-C: runs stopped, temporary copies removed


def failing_tests(junit: Path) -> set[str]:
    """Test ids with a failure or an error (collection errors included) in a junit file."""
    failing = set()
    for case in ET.parse(junit).getroot().iter("testcase"):  # noqa: S314 - our own pytest's output
        if case.find("failure") is not None or case.find("error") is not None:
            failing.add(f"{case.get('classname', '')}::{case.get('name', '')}")
    return failing


# --- reporting ------------------------------------------------------------------------------


def report(outcomes: list[Outcome], baseline: set[str], suite: list[str]) -> int:
    rows = [("mutation", "category", "killed", "failing tests", "seconds")]
    for outcome in outcomes:
        m = outcome.mutation
        assert m is not None
        count = len(outcome.failing_beyond(baseline))
        killed = {"timeout": "yes (timeout)", "broken": "yes (no report)"}.get(outcome.status, "yes" if count else "NO")
        rows.append((m.name, m.category, killed, str(count), f"{outcome.seconds:.0f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    print()
    print("| " + " | ".join(h.ljust(w) for h, w in zip(rows[0], widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows[1:]:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |")

    def rate(selected: list[Outcome]) -> str:
        killed = sum(o.killed(baseline) for o in selected)
        share = f"{100 * killed / len(selected):.0f}%" if selected else "n/a"
        return f"{killed}/{len(selected)} ({share})"

    privacy = [o for o in outcomes if o.mutation and o.mutation.category == PRIVACY]
    print()
    print(f"suite: {' '.join(suite)}; {datetime.date.today().isoformat()}")
    print(f"kill rate: {rate(outcomes)}")
    print(f"privacy-guard kill rate: {rate(privacy)}")
    for category in sorted({o.mutation.category for o in outcomes if o.mutation} - {PRIVACY}):
        print(f"{category} kill rate: {rate([o for o in outcomes if o.mutation and o.mutation.category == category])}")
    thin = [o for o in privacy if o.status == "ran" and len(o.failing_beyond(baseline)) == 1]
    survivors = [o for o in outcomes if not o.killed(baseline)]
    if thin:
        print("privacy-guard mutations killed by one test only:")
        for o in thin:
            print(f"  {o.mutation.name}: {next(iter(o.failing_beyond(baseline)))}")
    if survivors:
        print("survivors: " + ", ".join(o.mutation.name for o in survivors))
    for o in outcomes:
        if o.detail:
            print(f"  {o.mutation.name}: {o.status}: {o.detail}")
    return 1 if any(o.mutation.category == PRIVACY for o in survivors) else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--check", action="store_true", help="check every original text occurs once, and exit")
    parser.add_argument("--only", action="append", default=[], help="a mutation name (repeat, or comma-separated)")
    parser.add_argument("--suite", nargs="+", default=list(FAST_LAYERS), help="test paths (default: the fast layers)")
    parser.add_argument("--jobs", type=int, default=1, help="mutated copies run in parallel")
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds per run; a run over it counts killed")
    parser.add_argument(
        "--json", default=str(ROOT / "bench" / "results" / "mutate.json"), help="where to write every outcome"
    )
    parser.add_argument("--no-baseline", action="store_true", help="skip the clean run (assume it is green)")
    args, extra = parser.parse_known_args(argv)
    extra = [a for a in extra if a != "--"]

    wanted = {name.strip() for item in args.only for name in item.split(",") if name.strip()}
    unknown = wanted - {m.name for m in MUTATIONS}
    if unknown:
        print(f"unknown mutation: {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    selected = [m for m in MUTATIONS if not wanted or m.name in wanted]
    if args.list:
        for m in selected:
            print(f"{m.name:55} {m.category:14} {m.path}")
        print(f"{len(selected)} mutations")
        return 0
    try:
        for m in selected:
            check(m)
    except ListOutOfDate as exc:
        print(f"mutation list out of date: {exc}", file=sys.stderr)
        return 2
    if args.check:
        print(f"{len(selected)} mutations, every original text found exactly once")
        return 0
    signal.signal(signal.SIGTERM, _on_sigterm)

    # One snapshot of the tree at the start: edits to the checkout while this runs change nothing.
    with tempfile.TemporaryDirectory(prefix="companion-snapshot-") as folder:
        snapshot = Path(folder)
        files = tree_files(ROOT)
        copy_tree(ROOT, files, snapshot)
        try:
            return run_all(selected, args, extra, snapshot, files)
        except KeyboardInterrupt:
            for process in list(_RUNNING):
                _stop(process)
            print("stopped", file=sys.stderr)
            return 130


def run_all(
    selected: list[Mutation], args: argparse.Namespace, extra: list[str], snapshot: Path, files: list[str]
) -> int:
    baseline: set[str] = set()
    if not args.no_baseline:
        print(f"baseline: {' '.join(args.suite)} on a clean copy ...", flush=True)
        clean = run_one(None, args.suite, snapshot, files, args.timeout, extra)
        if clean.status != "ran":
            print(f"the clean copy did not run ({clean.status}: {clean.detail})", file=sys.stderr)
            return 2
        baseline = clean.failing
        print(f"baseline: {len(baseline)} failing, {clean.seconds:.0f} s", flush=True)
        for test in sorted(baseline):
            print(f"  failing without any mutation (not counted): {test}")

    outcomes: list[Outcome] = []
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs))
    try:
        futures = {pool.submit(run_one, m, args.suite, snapshot, files, args.timeout, extra): m for m in selected}
        for future in concurrent.futures.as_completed(futures):
            outcome = future.result()
            outcomes.append(outcome)
            count = len(outcome.failing_beyond(baseline))
            verdict = "killed" if outcome.killed(baseline) else "SURVIVED"
            print(
                f"[{len(outcomes)}/{len(selected)}] {futures[future].name}: {verdict} "
                f"({outcome.status}, {count} failing, {outcome.seconds:.0f} s)",
                flush=True,
            )
    except KeyboardInterrupt:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    order = {m.name: i for i, m in enumerate(selected)}
    outcomes.sort(key=lambda o: order[o.mutation.name])
    if args.json:
        write_json(Path(args.json), outcomes, baseline, args.suite)
    return report(outcomes, baseline, args.suite)


def write_json(path: Path, outcomes: list[Outcome], baseline: set[str], suite: list[str]) -> None:
    """Every outcome with the tests that failed, for reading which test guards what."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [
        {
            "name": o.mutation.name,
            "category": o.mutation.category,
            "path": o.mutation.path,
            "status": o.status,
            "killed": o.killed(baseline),
            "failing": sorted(o.failing_beyond(baseline)),
            "seconds": round(o.seconds, 1),
        }
        for o in outcomes
        if o.mutation is not None
    ]
    body = {"date": datetime.date.today().isoformat(), "suite": suite, "baseline_failing": sorted(baseline)}
    path.write_text(json.dumps({**body, "mutations": rows}, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
