"""The mutation list: named one-line bugs, each found by its original text in the source tree (docs/mutations.md)."""

from __future__ import annotations

import dataclasses

PRIVACY = "privacy guard"
RELIABILITY = "reliability"


@dataclasses.dataclass(frozen=True, slots=True)
class Mutation:
    """Replace `original` (found exactly once in the source tree, or once `within` a def) by `replacement`.

    `within`: a def's qualified name (`Class.method`, `function`) or a migration's file name, for an
    original that occurs more than once in the tree. `also`: test paths run with this mutation whatever
    the suite (the tests of a layer outside the fast ones that guard it, e.g. the gateway's schedule).
    `path`: the older entries' file, a hint only: never used to find the original, compared with where
    it is found."""

    name: str
    category: str
    original: str
    replacement: str
    within: str | None = None
    also: tuple[str, ...] = ()
    path: str | None = None


def M(
    name: str,
    category: str,
    *texts: str,
    within: str | None = None,
    also: tuple[str, ...] = (),
    path: str | None = None,
) -> Mutation:
    """An entry: M(name, category, original, replacement, within=..., also=...).

    The older form M(name, category, path, original, replacement) still reads, its path kept as a hint,
    so entries written on branches before the anchors merge keep working."""
    if len(texts) == 3:
        path, original, replacement = texts
    elif len(texts) == 2:
        original, replacement = texts
    else:
        raise TypeError(f"{name}: an entry takes an original and a replacement (after an optional path)")
    return Mutation(name, category, original, replacement, within, tuple(also), path)


MUTATIONS: tuple[Mutation, ...] = (
    # --- the valve ---------------------------------------------------------
    M(
        "stream-line-ends-at-unicode-separators",  # a raw U+2028 in a delta ends its event's line: the stream fails
        RELIABILITY,
        '_LINE_END = re.compile(r"\\r\\n|\\r|\\n")',
        '_LINE_END = re.compile(r"\\r\\n|\\r|\\n|\\u2028|\\u2029|\\x85")',
    ),
    M(
        "assumed-normal-message-written-unguarded",  # a message stored normal while a segment is open
        PRIVACY,
        'guard = refusing_while_private(self._engine.dialect, conversation_id, "message assumed normal")',
        "guard = ()",
    ),
    M(
        "assumed-normal-refusal-drops-the-message",  # the refused write's message is neither stored nor answered
        RELIABILITY,
        "                event = await self._gate.admit(turn, assume=False)\n                reply = await self._dispatch(turn, event)",
        "                return Silent(Silence.STORED_ALREADY)",
    ),
    M(
        "valve-expiry-ignored-at-read",
        PRIVACY,
        "if segment.expires_at is not None and now >= segment.expires_at:",
        "if False:",
    ),
    M(
        "valve-expired-not-deleted-at-read",
        PRIVACY,
        "            try:  # its life is over: delete it now rather than at the next sweep\n"
        "                await self._store.delete_expired_segments(now)",
        "            try:  # its life is over: delete it now rather than at the next sweep\n                pass",
    ),
    M(
        "valve-group-read-stays-private",
        PRIVACY,
        '        if not conversation.is_direct:\n            await self._close_quietly(segment, "group")',
        '        if False:\n            await self._close_quietly(segment, "group")',
    ),
    M(
        "valve-malformed-segment-stays-private",
        PRIVACY,
        "        if not _well_formed(segment):",
        "        if False:",
    ),
    M(
        "valve-wrong-passphrase-accepted",
        PRIVACY,
        "        if not ok:",
        "        if False:",
    ),
    M(
        "valve-lockout-ignored",
        PRIVACY,
        "        if until is not None and now < until:",
        "        if False:",
    ),
    M(
        "valve-failed-exit-not-held-normal",
        PRIVACY,
        "            self._leaving.add(conversation.id)\n            return True",
        "            return True",
    ),
    M(
        "valve-idle-ignores-activity",  # issue 12 gap: private activity did not extend the idle timeout
        RELIABILITY,
        "now - segment.last_activity_at >= self._idle:",
        "now - segment.started_at >= self._idle:",
    ),
    # --- context assembly -----------------------------------------------
    M(
        "context-private-pad-in-normal-mode",
        PRIVACY,
        "            if state.is_private:\n                private_pad =",
        "            if True:\n                private_pad =",
    ),
    M(
        "context-private-fold-saved-as-normal-summary",
        PRIVACY,
        "        if state.segment_id is not None:\n            await self._store.save_summary(",
        "        if False:\n            await self._store.save_summary(",
    ),
    M(
        "context-fold-watermark-first-item",  # issue 12 gap: folds re-summarised
        RELIABILITY,
        "new = Summary(text or context.summary.text, batch[-1].position)",
        "new = Summary(text or context.summary.text, batch[0].position)",
    ),
    M(
        "context-window-may-be-empty",
        RELIABILITY,
        "if kept and used + cost > budget_tokens:",
        "if used + cost > budget_tokens:",
    ),
    # --- what normal mode sees (issue 23) ------------------------------------
    M(
        "preview-in-private-modes-view",
        PRIVACY,
        "prepared = await self._responder.prepare(conversation, NORMAL, upcoming=upcoming)",
        "prepared = await self._responder.prepare(conversation, "
        '__import__("core.values.modes", fromlist=["x"]).PrivateState(segment) if segment else NORMAL, '
        "upcoming=upcoming)",
    ),
    M(
        "preview-outside-the-lane",  # a fold queued before the preview would be missed
        RELIABILITY,
        "return await self._lanes.run(key, lambda: self._build(conversation, upcoming))",
        "return await self._build(conversation, upcoming)",
    ),
    M(
        "preview-next-message-added-after-the-fit",  # the window would not make room for it
        RELIABILITY,
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
        "limit = self._budget.max_items if upcoming is None else self._budget.max_items - 1",
        "limit = self._budget.max_items",
    ),
    # --- the web chat (issue 23) ---------------------
    M(
        "web-history-mode-read-past-the-valve",  # an interval idle past its time would still be shown
        PRIVACY,
        "        state = await self._valve.settle(conversation)\n",
        "        segment = await self._valve._store.open_segment_of(conversation.id)\n"
        '        modes = __import__("core.values.modes", fromlist=["x"])\n'
        "        state = modes.PrivateState(segment) if segment else modes.NORMAL\n",
        within="Transcripts._settled",
    ),
    M(
        "web-page-keeps-the-passphrase",
        PRIVACY,
        "        return Sent(hide_input=not isinstance(outcome, Held) and outcome.secret)",
        "        return Sent(hide_input=False)",
    ),
    M(
        "web-cut-off-message-taken-as-sent",  # the page would keep a message nothing answers or stored
        RELIABILITY,
        "        if not acknowledged(outcome):",
        "        if False:",
    ),
    M(
        "web-secret-left-for-the-owner-to-delete",  # every passphrase's answer would ask to delete a line no page keeps
        RELIABILITY,
        "        return True",
        "        return False",
        within="WebSender.delete",
    ),
    M(
        "web-page-shows-a-message-twice",
        RELIABILITY,
        "if item.conversation_id == self.transcript.conversation_id and item.message_id in self._shown:",
        "if False:",
    ),
    M(
        "web-page-queue-unbounded",
        RELIABILITY,
        "        if self._queue.qsize() >= self._size:",
        "        if False:",
    ),
    M(
        "web-account-not-the-owners",
        RELIABILITY,
        '        web_owner=config.web_owner or (config.platforms is not None and "web" in config.platforms),',
        "        web_owner=config.web_owner,",
    ),
    M(
        "web-any-chat-is-the-owners",
        RELIABILITY,
        "        if chat_id != CHAT_ID:\n            raise DeliveryFailed",
        "        if False:\n            raise DeliveryFailed",
    ),
    # --- the web chat's pages (issue 23) -----------------
    M(
        "web-memory-page-reads-the-private-pad",
        PRIVACY,
        "pad=tuple(await reads.pads.normal_pad(person)),",
        "pad=tuple(await reads.pads.private_pad(person)),",
    ),
    M(
        "web-memory-page-lists-private-decisions",
        PRIVACY,
        '" WHERE person_id = :p AND segment_id IS NULL ORDER BY id DESC LIMIT :limit",',
        '" WHERE person_id = :p ORDER BY id DESC LIMIT :limit",',
    ),
    M(
        "web-privacy-page-lists-an-expired-interval",
        PRIVACY,
        '" AND (expires_at IS NULL OR expires_at > :now) ORDER BY id",',
        '" AND :now IS NOT NULL ORDER BY id",',
    ),
    M(
        "web-note-forgotten-while-private",
        PRIVACY,
        'self._guarded(origin, "change to memory"),',
        "(),",
        within="MemoryQueries.forget_note",
    ),
    M(
        "web-private-banner-missing",
        PRIVACY,
        '    if not mode.is_private:\n        return ""',
        '    if True:\n        return ""',
    ),
    M(
        "web-open-page-not-told-the-mode-changed",  # private text would stay on a page after /normal
        PRIVACY,
        "                if current == mode:\n                    continue",
        "                if True:\n                    continue",
    ),
    M(
        "web-privacy-page-end-not-told-to-open-pages",
        PRIVACY,
        "    await request.app[BRIDGE].call(site.core.chat.mode_changed)",
        "    pass",
    ),
    M(
        "web-passphrase-field-shown-as-typed",
        PRIVACY,
        '<input type="password" name="passphrase"',
        '<input type="text" name="passphrase"',
    ),
    M(
        "web-context-page-redraws-the-body",
        RELIABILITY,
        '{esc(preview.body.decode("utf-8"))}',
        '{esc(__import__("json").dumps(__import__("json").loads(preview.body)))}',
    ),
    M(
        "web-stream-outlives-its-browser",
        RELIABILITY,
        "            if request.transport is None or request.transport.is_closing():",
        "            if False:",
    ),
    M(
        "web-stream-outlives-the-service",
        RELIABILITY,
        "        app.on_shutdown.append(site.end_streams)",
        "        pass",
    ),
    M(
        "web-stream-relay-unbounded",
        RELIABILITY,
        "        if item is not _END and self._queue.qsize() >= self._size:",
        "        if False:",
    ),
    M(
        "web-page-forms-send-a-null-origin",  # every form of the pages would be refused by the Origin check
        RELIABILITY,
        'headers={"Referrer-Policy": "same-origin"}',
        "headers={}",
        also=("tests/bot/test_web_browser_wire.py",),
    ),
    # --- the core's other walls -----------------------------------------------------------
    M(
        "tools-lasting-tools-offered-in-private",
        PRIVACY,
        "        if state.is_private:\n            return [t for t in tools if",
        "        if False:\n            return [t for t in tools if",
    ),
    M(
        "commands-lasting-command-runs-in-private",
        PRIVACY,
        "if state.is_private and info.refused_while_private(args):",
        "if False:",
    ),
    M(
        "companion-passphrase-stored-unredacted",
        PRIVACY,
        'stored = f"/{info.name} [redacted]" if carries_secret else turn.message.text',
        "stored = turn.message.text",
    ),
    M(
        "companion-open-private-turn-answered-after-restart",
        PRIVACY,
        "        if state.is_private or state.unreadable:\n            return None",
        "        if state.unreadable:\n            return None",
    ),
    M(
        "secrets-lookalike-command-not-a-secret",
        PRIVACY,
        "    return mistyped_secret_command(text)",
        "    return False",
    ),
    # --- storage SQL: masks, pad, segment and recall predicates ---------------------------
    M(
        "recall-message-predicate",
        PRIVACY,
        "\"   AND (f.source <> 'message' OR (m.mode <> 'private' AND m.segment_id IS NULL))\"",
        '""',
    ),
    M(
        "recall-pad-predicate",  # issue 12 gap
        PRIVACY,
        "\"   AND (f.source <> 'pad' OR (p.mode <> 'private' AND p.segment_id IS NULL))\"",
        '""',
    ),
    M(
        "pg-recall-message-predicate",
        PRIVACY,
        "\"   AND (r.source <> 'message' OR (m.mode <> 'private' AND m.segment_id IS NULL))\"",
        '""',
    ),
    M(
        "pg-recall-pad-predicate",
        PRIVACY,
        "\"   AND (r.source <> 'pad' OR (p.mode <> 'private' AND p.segment_id IS NULL))\"",
        '""',
    ),
    M(
        "goal-added-while-private",
        PRIVACY,
        'self._guarded(origin, "goal"),',
        "(),",
    ),
    M(
        "followup-added-while-private",
        PRIVACY,
        'self._guarded(origin, "follow-up"),',
        "(),",
    ),
    M(
        "tool-operation-recorded-while-private",
        PRIVACY,
        'guard = self._guarded(conversation_id, "tool operation") if segment_id is None else ()',
        "guard = ()",
    ),
    M(
        "analytics-saved-while-private",
        PRIVACY,
        'guard = self._guarded(run.conversation_id, "analytics")',
        "guard = ()",
    ),
    M(
        "nudge-candidate-of-a-private-person",
        PRIVACY,
        '+ _guarded("f.person_id", "t.id")',
        '+ ""',
    ),
    M(
        "claim-of-a-private-person",
        PRIVACY,
        "sql += f\" AND {_NO_PRIVATE_PERSON.format(p=':person')}\"",
        'sql += ""',
    ),
    M(
        "link-while-private",
        PRIVACY,
        '*refusing_while_person_private(dialect, (keep, drop), "linking"),',
        "*(),",
    ),
    M(
        "unlink-while-private",
        PRIVACY,
        '*refusing_while_person_private(dialect, (person_id,), "unlinking"),',
        "*(),",
    ),
    M(
        "unlinked-messages-stay-recallable-by-the-old-person",
        PRIVACY,
        "Statement(_RECALL_MOVES_WITH_ITS_CONVERSATIONS[dialect.name].format(moved=moved), names),",
        "",
    ),
    M(
        "pg-claim-without-the-persons-lock",  # a segment opened meanwhile would not stop the claim on PostgreSQL
        PRIVACY,
        "*self._person_locked(candidate.prefs.person_id),",
        "*(),",
        within="ProactiveQueries._claim_and_send",
    ),
    M(
        "recall-index-takes-private-messages",
        PRIVACY,
        "WHEN new.mode = 'normal' AND new.segment_id IS NULL AND new.kind = 'chat'",
        "WHEN new.kind = 'chat'",
        within="0003_memory.sql",
    ),
    M(
        "mask-normal-view-reads-private-rows",
        PRIVACY,
        "\" WHERE conversation_id = :c AND segment_id IS NULL AND kind = 'chat' AND mode <> 'private'\"",
        "\" WHERE conversation_id = :c AND kind = 'chat'\"",
    ),
    M(
        "mask-private-view-reads-other-segments",
        PRIVACY,
        "\" WHERE segment_id = :s AND conversation_id = :c AND kind = 'chat'\"",
        "\" WHERE segment_id IS NOT NULL AND conversation_id = :c AND kind = 'chat'\"",
    ),
    M(
        "summary-normal-reads-private-summary",
        PRIVACY,
        "\"SELECT text, watermark FROM summaries WHERE conversation_id = :c AND segment_id IS NULL AND mode = 'normal'\"",
        '"SELECT text, watermark FROM summaries WHERE conversation_id = :c ORDER BY id DESC"',
    ),
    M(
        "pad-normal-pad-reads-private-entries",
        PRIVACY,
        "\"SELECT id, text FROM pad_entries WHERE person_id = :p AND mode = 'normal' AND segment_id IS NULL ORDER BY id\"",
        '"SELECT id, text FROM pad_entries WHERE person_id = :p ORDER BY id"',
    ),
    M(
        "segment-activity-not-extended-by-a-user-message",  # issue 12 gap (one of its three writes)
        RELIABILITY,
        "        if segment_id is not None:  # the idle clock, only when the message was stored (not a redelivery)",
        "        if False:",
    ),
    M(
        "capture-private-span-not-skipped",
        PRIVACY,
        '" OR EXISTS (SELECT 1 FROM segments s WHERE s.conversation_id = messages.conversation_id"',
        '" OR 0 AND EXISTS (SELECT 1 FROM segments s WHERE s.conversation_id = messages.conversation_id"',
    ),
    M(
        "memory-write-while-private",
        PRIVACY,
        'self._guarded(origin, "memory"),',
        "(),",
    ),
    M(
        "goal-update-while-private",  # issue 12 gap
        PRIVACY,
        'self._guarded(origin, "change to a goal"),',
        "(),",
    ),
    M(
        "link-guard-refuses-nothing",
        PRIVACY,
        'f" ON c.id = s.conversation_id WHERE s.ended_at IS NULL AND c.person_id IN ({named}) LIMIT 1",',
        'f" ON c.id = s.conversation_id WHERE 1 = 0 AND s.ended_at IS NULL AND c.person_id IN ({named}) LIMIT 1",',
    ),
    M(
        "lasting-write-guard-statement-refuses-nothing",
        PRIVACY,
        '" WHERE conversation_id = :origin AND ended_at IS NULL LIMIT 1",',
        '" WHERE 1 = 0 AND conversation_id = :origin AND ended_at IS NULL LIMIT 1",',
    ),
    M(
        "forget-while-private",
        PRIVACY,
        'self._guarded(origin, "change to memory"),',
        "(),",
        within="MemoryQueries.forget_pad_entry",
    ),
    M(
        "followup-update-while-private",
        PRIVACY,
        'self._guarded(origin, "change to a follow-up"),',
        "(),",
    ),
    M(
        "segments-left-open-at-start",
        PRIVACY,
        'f" WHERE ended_at IS NULL{scope}",',
        'f" WHERE 0{scope}",',
    ),
    M(
        "restart-message-lands-in-normal-mode",
        PRIVACY,
        'return row["id"] if sent_at < row["restart_at"] else None',
        "return None",
    ),
    M(
        "forget-private-deletes-nothing",
        PRIVACY,
        '"DELETE FROM segments WHERE conversation_id = :c RETURNING id, key_id"',
        '"DELETE FROM segments WHERE conversation_id = :c AND 0 = 1 RETURNING id, key_id"',
    ),
    M(
        "valve-opens-a-segment-without-the-guards-row-lock",  # PostgreSQL only: SQLite's BEGIN IMMEDIATE serialises
        PRIVACY,
        "            statements.insert(0, Statement(lock, params))",
        "            pass",
        within="ModeQueries.open_segment",
    ),
    M(
        "forget-and-artifact-deletions-owe-no-checkpoint",
        PRIVACY,
        "        return () if self._checkpoints is None else (owing_checkpoint(deleting, params),)",
        "        return ()",
        within="LifetimeQueries._owing",
    ),
    M(
        "crossing-confirmed-after-its-time",
        PRIVACY,
        '"SELECT destination FROM crossings WHERE segment_id = :s AND confirm_by >= :now"',
        '"SELECT destination FROM crossings WHERE segment_id = :s AND CAST(:now AS DOUBLE PRECISION) IS NOT NULL"',
    ),
    M(
        "chat-merge-moves-a-row-onto-a-taken-unique-key",  # PostgreSQL only: SQLite's UPDATE OR IGNORE
        RELIABILITY,
        '            unless = "".join(f" AND NOT {collision}" for collision in kept_back)',
        '            unless = ""',
        within="_merge",
    ),
    M(
        "expired-segment-deletion-owes-no-checkpoint",
        PRIVACY,
        "        owed = () if self._checkpoints is None else (owing_checkpoint(expired, params),)",
        "        owed = ()",
        within="ModeQueries.delete_expired_segments",
    ),
    M(
        "store-secure-delete-off",
        PRIVACY,
        '    await db.execute("PRAGMA secure_delete = ON")\n',
        "",
    ),
    M(
        "backup-keeps-segments",
        PRIVACY,
        '_PRIVATE_TABLES = ("segments", "crossings")',
        '_PRIVATE_TABLES = ("crossings",)',
    ),
    M(
        "restore-resurrects-expired-artifacts",  # issue 12 gap
        PRIVACY,
        'db.execute("DELETE FROM artifacts WHERE expires_at IS NOT NULL AND expires_at <= ?", (now,))',
        "pass",
        within="_drop_private_rows",
    ),
    # --- Telegram: secrets and confirmation order ------------------------------------------
    M(
        "telegram-passphrase-never-deleted",
        PRIVACY,
        "        return await self._delete(int(chat or target.chat_id), int(own))",
        "        return False",
    ),
    M(
        "telegram-token-in-logs",
        PRIVACY,
        "                record.msg, record.args = message, None",
        "                pass",
    ),
    M(
        "telegram-confirmed-at-dispatch",  # issue 12 gap: confirmed before it was handled
        RELIABILITY,
        "        self._ledger.begin(update.update_id)\n        task = ",
        "        self._ledger.finish(update.update_id)\n        task = ",
    ),
    M(
        "telegram-stored-before-handled",  # issue 12 gap: stored before it was handled
        RELIABILITY,
        "            outcome = await self._route(update)\n",
        "            self._ledger.finish(update.update_id)\n            await self._persist()\n"
        "            outcome = await self._route(update)\n",
    ),
    M(
        "telegram-cut-off-update-confirmed",  # the stop's cut: Telegram would never offer it again
        RELIABILITY,
        "        if outcome is not None and not acknowledged(outcome):",
        "        if False:",
    ),
    M(
        "telegram-batch-handed-to-the-core-out-of-order",
        RELIABILITY,
        "            for update in fresh:\n                self._take(update)",
        "            for update in reversed(fresh):\n                self._take(update)",
    ),
    M(
        "telegram-press-read-as-typed-words",  # a button's raw data stored and read as a message
        PRIVACY,
        "                pressed=True,",
        "                pressed=False,",
    ),
    M(
        "telegram-redelivery-handled-again",
        RELIABILITY,
        "fresh = [u for u in updates if not self._ledger.is_known(u.update_id)]",
        "fresh = list(updates)",
    ),
    M(
        "telegram-ledger-settles-past-a-running-update",
        RELIABILITY,
        "settled = [i for i in self.above if floor is None or i < floor]",
        "settled = list(self.above)",
    ),
    # --- Discord: secrets, mentions, nonces ----------------------------------------------------
    # (Its failure fallback and the note asking to delete a secret are the core's now, written once:
    # entry-core-failure-keeps-passphrase and handoff-no-delete-note.)
    M(
        "discord-passphrase-never-deleted",
        PRIVACY,
        "            await message.delete()",
        "            pass",
        within="DiscordSender.delete",
    ),
    M(
        "discord-dm-secret-delete-tried",  # a request Discord refuses, where the note is the answer
        RELIABILITY,
        "        if client is None or message_id is None or int(target.chat_id) in self._connection.dm_channels:",
        "        if client is None or message_id is None:",
    ),
    M(
        "discord-slash-command-secret-deleted-as-a-message",  # its options are no message in the channel
        RELIABILITY,
        "        if target.route is not None:\n            return True  # a slash command's options",
        "        if False:\n            return True  # a slash command's options",
    ),
    M(
        "discord-mentions-allowed",
        RELIABILITY,
        "NO_MENTIONS = discord.AllowedMentions.none()",
        "NO_MENTIONS = discord.AllowedMentions.all()",
    ),
    M(
        "discord-retry-without-nonce",
        RELIABILITY,
        "nonce=part_nonce(delivery.nonce, index),",
        "nonce=None,",
    ),
    # --- Discord: interactions, the catch-up's cursors ----------------------------------------------
    M(
        "discord-ephemeral-answer-falls-back-to-the-channel",
        PRIVACY,
        "                permanent = route.ephemeral and not route.direct",
        "                permanent = False",
    ),
    M(
        "discord-ephemeral-answer-of-an-unknown-interaction-sent-to-the-channel",
        PRIVACY,
        "        if route is None and confined(name):",
        "        if False:",
    ),
    M(
        "discord-silent-slash-command-keeps-thinking",
        RELIABILITY,
        "            if isinstance(outcome, Silent) and thinking:",
        "            if False:",
    ),
    M(
        "discord-cut-off-dm-acknowledged",  # its cursor moves past it: the next start never reads it again
        RELIABILITY,
        "            if not acknowledged(await outcome):",
        "            if not (await outcome and True):",
    ),
    M(
        "discord-live-dm-before-the-ones-sent-while-down",
        RELIABILITY,
        "            if self._held is not None:  # after the DMs sent while down",
        "            if False:  # after the DMs sent while down",
    ),
    M(
        "discord-dm-caught-up-and-delivered-handed-in-twice",
        RELIABILITY,
        "        if self._cursors.handled(channel, message) or message <= self._handed.get(channel, 0):",
        "        if self._cursors.handled(channel, message):",
    ),
    # --- the real-server proof's wire tap (issue 29): it passes what it carries ----
    M(
        "wire-tap-gathers-the-answer-first",  # a stream then reaches the companion only at its end
        RELIABILITY,
        "                async for piece in upstream.content.iter_any():",
        "                for piece in [await upstream.read()]:",
        also=("tests/bench/test_wire_tap.py",),
    ),
    M(
        "wire-tap-drops-the-content-type",  # the tap of old: the companion never saw a stream
        RELIABILITY,
        "                if name.lower() not in _HOP:",
        '                if name.lower() not in _HOP | {"content-type"}:',
        also=("tests/bench/test_wire_tap.py",),
    ),
    M(
        "wire-tap-records-no-stream",  # every stream recorded as an unreadable whole answer
        RELIABILITY,
        '            record = StreamRecord() if content_type.startswith("text/event-stream") else None',
        "            record = None",
        also=("tests/bench/test_wire_tap.py",),
    ),
    M(
        "wire-tap-joins-a-repeated-name",  # llama-cpp-python names a forced call in every chunk
        RELIABILITY,
        '        current.name = current.name or function.get("name") or ""',
        '        current.name += function.get("name") or ""',
        also=("tests/bench/test_wire_tap.py",),
    ),
    # --- the gateway's schedule (bot/) -------------------------------------------------------
    M(
        "gateway-expiry-sweep-not-scheduled",  # issue 12 gap
        PRIVACY,
        '    every.append(Job("expiry-sweep", settings.expiry_sweep_seconds, companion.sweep))\n',
        "",
        also=("tests/bot/test_gateway_sweep.py", "tests/bot/test_scheduler.py"),
    ),
    # --- quotes, edits and bursts (issue 15) ---------------------------------------------------
    M(
        "quote-reads-private-text",
        PRIVACY,
        "CASE WHEN {_READABLE} THEN m.text END AS text",
        "m.text AS text",
    ),
    M(
        "quote-reads-another-interval",
        PRIVACY,
        "(CAST(:s AS BIGINT) IS NOT NULL AND m.segment_id = :s)",
        "(m.segment_id IS NOT NULL)",
    ),
    M(
        "quote-matches-private-replies",
        PRIVACY,
        "AND m.kind = 'chat'\"\n                f\" AND {_READABLE}",
        "AND m.kind = 'chat'\"\n                f\" AND 1 = 1",
    ),
    M(
        "quote-unknown-included-in-direct-chat",
        PRIVACY,
        "    if not conversation.is_direct:\n        # The companion's own group replies",
        "    if True:\n        # The companion's own group replies",
    ),
    M(
        "quote-carries-secret",
        PRIVACY,
        "(carries_secret(quoted) or not quoted.strip())",
        "(not quoted.strip())",
    ),
    M(
        "edit-revives-expired-interval",
        PRIVACY,
        '    " (SELECT g.id FROM segments g WHERE g.id = m.segment_id AND (g.expires_at IS NULL OR g.expires_at > :now))))"',
        '    " (SELECT g.id FROM segments g WHERE g.id = m.segment_id)))"',
    ),
    M(
        "edit-indexes-private-text",
        PRIVACY,
        "WHEN new.mode = 'normal' AND new.segment_id IS NULL AND new.kind = 'chat'",
        "WHEN new.kind = 'chat'",
        within="0010_message_edits.sql",
    ),
    M(
        "burst-answered-after-its-interval",
        PRIVACY,
        "            if current.unreadable or current.segment_id != burst.state.segment_id:",
        "            if False:",
    ),
    M(
        "burst-spans-a-command",
        RELIABILITY,
        "            await self._flush_burst(conversation.id)  # a burst never spans a command",
        "            pass",
    ),
    # --- the wall at the edges (issue 22): one gate, and the SQL behind it --------------------
    M(
        "gate-caught-up-command-runs-in-normal-mode",
        PRIVACY,
        "if event.restarted is not None and not _private_mode_runs(event):",
        "if event.restarted is not None and event.kind is EventKind.MESSAGE:",
    ),
    M(
        "edit-typed-while-private-changes-the-normal-row",
        PRIVACY,
        "    if stored.segment_id != state.segment_id:\n        if state.is_private:",
        "    if False:\n        if state.is_private:",
    ),
    M(
        "edit-sql-ignores-the-mode-it-is-made-in",
        PRIVACY,
        ' AND {_NOT_EXPIRED} AND {_EDITED_IN_ITS_OWN_MODE}"\n)',
        ' AND {_NOT_EXPIRED}"\n)',
    ),
    M(
        "unknown-command-answer-outside-its-interval",
        PRIVACY,
        "turn, UNKNOWN_COMMAND.format(name=event.command.name), segment_id=state.segment_id",
        "turn, UNKNOWN_COMMAND.format(name=event.command.name)",
    ),
    M(
        "mistyped-answer-outside-its-interval",
        PRIVACY,
        "turn, MISTYPED_LOOKALIKE, segment_id=state.segment_id, delete_inbound=True",
        "turn, MISTYPED_LOOKALIKE, delete_inbound=True",
    ),
    M(
        "delivery-outside-the-open-interval-accepted",
        PRIVACY,
        "WHERE s.conversation_id = new.conversation_id AND s.ended_at IS NULL AND s.id IS NOT new.segment_id",
        "WHERE 0",
        within="0011_private_edges.sql",
    ),
    M(
        "mirror-notice-outside-the-open-interval",
        PRIVACY,
        'in_segment = segment.one["id"] if segment.one is not None else None',
        "in_segment = None",
    ),
    M(
        "outbox-due-picks-an-expired-interval",
        PRIVACY,
        '            f" AND {_INTERVAL_OPEN}"\n',
        "",
    ),
    M(
        "outbox-pending-of-sends-an-expired-interval",
        PRIVACY,
        'f" AND {_INTERVAL_OPEN} ORDER BY id",',
        '" ORDER BY id",',
    ),
    # --- the end of an interval ends what it shows (issue 29) --------------------------------------------
    M(
        "outbox-sends-a-closed-interval",
        PRIVACY,
        '" AND g.ended_at IS NULL AND (g.expires_at IS NULL OR g.expires_at > :now)))"',
        '" AND (g.expires_at IS NULL OR g.expires_at > :now)))"',
    ),
    M(
        "interval-end-leaves-what-was-shown",
        PRIVACY,
        'f" WHERE segment_id IN ({segments}) AND streamed_ids IS NOT NULL',
        'f" WHERE 0 AND segment_id IN ({segments}) AND streamed_ids IS NOT NULL',
        within="ending_shown",
    ),
    M(
        "interval-end-leaves-unsent-replies-pending",
        PRIVACY,
        "f\" WHERE segment_id IN ({segments}) AND status IN ('streaming', 'pending')\",",
        "f\" WHERE 0 AND segment_id IN ({segments}) AND status IN ('streaming', 'pending')\",",
        within="ending_shown",
    ),
    M(
        "valve-close-withdraws-nothing",
        PRIVACY,
        '            *ending_shown("SELECT id FROM segments WHERE id = :seg AND ended_at IS NULL", {"seg": segment_id}, now),\n',
        "",
    ),
    M(
        "normal-withdraws-nothing",
        PRIVACY,
        "            *ending_shown(\n"
        '                "SELECT id FROM segments WHERE conversation_id = :c AND ended_at IS NULL", {"c": conversation_id}, now\n'
        "            ),\n",
        "",
    ),
    M(
        "restart-close-withdraws-nothing",
        PRIVACY,
        '            *ending_shown(f"SELECT id FROM segments WHERE ended_at IS NULL{scope}", params, now or 0.0),\n',
        "",
    ),
    M(
        "expiry-deletion-withdraws-nothing",
        PRIVACY,
        "            *ending_shown(expired, params, now),\n",
        "",
    ),
    M(
        "forget-private-withdraws-nothing",
        PRIVACY,
        "            *ending_shown(segments, params, now),\n",
        "",
        within="LifetimeQueries.delete_segments_of",
    ),
    M(
        "reply-written-into-an-ended-interval",
        PRIVACY,
        '" WHERE id = :s AND ended_at IS NULL AND (expires_at IS NULL OR expires_at > :now))",',
        '" WHERE :s IS NOT NULL OR :now IS NOT NULL)",',
        within="TimelineQueries.record_reply",
    ),
    M(
        "stream-opened-in-an-ended-interval",
        PRIVACY,
        '" WHERE id = :s AND ended_at IS NULL AND (expires_at IS NULL OR expires_at > :now))",',
        '" WHERE :s IS NOT NULL OR :now IS NOT NULL)",',
        within="OutboxQueries.open_stream",
    ),
    M(
        "stream-shown-past-its-expiry",
        PRIVACY,
        "        return found.one is not None\n\n    async def retract(",
        "        return True\n\n    async def retract(",
    ),
    M(
        "stream-held-back-by-an-ended-interval",
        RELIABILITY,
        "AND e.id < d.id AND {_interval_open('e')})\",",
        'AND e.id < d.id)",',
    ),
    M(
        "stream-edited-past-its-expiry",
        PRIVACY,
        "        return None if reply.ends_at is None else reply.ends_at - self._now()",
        "        return None",
    ),
    M(
        "stream-request-not-cut-at-expiry",
        PRIVACY,
        "            bound = asyncio.timeout(left)",
        "            bound = asyncio.timeout(None)",
    ),
    M(
        "send-not-cut-at-expiry",
        PRIVACY,
        "                done, _ = await asyncio.wait({task}, timeout=left)",
        "                done, _ = await asyncio.wait({task}, timeout=None)",
    ),
    M(
        "send-not-cancelled-when-the-interval-ends",
        PRIVACY,
        "            send.end()",
        "            pass",
    ),
    M(
        "send-picked-before-the-end-starts-after-it",
        PRIVACY,
        "            if ends is not None and self.ends(delivery.conversation_id) != ends:",
        "            if False:",
    ),
    M(
        "outbox-not-told-that-an-interval-ended",
        PRIVACY,
        "        ended=outbox.interval_ended if outbox is not None else None,",
        "        ended=None,",
    ),
    M(
        "valve-leave-tells-no-one",
        PRIVACY,
        "        if closed > 0:\n            self._tell_ended(conversation.id)",
        "        if False:\n            self._tell_ended(conversation.id)",
    ),
    M(
        "withdrawn-line-counted-in-metrics",
        PRIVACY,
        "        if delivery.retracts:  # what a private answer showed, withdrawn",
        "        if False:  # what a private answer showed, withdrawn",
    ),
    M(
        "withdrawn-line-kept-once-sent",
        PRIVACY,
        '"DELETE FROM deliveries WHERE id = :id AND retracts = 1"',
        '"DELETE FROM deliveries WHERE id = :id AND retracts = 1 AND 0 = 1"',
    ),
    M(
        "backup-keeps-withdrawn-lines",
        PRIVACY,
        '        db.execute("DELETE FROM deliveries WHERE retracts = 1")',
        '        db.execute("DELETE FROM deliveries WHERE retracts = 1 AND 0")',
    ),
    M(
        "answer-of-an-open-interval-withdrawn",
        PRIVACY,
        'if row["status"] not in ("streaming", "pending") or (row["is_open"] and not row["retracts"]):',
        'if row["status"] not in ("streaming", "pending"):',
    ),
    M(
        "turn-apologises-once-its-interval-ended",
        PRIVACY,
        "            reply = await self._dispatch(turn, event)\n        except IntervalEnded:",
        "            reply = await self._dispatch(turn, event)\n        except ModuleNotFoundError:",
    ),
    M(
        "turn-runs-on-once-its-stream-ended",
        RELIABILITY,
        "        if self._stream is not None and self._stream.ended:",
        "        if False:",
    ),
    M(
        "sweep-leaves-withdrawn-lines-unsent",
        PRIVACY,
        "        if deleted and self.outbox is not None:\n            self.outbox.interval_ended()",
        "        if deleted and self.outbox is not None:\n            pass",
    ),
    M(
        "web-page-not-told-at-expiry",
        PRIVACY,
        "                    event = await asyncio.wait_for(anext(page), _until_end(mode, now))",
        "                    event = await asyncio.wait_for(anext(page), None)",
    ),
    M(
        "web-end-read-as-still-private",
        PRIVACY,
        "        return segment if ends is None or self._clock.now() < ends else None",
        "        return segment",
    ),
    M(
        "web-withdrawn-bubble-drawn-as-a-reply",
        PRIVACY,
        "                RETRACTION if delivery.retracts else delivery.kind,",
        "                delivery.kind,",
    ),
    M(
        "restart-answer-kept-in-the-closed-interval",
        RELIABILITY,
        "            segment_id=answer_segment,\n            answers=message_id if kind",
        "            segment_id=answer_segment if answer_segment is not None else closed.segment_id,\n"
        "            answers=message_id if kind",
    ),
    M(
        "mirror-copies-the-quote-of-a-private-message",
        PRIVACY,
        "'you: ' || coalesce(u.said, u.text) || :nl",
        "'you: ' || u.text || :nl",
    ),
    M(
        "mirror-words-not-kept-apart-from-the-quote",
        PRIVACY,
        "    return Composed(text, said if lines else None, unread)",
        "    return Composed(text, None, unread)",
    ),
    M(
        "forward-of-a-private-message-read-by-its-id",
        PRIVACY,
        "            return copy.PLACEHOLDER if found.text is None else None",
        "            return None",
    ),
    M(
        "forward-sent-in-a-private-interval-read",
        PRIVACY,
        "    if message.forwarded_at is not None and await store.private_interval_at(",
        "    if False and await store.private_interval_at(",
    ),
    M(
        "forward-of-a-message-not-kept-read",
        PRIVACY,
        "        if not any(_within(message.text, text) for text in readable):",
        "        if False:",
    ),
    M(
        "telegram-forward-origin-not-named",
        PRIVACY,
        "        if sender is not None and _may_be_from_our_chat(origin, sender, bot_id):",
        "        if False:",
    ),
    M(
        "discord-forward-origin-not-named",
        PRIVACY,
        '            "forwarded_chat_id": str(reference.channel_id),',
        '            "forwarded_chat_id": None,',
    ),
    M(
        "mirror-copies-the-placeholder-of-a-forward",
        PRIVACY,
        "    said = copy.FORWARD_UNREAD_SAID if unread else words",
        "    said = words",
    ),
    M(
        "forward-not-read-never-told",
        RELIABILITY,
        "            told = (copy.FORWARD_NOT_READ,)",
        "            told = ()",
    ),
    M(
        "telegram-edit-read-at-its-message-date",
        RELIABILITY,
        "        if edited and message.edit_date is not None:",
        "        if False:",
    ),
    M(
        "discord-edit-read-at-its-message-date",
        RELIABILITY,
        "        if edited and message.edited_at is not None:",
        "        if False:",
    ),
    M(
        "reply-delivery-depends-on-a-registered-sender",
        RELIABILITY,
        "        return self._platforms is None or platform in self._platforms",
        "        return self._outbox.serves(platform)",
    ),
    M(
        "chat-move-waits-on-its-lane",
        RELIABILITY,
        "        return await self._people.chat_moved(platform, old_chat_id, new_chat_id)",
        "        return await self._lanes.run(\n            _key_of(platform, old_chat_id),\n"
        "            functools.partial(self._people.chat_moved, platform, old_chat_id, new_chat_id),\n        )",
    ),
    M(
        "stop-leaves-held-bursts-unanswered",
        RELIABILITY,
        "            self._burst_quiet(conversation_id, generation)\n\n",
        "            pass\n\n",
    ),
    M(
        "stop-cancels-sends-in-flight",
        RELIABILITY,
        "        if self._handed:\n            await asyncio.wait(set(self._handed), timeout=max(deadline - loop.time(), 0.0))",
        "        for task in list(self._handed):\n            task.cancel()",
    ),
    M(
        "edit-answered-when-unchanged",
        RELIABILITY,
        '    " AND m.text IS DISTINCT FROM :t"\n',
        "",
    ),
    # --- the HTTP service (issue 23): metrics that count no private turn, sign-in, requests -------------
    M(
        "metrics-private-turn-recorded",
        PRIVACY,
        "recorder = None if state.is_private else RunRecorder(self._clock, conversation.id, self._metrics)",
        "recorder = RunRecorder(self._clock, conversation.id, self._metrics)",
    ),
    M(
        "metrics-private-reply-write-timed",
        PRIVACY,
        "        if run is not None:  # a normal turn's reply",
        "        if True:  # a normal turn's reply",
    ),
    M(
        "metrics-private-delivery-counted",
        PRIVACY,
        "        if delivery.in_segment:\n            return\n",
        "        if False:\n            return\n",
    ),
    M(
        "metrics-private-delivery-not-marked",
        PRIVACY,
        'in_segment=bool(row["in_segment"]),',
        "in_segment=False,",
    ),
    M(
        "metrics-private-decision-counted",
        PRIVACY,
        "                result.private += 1\n",
        "                result.private += 1\n                self._counted(decision)\n",
    ),
    M(
        "metrics-label-any-value",
        PRIVACY,
        "    return value if value in allowed else OTHER",
        "    return value",
    ),
    M(
        "web-sign-in-code-reusable",
        PRIVACY,
        '"DELETE FROM web_login_codes WHERE code_hash = :code AND expires_at > :now RETURNING id",',
        '"SELECT id FROM web_login_codes WHERE code_hash = :code AND expires_at > :now",',
    ),
    M(
        "web-sign-in-code-never-expires",
        PRIVACY,
        '{"code": code_hash, "now": now},',
        '{"code": code_hash, "now": 0.0},',
    ),
    M(
        "web-signed-out-session-kept-in-memory",
        PRIVACY,
        "            self._known = OrderedDict((k, v) for k, v in self._known.items() if v[0] != session.id)\n",
        "",
    ),
    M(
        "web-known-session-outlives-its-expiry",
        PRIVACY,
        "min(now + SESSION_RECHECK_SECONDS, stored.expires_at)",
        "now + SESSION_RECHECK_SECONDS",
    ),
    M(
        "web-session-never-expires",
        PRIVACY,
        '{"token": token_hash, "now": now},',
        '{"token": token_hash, "now": 0.0},',
    ),
    M(
        "web-sign-in-code-stored-plain",
        PRIVACY,
        'await store.save_login_code(secret_hash(code, "login"), now, now + CODE_SECONDS)',
        "await store.save_login_code(code, now, now + CODE_SECONDS)",
    ),
    M(
        "web-sign-in-not-rate-limited",
        PRIVACY,
        "        if locked is not None:",
        "        if False:",
        within="WebAuth._exchange",
    ),
    M(
        "web-session-cookie-readable-by-scripts",
        PRIVACY,
        '            path="/",\n            httponly=True,',
        '            path="/",\n            httponly=False,',
    ),
    M(
        "web-csrf-unchecked",
        PRIVACY,
        "        if not given or not any(hmac.compare_digest(given.encode(), token.encode()) for token in expected):",
        "        if False:",
    ),
    M(
        "web-host-unchecked",
        PRIVACY,
        '        if not self.allowed.allows_host(request.headers.get("Host")):',
        "        if False:",
    ),
    M(
        "web-origin-unchecked",
        PRIVACY,
        '        if origin is not None and not self.allowed.allows_origin(origin, request.headers.get("Host")):',
        "        if False:",
    ),
    M(
        "web-origin-port-ignored",
        PRIVACY,
        '        return (origin_name.rstrip("."), origin_port or default) == (host_name.rstrip("."), host_port or default)',
        '        return origin_name.rstrip(".") == host_name.rstrip(".")',
    ),
    M(
        "web-query-string-logged",
        PRIVACY,
        "            request.rel_url.path,",
        "            request.path_qs,",
    ),
    M(
        "web-cors-header-kept",
        PRIVACY,
        "        del response.headers[name]  # no CORS, whatever a handler set",
        "        pass",
    ),
    M(
        "web-exposed-without-allowed-hosts",
        PRIVACY,
        "if self.http_port is not None and not self.http_allowed_host_set and not is_loopback(self.http_host):",
        "if False:",
        also=("tests/bot/test_settings.py",),
    ),
    M(
        "backup-keeps-web-sessions",
        PRIVACY,
        "    for table in _PRIVATE_TABLES + _CREDENTIAL_TABLES:",
        "    for table in _PRIVATE_TABLES:",
    ),
    M(
        "web-takes-requests-after-the-stop",
        RELIABILITY,
        "        if self.stopping and request.method in UNSAFE_METHODS:",
        "        if False:",
    ),
    M(
        "readyz-ignores-a-stale-telegram-poll",
        RELIABILITY,
        "        if waited > self._stale_after:",
        "        if False:",
    ),
    M(
        "readyz-ignores-a-discord-disconnect",
        RELIABILITY,
        '        if self._down:\n            return "gateway disconnected; reconnecting"',
        '        if False:\n            return "gateway disconnected; reconnecting"',
    ),
    M(
        "readyz-ignores-a-failed-database-write",
        RELIABILITY,
        '            self._failure = f"not writable ({type(exc).__name__})"',
        "            self._failure = None",
    ),
    M(
        "livez-ignores-a-stuck-core-loop",
        RELIABILITY,
        '        return f"the event loop has not answered for {waited:.0f} s" if waited > self._live_limit else None',
        "        return None",
    ),
    M(
        "web-owner-not-linked",
        RELIABILITY,
        "        self._owner = owner_accounts | {WEB_OWNER} if web_owner else owner_accounts",
        "        self._owner = owner_accounts",
    ),
    # --- the model's answers and tool support (issue 25) -----------------------------------------------
    M(
        "answer-tool-syntax-shown-as-reply",
        RELIABILITY,
        "                if only_tool_call(text, self._tools.names) or",
        "                if False or",
    ),
    M(
        "answer-silence-with-tools-shown-as-reply",  # llama-cpp-python's chatml-function-calling ends a message empty
        RELIABILITY,
        " or (not text and request.tools):",
        " or False:",
    ),
    M(
        "answer-tool-syntax-asked-again-with-tools",
        RELIABILITY,
        "                    asked_without_tools = True\n"
        "                    request = _round_request(messages, offered, last=True, private=private)",
        "                    asked_without_tools = True\n"
        "                    request = _round_request(messages, offered, last=False, private=private)",
    ),
    M(
        "answer-tool-syntax-recognised-anywhere",  # "only a tool call": a reply that mentions one is sent
        RELIABILITY,
        "            return False\n        found, rest = True, after.strip()",
        "            return found\n        found, rest = True, after.strip()",
    ),
    M(
        "tools-refusal-forgotten-after-the-turn",
        RELIABILITY,
        "        self._enabled = False\n",
        "        pass\n",
    ),
    M(
        "tools-offered-although-off",
        RELIABILITY,
        "tuple(self._tools.tools_for(conversation, state)) if self._tool_support.enabled_for(private=private) else ()",
        "tuple(self._tools.tools_for(conversation, state))",
    ),
    M(
        "help-silent-when-tools-are-off",
        RELIABILITY,
        "    if not services.tools.enabled:",
        "    if False:",
    ),
    M(
        "tool-schema-says-no-length",  # a grammar-bound model then writes what the handler refuses
        RELIABILITY,
        '    return {"type": "string", "maxLength": limit}',
        '    return {"type": "string"}',
    ),
    # --- companion doctor (issue 25): it never writes, never prints a secret, and probes for real -------
    M(
        "doctor-leaves-wal-files-behind",
        RELIABILITY,
        '    mode = "mode=ro" if wal.exists() else "mode=ro&immutable=1"',
        '    mode = "mode=ro"',
        also=("tests/bot/test_doctor.py",),
    ),
    M(
        "doctor-prints-a-secret-a-server-echoed",
        RELIABILITY,
        "            text = text.replace(secret, WITHHELD)",
        "            pass",
        also=("tests/bot/test_doctor.py",),
    ),
    M(
        "doctor-tool-probe-not-forced",
        RELIABILITY,
        "force_tool=PROBE_TOOL.name",
        "force_tool=None",
        also=("tests/bot/test_doctor.py",),
    ),
    M(
        "doctor-words-with-tools-unchecked",
        RELIABILITY,
        "        if not text or only_tool_call(text, {PROBE_TOOL.name}):",
        "        if False:",
        also=("tests/bot/test_doctor.py",),
    ),
    M(
        "doctor-context-window-unchecked",
        RELIABILITY,
        "    if size < need:",
        "    if False:",
        also=("tests/bot/test_doctor.py",),
    ),
    M(
        "doctor-intent-unchecked",
        RELIABILITY,
        "    if flags & (GATEWAY_MESSAGE_CONTENT | GATEWAY_MESSAGE_CONTENT_LIMITED):",
        "    if True:",
        also=("tests/bot/test_doctor.py",),
    ),
    M(
        "provider-tools-refusal-unclassified",
        RELIABILITY,
        "            if request.tools and code in _TOOLS_REFUSED_STATUSES and _TOOLS_REFUSED.search(error_text):",
        "            if False:",
    ),
    # --- streaming: the web chat (issue 24) ---------
    M(
        "web-stream-not-registered",  # the web chat's replies would only ever go whole
        RELIABILITY,
        "streamer=WebStreamer(hub))",
        "streamer=None)",
    ),
    M(
        "web-stream-outlives-the-chat",  # a closed chat would still be asked to show replies while written
        RELIABILITY,
        "                self.outbox.unregister_streamer(shown)",
        "                pass",
    ),
    M(
        "web-stream-final-not-in-its-bubble",  # the final would be a second bubble under the partial one
        RELIABILITY,
        "                stream=delivery.streamed,\n",
        "                stream=(),\n",
    ),
    M(
        "web-stream-partial-before-the-page-began",  # a page opened mid-stream would show the answer twice
        RELIABILITY,
        "        if event.kind == PARTIAL and not self._begun:",
        "        if False:",
    ),
    M(
        "web-stream-shows-the-unfinished-grapheme",  # a flag or a family emoji would flicker in halves
        RELIABILITY,
        "        return stream_pieces(text, STREAM_LIMIT, final=final)",
        "        return stream_pieces(text, STREAM_LIMIT, final=True)",
    ),
    M(
        "web-stream-final-drawn-as-a-new-bubble",  # the page's script: the final under the partial text
        RELIABILITY,
        "    var li = ids.length ? bubble(ids[0]) : null;",
        "    var li = null;",
        also=("tests/bot/test_web_browser_wire.py",),
    ),
    M(
        "web-stream-final-unformatted",  # the page's script: the final drawn as written, markers and all
        RELIABILITY,
        "      draw(li, data.text, data.format);",
        "      li.textContent = data.text;",
        also=("tests/bot/test_web_browser_wire.py",),
    ),
    M(
        "web-stream-typing-never-shown",  # the page's script: nothing but silence until the first words
        RELIABILITY,
        "    shown(li);\n    typing(true);",
        "    shown(li);",
        also=("tests/bot/test_web_browser_wire.py",),
    ),
    M(
        "web-reply-drawn-as-the-models-html",  # a reply's <script> would be markup (the CSP still blocks it)
        RELIABILITY,
        'out.append(html.escape(units[2 * at : 2 * end].decode("utf-16-le", errors="replace"), quote=True))',
        'out.append(units[2 * at : 2 * end].decode("utf-16-le", errors="replace"))',
    ),
    # --- streaming: Telegram (issue 24) --------------------------------------------------------------
    M(
        "telegram-stream-not-modified-is-an-error",
        RELIABILITY,
        "            if not_modified(exc):\n                return",
        "            if False:\n                return",
    ),
    M(
        "telegram-stream-429-stops-the-stream",
        RELIABILITY,
        "    if isinstance(exc, RetryAfter):\n        return DeliveryThrottled(retry_after_seconds(exc))",
        "    if False:\n        return DeliveryThrottled(retry_after_seconds(exc))",
    ),
    M(
        "telegram-stream-typing-not-stopped-by-the-first-piece",  # the core's typing, for every streamer
        RELIABILITY,
        "            self._typing.done(reply.target.platform, reply.target.chat_id)",
        "            pass",
        within="_Shown.post",
    ),
    M(
        "telegram-stream-group-reply-quotes-nothing",
        RELIABILITY,
        "        reply_to = quotable(target.reply_to) if index == 0 else None",
        "        reply_to = None",
    ),
    M(
        "telegram-streamer-not-registered",
        RELIABILITY,
        '    return Platform("telegram", intake, sender, streamer)',
        '    return Platform("telegram", intake, sender)',
    ),
    M(
        "telegram-streamed-reply-posted-again-not-edited",
        RELIABILITY,
        "            if delivery.streamed:",
        "            if False:",
    ),
    M(
        "telegram-streamed-final-rendered-whole-not-per-piece",
        RELIABILITY,
        "    return tuple(part for piece in pieces for part in telegram_parts(piece, limit))",
        "    return telegram_parts(markdown, limit)",
    ),
    M(
        "telegram-streamed-final-not-modified-is-an-error",
        RELIABILITY,
        '            if "message is not modified" in exc.message.lower():',
        "            if False:",
    ),
    M(
        "telegram-streamed-final-from-the-first-part-again",
        RELIABILITY,
        "        for number in range(start, len(parts)):",
        "        for number in range(0, len(parts)):",
    ),
    M(
        "telegram-streamed-leftover-messages-kept",
        RELIABILITY,
        "            await self._delete(int(chat_id), int(message_id))",
        "            pass",
    ),
    M(
        "telegram-streamed-deleted-message-fails-the-reply",
        RELIABILITY,
        "                return False\n            raise\n        return True",
        "                raise\n            raise\n        return True",
    ),
    # --- streaming: the model link ------------
    M(
        "stream-tool-arguments-last-piece-only",
        RELIABILITY,
        "            current.arguments.append(arguments_text(function.arguments))",
        "            current.arguments[:] = [arguments_text(function.arguments)]",
    ),
    M(
        "stream-ollama-calls-numbered-0-merged",
        RELIABILITY,
        "        if current is not None and delta.id and current.id and delta.id != current.id and function.name:",
        "        if False:",
    ),
    M(
        "stream-tool-call-start-not-said",
        RELIABILITY,
        "    if began:\n        await partial(Partial(assembly.text, calling=True))",
        "    if False:\n        await partial(Partial(assembly.text, calling=True))",
    ),
    M(
        "stream-usage-not-kept",
        RELIABILITY,
        "        if chunk.usage is not None:\n            self.usage = chunk.usage",
        "        if False:\n            self.usage = chunk.usage",
    ),
    M(
        "stream-length-not-truncated",
        RELIABILITY,
        '            truncated=self.finish_reason == "length",',
        "            truncated=False,",
    ),
    M(
        "stream-answer-without-finish-accepted",  # Ollama's failed model would read as a shorter answer
        RELIABILITY,
        "    if assembly.finish_reason is None:",
        "    if False:",
    ),
    M(
        "stream-error-event-ignored",
        RELIABILITY,
        "    if chunk.error is not None:",
        "    if False:",
    ),
    M(
        "stream-error-field-ignored",  # llama.cpp of early 2025: `error:` then `data: [DONE]`
        RELIABILITY,
        '        if line.startswith("error:"):',
        '        if line.startswith("never:"):',
    ),
    M(
        "stream-keepalive-comment-read-as-data",
        RELIABILITY,
        '        if line.startswith("data:"):\n            data.append(line[5:].removeprefix(" "))',
        '        if line.startswith(("data:", ":")):\n            data.append(line[5:].removeprefix(" "))',
    ),
    M(
        "stream-surrogate-pair-not-joined",
        RELIABILITY,
        '        if "\\ud800" <= text[-1] <= "\\udbff":',
        "        if False:",
    ),
    M(
        "stream-lone-surrogate-kept",  # a text that cannot be encoded: no platform, no database takes it
        RELIABILITY,
        "    if not _SURROGATE.search(text):\n        return text",
        "    if True:\n        return text",
    ),
    M(
        "stream-not-remembered-as-not-streaming",
        RELIABILITY,
        "        learned.setdefault(trait, why)\n",
        "        pass\n",
    ),
    M(
        "stream-one-piece-answer-read-as-events",
        RELIABILITY,
        '            if not response.headers.get("content-type", "").startswith("text/event-stream"):',
        "            if False:",
    ),
    M(
        "stream-4xx-held-against-streaming-before-the-whole-answer",
        RELIABILITY,
        '            return _Unstreamed(f"it failed a streamed request with {exc.status}", request)',
        '            self._traits.refused(stream_trait(request), request, "refused")\n'
        '            return _Unstreamed(f"it failed a streamed request with {exc.status}", request)',
    ),
    M(
        "stream-image-refusal-not-streamed-again",
        RELIABILITY,
        "                return await self._complete_streamed(without_images(request), partial)",
        '                return _Unstreamed("images", request)',
    ),
    M(
        "stream-too-long-in-stream-unclassified",  # the core's retry with half the window never comes
        RELIABILITY,
        "        if _TOO_LONG.search(exc.reported):",
        "        if False:",
    ),
    M(
        "stream-timeout-bounds-the-whole-answer",
        RELIABILITY,
        "                    assembly = await read_stream(lines, sink)",
        "                    assembly = await asyncio.wait_for(read_stream(lines, sink), self._timeout)",
    ),
    M(
        "stream-broken-answer-asked-again",  # the words shown would be shown a second time
        RELIABILITY,
        "                # Not retried: the answer is on screen already, and a second one would double it.\n",
        "                if isinstance(exc, httpx.RemoteProtocolError):\n"
        "                    return await self._complete_streamed(request, partial)\n",
    ),
    M(
        "stream-server-error-text-in-the-exception",  # the error may quote the model's words
        PRIVACY,
        'raise ProviderBadResponse(f"{self._where} streamed something that is not an answer: {exc}") from exc',
        'raise ProviderBadResponse(f"{self._where} streamed something that is not an answer: {exc} {exc.reported}") from exc',
    ),
    M(
        "request-body-every-message-written-as-role-and-text",  # images, tool calls and results lost
        RELIABILITY,
        '    if message.images or message.tool_calls or role == "tool" or type(role) is not str or type(content) is not str:',
        "    if False:",
    ),
    M(
        "request-body-tool-json-kept-though-its-schema-changed",
        RELIABILITY,
        "            and written.snapshot == tool.parameters",
        "            and True",
    ),
    M(
        "request-body-tool-json-kept-for-other-parameters",
        RELIABILITY,
        "            and written.parameters is tool.parameters",
        "            and True",
    ),
    M(
        "request-body-tool-json-kept-for-another-description",
        RELIABILITY,
        "            and written.description == tool.description",
        "            and True",
    ),
    M(
        "request-body-tools-json-kept-without-bound",
        RELIABILITY,
        "        if len(self._tools_written) >= _TOOLS_WRITTEN_KEPT:",
        "        if False:",
    ),
    M(
        "doctor-stream-probe-not-a-turns-request",
        RELIABILITY,
        "            await self.provider.complete(request, partial=dropped)",
        "            await self.provider.complete(request)",
        also=("tests/bot/test_doctor.py",),
    ),
    M(
        "doctor-failing-streams-not-a-problem",  # every streamed turn would fail, and the report says all is well
        RELIABILITY,
        '    elif stream.kind == "stream-failed":',
        "    elif False:",
        also=("tests/bot/test_doctor.py",),
    ),
    M(
        "doctor-streaming-probed-while-off",
        RELIABILITY,
        "    if settings.stream_edit_seconds is None:",
        "    if False:",
        also=("tests/bot/test_doctor.py",),
    ),
    # --- streaming: a stream that fails before anything was shown (issue 29, point 1) -------------------
    M(
        "stream-failed-before-words-not-asked-unstreamed",  # llama-cpp-python with tools: every turn an apology
        RELIABILITY,
        "                if not shown and not _TOO_LONG.search(exc.reported):",
        "                if False:",
        also=("tests/bot/test_stream_fallback_wire.py",),
    ),
    M(
        "stream-failed-connection-kept",  # the unstreamed retry meets the connection uvicorn closed: an apology
        RELIABILITY,
        "            if not ended:",
        "            if False:",
        also=("tests/bot/test_doctor.py",),
    ),
    M(
        "stream-answer-connection-not-kept",  # the body left unread after [DONE]: a new connection every turn
        RELIABILITY,
        "                ended = await _read_to_end(chunks)",
        "                ended = True",
    ),
    M(
        "stream-read-after-the-answer-unbounded",  # a server that goes on sending holds the answer and its connection
        RELIABILITY,
        "                if left < 0:\n                    return False",
        "                if False:\n                    return False",
    ),
    M(
        "stream-broken-before-words-not-asked-unstreamed",  # a stream closed after its headers: an apology
        RELIABILITY,
        "                if not shown:\n",
        "                if False:\n",
        within="OpenAICompatibleProvider._complete_streamed",
        also=("tests/bot/test_stream_fallback_wire.py",),
    ),
    M(
        "stream-500-not-asked-unstreamed",
        RELIABILITY,
        "            if exc.status != 500:",
        "            if True:",
    ),
    M(
        "stream-words-shown-asked-again-unstreamed",  # the words shown would be shown a second time
        RELIABILITY,
        "            shown = True\n",
        "            pass\n",
    ),
    M(
        "stream-silence-until-the-timeout-asked-again",  # the person would wait a second timeout for nothing
        RELIABILITY,
        "                if isinstance(exc, httpx.TimeoutException | TimeoutError):\n                    # Not sent again",
        "                if shown and isinstance(exc, httpx.TimeoutException | TimeoutError):\n"
        "                    # Not sent again",
    ),
    M(
        "stream-shapes-learned-as-one",  # a server streaming only without tools would never stream at all
        RELIABILITY,
        "    return Trait.STREAM_WITH_TOOLS if request.tools else Trait.STREAM_WITHOUT_TOOLS",
        "    return Trait.STREAM_WITHOUT_TOOLS",
    ),
    M(
        "stream-learned-although-the-unstreamed-request-failed-too",
        RELIABILITY,
        "        completion = await self._complete_whole(streamed.request)\n"
        "        self._traits.refused(stream_trait(request), request, streamed.why)\n",
        "        self._traits.refused(stream_trait(request), request, streamed.why)\n"
        "        completion = await self._complete_whole(streamed.request)\n",
    ),
    M(
        "stream-learned-warned-for-each-mode",  # one warning per shape and run
        RELIABILITY,
        "        if trait in self._warned:\n            return\n",
        "        if False:\n            return\n",
    ),
    M(
        "context-preview-streams-every-shape",  # /context would show a streamed request sent unstreamed
        RELIABILITY,
        "streamed=streamed and self._traits.allows(stream_trait(prepared), prepared)",
        "streamed=streamed",
    ),
    M(
        "doctor-stream-probe-offers-no-tools",  # "OK streaming" for a server that streams only without tools
        RELIABILITY,
        "            tools=(PROBE_TOOL,) if tools else (),",
        "            tools=(),",
        also=("tests/bot/test_doctor.py",),
    ),
    M(
        "doctor-stream-probe-not-given-the-turns-tools",
        RELIABILITY,
        "    stream = await probe.streaming(tools=settings.llm_tools)",
        "    stream = await probe.streaming(tools=False)",
        also=("tests/bot/test_doctor.py",),
    ),
    M(
        "doctor-streams-only-without-tools-said-ok",
        RELIABILITY,
        "        if why is None:\n",
        "        if True:\n",
        also=("tests/bot/test_doctor.py",),
    ),
    # --- private turns teach normal mode nothing (issue 29, point 5) ----------------------------------------
    M(
        "private-turn-teaches-the-token-ratio",  # a private turn's size would size the next normal window
        PRIVACY,
        "        if not request.private:\n            self._context.ratio.observe(",
        "        if True:\n            self._context.ratio.observe(",
    ),
    M(
        "private-turn-request-not-marked",
        PRIVACY,
        "        private = state.is_private  # the gate's answer, carried by every request of the turn",
        "        private = False",
    ),
    M(
        "private-summary-fold-request-not-marked",
        PRIVACY,
        "        request = summary_request(context.summary.text, batch, private=state.is_private)",
        "        request = summary_request(context.summary.text, batch)",
    ),
    M(
        "private-tools-refusal-turns-normal-tools-off",
        PRIVACY,
        "                self._tool_support.refused(private=private)",
        "                self._tool_support.refused(private=False)",
    ),
    M(
        "private-request-teaches-the-provider",  # streaming and images learned from private requests
        PRIVACY,
        "        learned = self._private if request.private else self._normal",
        "        learned = self._normal",
    ),
    M(
        "private-refusal-forgotten-by-private-requests",  # each private turn would fail the same way again
        RELIABILITY,
        "        return not (request.private and trait in self._private)",
        "        return True",
    ),
    M(
        "private-turn-told-the-image-note-for-normal-mode",
        PRIVACY,
        "told = {(conversation_id, False), (conversation_id, True)} if private else {(conversation_id, False)}",
        "told = {(conversation_id, False), (conversation_id, True)}",
    ),
    # --- streaming: Discord ---------------------
    M(
        "discord-stream-not-registered",
        RELIABILITY,
        "        streamer=DiscordStreamer(lambda: connection.client, timeout=stream_timeout),",
        "        streamer=None,",
    ),
    M(
        "discord-stream-429-slept-through",
        RELIABILITY,
        "    if params.response.status == 429 and _RAISE_429.get():",
        "    if False:",
    ),
    M(
        "discord-stream-request-unbounded",
        RELIABILITY,
        "                async with asyncio.timeout(self._timeout):",
        "                async with asyncio.timeout(None):",
    ),
    M(
        "discord-stream-typing-renewed-after-first-post",  # the core's, for every platform now
        RELIABILITY,
        "        if index == 0:\n            self._typing.done(reply.target.platform, reply.target.chat_id)",
        "        if False:\n            self._typing.done(reply.target.platform, reply.target.chat_id)",
    ),
    M(
        "discord-stream-first-post-not-a-reply",
        RELIABILITY,
        "                reference=reference_of(reply.target) if index == 0 else None,  # type: ignore[arg-type]",
        "                reference=None,",
    ),
    M(
        "discord-stream-post-without-the-parts-nonce",
        RELIABILITY,
        "                nonce=part_nonce(reply.nonce, index),",
        "                nonce=None,",
    ),
    M(
        "discord-streamed-reply-sent-as-new-messages",
        RELIABILITY,
        "        if delivery.streamed:\n            return await self._finish_stream(channel, delivery, view)",
        "        if False:\n            return await self._finish_stream(channel, delivery, view)",
    ),
    M(
        "discord-streamed-reply-cut-unlike-its-stream",
        RELIABILITY,
        "        pieces = stream_pieces(delivery.text, MESSAGE_LIMIT, final=True)  # as DiscordStreamer.pieces",
        "        pieces = split_message(delivery.text, MESSAGE_LIMIT)",
    ),
    M(
        "discord-streamed-extra-messages-kept",
        RELIABILITY,
        "        for message_id in shown[len(pieces) :]:",
        "        for message_id in ():",
    ),
    M(
        "discord-streamed-deleted-message-not-replaced",
        RELIABILITY,
        "                    if await self._edit_part(channel, shown[index], pieces[index], view=view_here):",
        "                    if await self._edit_part(channel, shown[index], pieces[index], view=view_here) or True:",
    ),
    M(
        "discord-part-taken-back-by-nonce-not-edited",
        RELIABILITY,
        "        if message.content != content:",
        "        if False:",
    ),
    # --- streaming: reading and cutting -------------
    M(
        "stream-read-once-a-token",  # a wake-up and a socket read per token: the CPU bench's 2.7x
        RELIABILITY,
        "        if waited:\n            await sleep(gap)",
        "        if False:\n            await sleep(gap)",
    ),
    M(
        "stream-read-waits-for-what-was-received",  # buffered events held back a gap each
        RELIABILITY,
        "        waited = monotonic() - asked > BUFFERED",
        "        waited = True",
    ),
    M(
        "pieces-fast-path-strips-a-joined-space",
        RELIABILITY,
        "    if _units(text) <= limit and _clean_start(text):",
        "    if _units(text) <= limit:",
    ),
    M(
        "pieces-fast-path-shows-the-unfinished-cluster",
        RELIABILITY,
        "        shown = (text if final else _without_last_cluster(text)).strip()",
        "        shown = text.strip()",
    ),
    M(
        "stream-constant-line-replaced-by-a-scrap",  # "(one moment…)" gives way to "Fou"
        RELIABILITY,
        "        if (self._stream is None or self._calling) and (",
        "        if (self._stream is None) and (",
    ),
    M(
        "report-streamed-replies-not-counted",
        RELIABILITY,
        "status = 'sent' AND streamed_ids IS NOT NULL",
        "status = 'sent' AND streamed_ids IS NULL",
    ),
    # --- the list's own anchors (issue 30): each entry found once, planted where it was found ------------
    M(
        "anchors-original-found-twice-accepted",  # the first of two look-alike lines would be mutated
        RELIABILITY,
        "        if len(places) > 1:",
        "        if False:",
        also=("tests/bench/test_mutation_list.py",),
    ),
    M(
        "anchors-within-a-def-ignored",  # within= would search the whole file, not the def it names
        RELIABILITY,
        "            spans = [(d.path, d.start, d.end)]",
        "            spans = [(d.path, 0, None)]",
        also=("tests/bench/test_mutation_list.py",),
    ),
    M(
        "anchors-planted-at-the-first-occurrence-in-the-file",  # not inside the def it was found in
        RELIABILITY,
        "        return place, text[: place.start] + mutation.replacement + text[end:]",
        "        return place, text.replace(mutation.original, mutation.replacement, 1)",
        also=("tests/bench/test_mutation_list.py",),
    ),
    M(
        "anchors-search-the-list-itself",  # every original would be found twice: in the code and in the list
        RELIABILITY,
        'NOT_SEARCHED = frozenset({"bench/mutate.py", "bench/mutations.py"})',
        "NOT_SEARCHED = frozenset()",
        also=("tests/bench/test_mutation_list.py",),
    ),
    # --- the edge (issue 30): the core's entry and its one hand-off ------------------------------
    M(
        "entry-core-failure-keeps-passphrase",
        PRIVACY,
        "            result = Reply(copy.HANDLER_FAILED, delete_inbound=secret)",
        "            result = Reply(copy.HANDLER_FAILED, delete_inbound=False)",
    ),
    M(
        "entry-raises-when-the-hand-off-fails",
        RELIABILITY,
        "        except Exception as exc:  # noqa: BLE001 - receive never raises: a row stays for the dispatcher",
        "        except ModuleNotFoundError as exc:  # noqa: BLE001 - receive never raises: a row stays for the dispatcher",
    ),
    M(
        "entry-secret-confirmation-drawn-as-a-button",
        PRIVACY,
        "        if reply.confirm is not None and command_of(PREFIX + reply.confirm.command) is None:",
        "        if False:",
    ),
    M(
        "entry-held-message-stops-typing",
        RELIABILITY,
        "            self._typing.hold(target, self._edge.typing_hold)",
        "            self._typing.done(event.platform, event.chat_id)",
        # Telegram's hold for a burst, as it was guarded before the entry held it for every platform.
        also=(
            "tests/bot/test_streaming_telegram_wire.py"
            "::test_a_stop_mid_stream_lets_the_answer_finish_within_the_grace_and_sends_it_once",
        ),
    ),
    M(
        "entry-caught-up-stranger-refused",
        RELIABILITY,
        "            if event.caught_up:",
        "            if False:",
    ),
    M(
        "entry-event-not-counted-at-intake",
        RELIABILITY,
        "        self._metrics.update_received(event.platform)\n",
        "",
    ),
    M(
        "press-may-send-a-secret-command",
        PRIVACY,
        "    if not COMMAND.fullmatch(text) or carries_secret(text):",
        "    if not COMMAND.fullmatch(text):",
    ),
    M(
        "cut-off-turn-acknowledged",  # the platform would never offer it again: lost across the restart
        RELIABILITY,
        "    return not (isinstance(outcome, Silent) and outcome.reason in (Silence.CUT_OFF, Silence.HELD_ELSEWHERE))",
        "    return True",
    ),
    M(
        "handoff-no-delete-note",
        PRIVACY,
        "                    text += note\n",
        "",
    ),
    M(
        "handoff-note-not-in-row",
        PRIVACY,
        "                        await self.outbox.append_text(row, note)",
        "                        pass",
    ),
    M(
        "handoff-row-answered-directly",  # sent once now and once more by the dispatcher
        RELIABILITY,
        "        row = reply.delivery_id if self.outbox is not None else None",
        "        row = None",
    ),
    M(
        "handoff-answers-of-a-chat-out-of-order",
        RELIABILITY,
        "        async with self._chats.of((platform, event.chat_id)):",
        "        async with KeyedLocks[tuple[str, str]]().of((platform, event.chat_id)):",
    ),
    M(
        "handoff-row-button-left-behind",
        RELIABILITY,
        "                    self._extras.expect(row, reply.confirm, target.route)",
        "                    pass",
    ),
    M(
        "platform-streamer-not-attached",
        RELIABILITY,
        "            self.outbox.register_streamer(shown)",
        "            pass",
    ),
    # --- crypto-shredding: sealing and the key folder (issue 31) ---------------------------------------
    M(
        "sealing-nonce-reused",  # GCM under one key with a repeated nonce leaks the XOR of texts, and the key's tag
        PRIVACY,
        "        nonce = secrets.token_bytes(NONCE_BYTES)",
        "        nonce = bytes(NONCE_BYTES)",
    ),
    M(
        "sealing-associated-data-dropped",  # a value moved to another column or interval would open there
        PRIVACY,
        '    return f"{field}:{segment_id}".encode("ascii")',
        '    return b""',
    ),
    M(
        "keys-shred-without-overwrite",  # unlink alone leaves the key's bytes in the freed blocks
        PRIVACY,
        "        _overwrite(fd, os.fstat(fd).st_size)",
        "        pass",
    ),
    M(
        "keys-shred-zeros-not-synced",  # after a power cut the key's bytes would be back in its blocks
        PRIVACY,
        "        _sync_file(fd)",
        "        pass",
        within="_shred_file",
    ),
    M(
        "keys-expiry-not-parsed-from-the-name",  # every key read as never expiring
        PRIVACY,
        '    return KeyName(match["key_id"], None if expires == NEVER else int(expires))',
        '    return KeyName(match["key_id"], None)',
    ),
    M(
        "keys-named-to-outlive-the-interval",
        PRIVACY,
        "    return None if expires_at is None else math.floor(expires_at)",
        "    return None if expires_at is None else math.ceil(expires_at)",
    ),
    M(
        "keys-zeroed-file-loads-as-a-key",  # a shred cut off after its overwrite would leave a key that loads
        PRIVACY,
        "    if len(data) != KEY_BYTES or not any(data):",
        "    if len(data) != KEY_BYTES:",
    ),
    M(
        "keys-short-file-loads-as-a-key",  # a create cut off mid-write would leave half a key that loads
        PRIVACY,
        "    if len(data) != KEY_BYTES or not any(data):",
        "    if not any(data):",
    ),
    M(
        "keys-shredded-key-kept-in-memory",
        PRIVACY,
        "            self._keys.pop(name.key_id, None)",
        "            pass",
    ),
    M(
        "keys-shred-of-a-gone-file-keeps-the-key-in-memory",
        PRIVACY,
        "            self._keys.pop(key_id, None)",
        "            pass",
    ),
    M(
        "keys-orphans-kept-at-reconcile",
        PRIVACY,
        "                orphan = name.key_id not in live",
        "                orphan = False",
    ),
    M(
        "keys-folder-readable-by-others-accepted",
        PRIVACY,
        "        if info.st_mode & 0o077:",
        "        if False:",
    ),
    M(
        "keys-doctor-accepts-keys-in-the-data-directory",
        PRIVACY,
        "    if data_directory is not None and place.is_relative_to(data_directory.resolve()):",
        "    if False:",
    ),
    M(
        "keys-doctor-silent-on-copy-on-write",
        PRIVACY,
        "    if kind in COPY_ON_WRITE:",
        "    if False:",
    ),
    # The folder's fsyncs: what a power cut would do is not testable here; the order of the calls is
    # (test_create_and_shred_sync_the_key_and_its_folder_before_they_return).
    M(
        "keys-folder-not-synced-after-create",  # a power cut could lose the name of a key a segment names
        RELIABILITY,
        "            _sync_folder(self.path)",
        "            pass",
        within="KeyDir.create",
    ),
    M(
        "keys-folder-not-synced-after-shred",  # a power cut could bring back the name (of zeros, which never load)
        RELIABILITY,
        "            _sync_folder(self.path)",
        "            pass",
        within="KeyDir._shred_all",
    ),
    M(
        "keys-file-not-synced-after-create",  # a power cut could leave a segment's key empty
        RELIABILITY,
        "                _sync_file(fd)",
        "                pass",
        within="KeyDir.create",
    ),
    # --- sealing wired: every private write sealed, every private read opened, keys first (issue 31) -----
    M(
        "seal-inbound-message-stored-plain",
        PRIVACY,
        'text, said = sealed(self._engine.sealer, segment_id, "messages.text", text), None',
        "text, said = text, None",
    ),
    M(
        "seal-private-said-kept",  # only mirrors read `said`; a private row's would be words in plain text
        PRIVACY,
        'text, said = sealed(self._engine.sealer, segment_id, "messages.text", text), None',
        'text = sealed(self._engine.sealer, segment_id, "messages.text", text)',
    ),
    M(
        "seal-private-answer-stored-plain",
        PRIVACY,
        'stored_text = sealed(self._engine.sealer, segment_id, "messages.text", stored_text)',
        "stored_text = stored_text",
    ),
    M(
        "seal-private-reply-delivery-plain",
        PRIVACY,
        'send_text = sealed(self._engine.sealer, segment_id, "deliveries.text", send_text)',
        "send_text = send_text",
    ),
    M(
        "seal-key-lost-reply-not-an-ended-interval",  # a turn's reply must end as its interval did, unwritten
        RELIABILITY,
        'raise IntervalEnded(f"segment {segment_id} has no key; its reply is not written") from exc',
        "raise",
    ),
    M(
        "seal-private-summary-plain",
        PRIVACY,
        '"text": sealed(sealer, segment_id, "summaries.text", summary.text),',
        '"text": summary.text,',
    ),
    M(
        "seal-private-pad-fact-plain",
        PRIVACY,
        '"fact": sealed(sealer, segment_id, "pad_entries.text", fact),',
        '"fact": fact,',
    ),
    M(
        "seal-private-pad-duplicate-check-dropped",
        RELIABILITY,
        "                if fact in known:\n                    continue\n",
        "",
    ),
    M(
        "seal-crossing-destination-plain",
        PRIVACY,
        '"destination": sealed(self._engine.sealer, segment_id, "crossings.destination", destination),',
        '"destination": destination,',
    ),
    M(
        "seal-confirmed-crossing-destination-left-sealed",
        RELIABILITY,
        '                else opened(self._engine.sealer, segment_id, "crossings.destination", row["destination"])',
        '                else row["destination"]',
    ),
    M(
        "seal-private-edit-same-words-edited",
        RELIABILITY,
        'if opened(sealer, segment_id, "messages.text", found.one["text"]) in (None, text):',
        'if opened(sealer, segment_id, "messages.text", found.one["text"]) is None:',
    ),
    M(
        "seal-private-edit-stored-plain",
        PRIVACY,
        'stored = sealed(sealer, segment_id, "messages.text", text)',
        "stored = text",
    ),
    M(
        "seal-appended-private-reply-plain",
        PRIVACY,
        'longer = sealed(sealer, segment_id, "deliveries.text", text + suffix)',
        "longer = text + suffix",
    ),
    M(
        "seal-cut-off-private-stream-plain",
        PRIVACY,
        'words = sealed(self._engine.sealer, row["segment_id"], "deliveries.text", text)',
        "words = text",
    ),
    M(
        "seal-view-shows-a-masked-row",  # a row whose key is gone shown as its sealed bytes
        PRIVACY,
        '                items.append(TimelineItem(r["id"], r["role"], text))',
        '                items.append(TimelineItem(r["id"], r["role"], text))\n            else:\n                items.append(TimelineItem(r["id"], r["role"], r["text"]))',
        within="_view_items",
    ),
    M(
        "seal-private-pad-left-sealed",
        PRIVACY,
        '        text = opened(sealer, row["segment_id"], "pad_entries.text", row["text"])',
        '        text = row["text"]',
    ),
    M(
        "seal-quote-left-sealed",
        RELIABILITY,
        '            row["role"], row["kind"], opened(self._engine.sealer, row["segment_id"], "messages.text", row["text"])',
        '            row["role"], row["kind"], row["text"]',
    ),
    M(
        "seal-lost-keys-reply-picked",
        PRIVACY,
        '        if text is None and row["text"] is not None:\n            continue\n',
        "",
    ),
    M(
        "keys-segment-opens-without-a-key",
        PRIVACY,
        "        key_id = await sealer.create(expires_at)",
        "        key_id = None",
    ),
    M(
        "keys-unused-key-kept",
        PRIVACY,
        "            await sealer.shred([key_id])  # not used: a segment was open already (or none could open)",
        "            pass",
    ),
    M(
        "keys-failed-open-key-kept",
        PRIVACY,
        "                await sealer.shred([key_id])\n            raise",
        "                pass\n            raise",
    ),
    M(
        "keys-expiry-asks-the-database-first",  # expiry must hold while PostgreSQL is down
        PRIVACY,
        "            await sealer.expire(now)\n            (keyed,)",
        "            (keyed,)",
    ),
    M(
        "keys-expiry-spares-keys-the-database-names",
        PRIVACY,
        '            await sealer.shred(row["key_id"] for row in keyed.rows)',
        "            pass",
        within="ModeQueries.delete_expired_segments",
    ),
    M(
        "keys-forget-private-deletes-rows-before-the-keys",
        PRIVACY,
        '            await sealer.shred(row["key_id"] for row in keyed.rows)',
        "            pass",
        within="LifetimeQueries.delete_segments_of",
    ),
    M(
        "keys-not-reconciled-at-start",
        PRIVACY,
        "        await reconcile(self._engine, time.time() if now is None else now, not_held_elsewhere=(mine, me))",
        "        pass",
    ),
    M(
        "keys-orphans-kept",
        PRIVACY,
        "                orphan = name.key_id not in live and not self._written_since(name, spare_after)",
        "                orphan = False",
    ),
    M(
        "keys-orphan-grace-ignored",  # a key another process is about to name would be shredded under it
        RELIABILITY,
        "                orphan = name.key_id not in live and not self._written_since(name, spare_after)",
        "                orphan = name.key_id not in live",
    ),
    M(
        "keys-lost-key-interval-left-open",
        PRIVACY,
        '            if not sealer.has_key(row["id"]):',
        "            if False:",
    ),
    M(
        "keys-keyless-close-keeps-its-replies-pending",
        PRIVACY,
        "        *ending_shown(open_ones, params, now),\n",
        "",
    ),
    M(
        "keys-segments-not-bound-at-start",  # the private pad of earlier intervals would end at every restart
        RELIABILITY,
        '        engine.sealer.bind(row["id"], row["key_id"])',
        "        pass",
        within="bind_segments",
    ),
    M(
        "keys-no-key-folder-still-opens-intervals",
        PRIVACY,
        "    async def create(self, expires_at: float | None) -> str | None:\n"
        '        raise KeyLost("no key folder (COMPANION_KEY_DIR): private mode is unavailable")',
        "    async def create(self, expires_at: float | None) -> str | None:\n        return None",
    ),
    M(
        "pg-private-message-text-in-plain",
        PRIVACY,
        "ALTER TABLE messages ADD CONSTRAINT messages_private_text_sealed\n"
        "    CHECK (segment_id IS NULL OR text ~ '^s1\\.[A-Za-z0-9_-]{38,}$');",
        "ALTER TABLE messages ADD CONSTRAINT messages_private_text_sealed CHECK (true);",
    ),
    M(
        "pg-private-said-kept",
        PRIVACY,
        "    CHECK (segment_id IS NULL OR said IS NULL);",
        "    CHECK (true);",
    ),
    M(
        "pg-private-summary-in-plain",
        PRIVACY,
        "ALTER TABLE summaries ADD CONSTRAINT summaries_private_text_sealed\n"
        "    CHECK (segment_id IS NULL OR text ~ '^s1\\.[A-Za-z0-9_-]{38,}$');",
        "ALTER TABLE summaries ADD CONSTRAINT summaries_private_text_sealed CHECK (true);",
    ),
    M(
        "pg-private-pad-in-plain",
        PRIVACY,
        "ALTER TABLE pad_entries ADD CONSTRAINT pad_entries_private_text_sealed\n"
        "    CHECK (segment_id IS NULL OR text ~ '^s1\\.[A-Za-z0-9_-]{38,}$');",
        "ALTER TABLE pad_entries ADD CONSTRAINT pad_entries_private_text_sealed CHECK (true);",
    ),
    M(
        "pg-private-delivery-in-plain",
        PRIVACY,
        "    CHECK (segment_id IS NULL OR text IS NULL OR text ~ '^s1\\.[A-Za-z0-9_-]{38,}$');",
        "    CHECK (true);",
    ),
    M(
        "pg-crossing-destination-in-plain",
        PRIVACY,
        "    CHECK (destination ~ '^s1\\.[A-Za-z0-9_-]{38,}$');",
        "    CHECK (true);",
    ),
    M(
        "sweep-expiry-held-back-by-artifacts",  # a store down for artifacts must not hold back an interval's expiry
        PRIVACY,
        "        try:\n            return await self._modes.delete_expired_segments(self._clock.now())\n"
        "        finally:\n            await self._artifacts.delete_expired_artifacts(self._clock.now())",
        "        await self._artifacts.delete_expired_artifacts(self._clock.now())\n"
        "        return await self._modes.delete_expired_segments(self._clock.now())",
    ),
    # --- PostgreSQL (issue 31): its schema's wall, its engine, its start ----
    M(
        "pg-recall-index-takes-private-messages",
        PRIVACY,
        "    FOR EACH ROW WHEN (NEW.mode = 'normal' AND NEW.segment_id IS NULL AND NEW.kind = 'chat')\n"
        "    EXECUTE FUNCTION recall_message_insert();",
        "    FOR EACH ROW EXECUTE FUNCTION recall_message_insert();",
        within="0014_baseline.sql",
    ),
    M(
        "pg-recall-index-takes-private-edits",
        PRIVACY,
        "    FOR EACH ROW WHEN (NEW.mode = 'normal' AND NEW.segment_id IS NULL AND NEW.kind = 'chat')\n"
        "    EXECUTE FUNCTION recall_message_update();",
        "    FOR EACH ROW EXECUTE FUNCTION recall_message_update();",
        within="0014_baseline.sql",
    ),
    M(
        "pg-recall-index-takes-private-pad-entries",
        PRIVACY,
        "FOR EACH ROW WHEN (NEW.mode = 'normal' AND NEW.segment_id IS NULL) EXECUTE FUNCTION recall_pad_insert();",
        "FOR EACH ROW EXECUTE FUNCTION recall_pad_insert();",
        within="0014_baseline.sql",
    ),
    M(
        "pg-private-message-moves-nudges",
        PRIVACY,
        "FOR EACH ROW WHEN (NEW.role = 'user' AND NEW.mode = 'normal' AND NEW.segment_id IS NULL)",
        "FOR EACH ROW WHEN (NEW.role = 'user')",
        within="0014_baseline.sql",
    ),
    M(
        "pg-delivery-leaves-its-message-segment",
        PRIVACY,
        "    IF (SELECT segment_id FROM messages WHERE id = NEW.message_id) IS DISTINCT FROM NEW.segment_id THEN",
        "    IF false THEN",
        within="0014_baseline.sql",
    ),
    M(
        "pg-mirror-of-another-conversation",
        PRIVACY,
        "        OR (SELECT conversation_id FROM bindings WHERE id = NEW.binding_id) IS DISTINCT FROM NEW.conversation_id\n",
        "",
        within="0014_baseline.sql",
    ),
    M(
        "pg-delivery-outside-the-open-interval",
        PRIVACY,
        "        WHERE s.conversation_id = NEW.conversation_id AND s.ended_at IS NULL AND s.id IS DISTINCT FROM NEW.segment_id",
        "        WHERE false",
        within="0014_baseline.sql",
    ),
    M(
        "pg-password-in-an-error-line",
        PRIVACY,
        "        line = line.replace(target.password, _MASK)",
        "        pass",
    ),
    M(
        "pg-unknown-url-echoed",  # a value that is not a URL has no place its password could be masked in
        PRIVACY,
        '            f"{SETTING}: not a PostgreSQL URL (the value is not shown); "',
        '            f"{SETTING}: {url} not a PostgreSQL URL (the value is not shown); "',
    ),
    M(
        "settings-database-url-unchecked",
        RELIABILITY,
        '            parts.scheme not in {"postgresql", "postgres"}',
        "            False",
    ),
    M(
        "pg-read-not-one-snapshot",
        RELIABILITY,
        'READ = "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"',
        'READ = "BEGIN READ ONLY"',
    ),
    M(
        "pg-read-waits-behind-the-writes",  # the valve's mode read then times out under load and fails closed
        RELIABILITY,
        "        pool, conn = await self._take(reads=True)",
        "        pool, conn = await self._take()",
    ),
    M(
        "pg-lost-connection-left-in-the-other-pool",  # after a restart each stale connection would fail one more
        RELIABILITY,
        "                await self._drop_lost_connections()",
        "                pass",
    ),
    M(
        "pg-ref-takes-an-earlier-writes-id",
        RELIABILITY,
        '        begin.append("DISCARD SEQUENCES")',
        "        pass",
    ),
    M(
        "pg-statement-named-before-its-parse-was-answered",  # a skipped Parse's name then fails every later trip
        RELIABILITY,
        '                    name = naming[key] = b"companion_%d" % next(self._names)',
        '                    name = naming[key] = self._prepared[key] = b"companion_%d" % next(self._names)',
    ),
    M(
        "pg-cancelled-trip-leaves-its-pipeline-open",  # its answers would be read as the next trip's
        RELIABILITY,
        "            if not self._conn.broken and pgconn.pipeline_status != PipelineStatus.OFF:",
        "            if False:",
    ),
    M(
        "pg-trip-larger-than-the-socket-buffer-waits-to-read",  # its query never sent whole: the trip hangs
        RELIABILITY,
        "            while wait == _WAIT_R:",
        "            while True:",
        also=("tests/adapters/test_postgres_engine.py",),
    ),
    M(
        "pg-cancelled-trip-reads-its-answers",  # its reader, called in the round of the cancel, raises into the loop
        RELIABILITY,
        "        if future.done():  # the trip cancelled in this same round of the loop, before its reader was called",
        "        if False:",
        also=("tests/adapters/test_postgres_engine.py",),
    ),
    M(
        "pg-mark-waits-for-the-disk",
        RELIABILITY,
        '            begin.append("SET LOCAL synchronous_commit = off")',
        "            pass",
    ),
    M(
        "pg-migrations-not-serialised",
        RELIABILITY,
        "            await conn.execute(LOCK.encode())",
        "            pass",
    ),
    M(
        "pg-second-gateway-admitted",
        RELIABILITY,
        "            if (held := await taken_or_holder(conn, self.target, sql, KEYS[self.role])) is not None:",
        "            if (held := await taken_or_holder(conn, self.target, sql, KEYS[self.role])) is None:",
    ),
    M(
        "pg-lost-instance-lock-unnoticed",
        RELIABILITY,
        "        self._lost.set()",
        "        pass",
        within="Holding._watched",
    ),
    # --- a turn in few trips (issue 31, B): the SQLite engine, one-trip writes, the ledger -------
    M(
        "engine-raise-not-translated",
        PRIVACY,
        "        if kind is not None and isinstance(error, sqlite3.OperationalError):",
        "        if False:",
    ),
    M(
        "engine-ref-names-an-insert-that-stored-nothing",
        RELIABILITY,
        "        if statement.inserts is not None and cursor.rowcount > 0:",
        "        if statement.inserts is not None:",
    ),
    M(
        "engine-unsynced-write-fsynced",
        RELIABILITY,
        '        raw.execute("PRAGMA synchronous = NORMAL")',
        '        raw.execute("PRAGMA synchronous = FULL")',
    ),
    M(
        "analytics-run-written-while-a-segment-is-open",
        PRIVACY,
        '            f" SELECT :c, :started, :ended, :status WHERE {unguarded}",',
        '            f" SELECT :c, :started, :ended, :status WHERE {unguarded} OR 1 = 1",',
    ),
    M(
        "reply-handed-over-ahead-of-an-earlier-pending-row",
        RELIABILITY,
        '" AND e.platform = deliveries.platform AND e.chat_id = deliveries.chat_id AND e.id < deliveries.id"',
        '" AND e.platform = deliveries.platform AND e.chat_id = deliveries.chat_id AND e.id < 0"',
    ),
    M(
        "private-reply-handed-over-without-the-clock",
        PRIVACY,
        "            written = None  # a private interval's row is picked with the clock, at its send, as below",
        "            pass",
    ),
    M(
        "context-watermark-of-any-summary",
        RELIABILITY,
        "\" (SELECT watermark FROM summaries WHERE conversation_id = :c AND segment_id IS NULL AND mode = 'normal'), 0)\"",
        '" (SELECT max(watermark) FROM summaries WHERE conversation_id = :c), 0)"',
    ),
    M(
        "context-fold-counts-the-window",
        RELIABILITY,
        "            needs_fold = reads.messages_after - newer >= self._budget.fold_min",
        "            needs_fold = reads.messages_after >= self._budget.fold_min",
    ),
    M(
        "telegram-press-ledger-coalesced",
        RELIABILITY,
        "        if update.callback_query is not None:\n            await self._persist()",
        "        if False:\n            await self._persist()",
    ),
    M(
        "telegram-ledger-marks-lost-at-the-stop",
        RELIABILITY,
        "        await self._persist()  # the ledger's last marks, before the offset confirms them to Telegram",
        "        pass",
    ),
    M(
        "export-chunk-repeats-its-placeholders",  # an export in chunks gives an interval's placeholder twice, or stops early
        RELIABILITY,
        "            fresh = [i for i in items if last is None or timeline_order(i) > last]",
        "            fresh = [i for i in items if last is None or timeline_order(i) >= last]",
    ),
    # --- companion move-to-postgres --------------------------------------------------------------------
    M(
        "move-leaves-waiting-webhook-updates-behind",  # Telegram got its 200: an update left in the file is never answered
        RELIABILITY,
        "    if waiting:",
        "    if False:",
        within="_refuse_waiting_updates",
        also=(
            "tests/bot/test_move_to_postgres.py::test_an_update_waiting_in_the_webhook_inbox_is_refused_and_nothing_changes",
        ),
    ),
    M(
        "move-copies-private-messages",
        PRIVACY,
        '    "messages": Copy(NORMAL),',
        '    "messages": Copy(),',
        also=("tests/bot/test_move_to_postgres.py",),
    ),
    M(
        "move-copies-private-pad-entries",
        PRIVACY,
        '    "pad_entries": Copy(NORMAL),',
        '    "pad_entries": Copy(),',
        also=("tests/bot/test_move_to_postgres.py",),
    ),
    M(
        "move-copies-private-summaries",
        PRIVACY,
        '    "summaries": Copy(NORMAL),',
        '    "summaries": Copy(),',
        also=("tests/bot/test_move_to_postgres.py",),
    ),
    M(
        "move-copies-web-sessions",
        PRIVACY,
        '    "web_sessions": Skip("sign-in credentials: sign in again on the new store"),',
        '    "web_sessions": Copy(),',
        also=("tests/bot/test_move_to_postgres.py",),
    ),
    M(
        "move-copies-the-files-checkpoint-flag",
        RELIABILITY,
        """    "adapter_state": Copy(f"name NOT IN ('{CHECKPOINT_OWED}', '{MARKER}')"),""",
        """    "adapter_state": Copy(f"name NOT IN ('{MARKER}')"),""",
        also=("tests/bot/test_move_to_postgres.py",),
    ),
    M(
        "move-keeps-the-intervals-in-the-file",
        PRIVACY,
        '        deleted = db.execute("DELETE FROM segments").rowcount',
        '        deleted = db.execute("DELETE FROM segments WHERE 0").rowcount',
        also=("tests/bot/test_move_to_postgres.py",),
    ),
    M(
        "move-copies-without-a-plan-entry",
        RELIABILITY,
        "    if missing:",
        "    if False:",
        within="plan_steps",
        also=("tests/bot/test_move_to_postgres.py",),
    ),
    M(
        "move-into-a-target-holding-rows",
        RELIABILITY,
        "        if holding:",
        "        if False:",
        within="_copy_unless_moved",
        also=("tests/bot/test_move_to_postgres.py",),
    ),
    M(
        "move-resumes-over-another-files-rows",
        RELIABILITY,
        '            if marker.get("digest") != _digest_only(source):',
        "            if False:",
        also=("tests/bot/test_move_to_postgres.py",),
    ),
    M(
        "move-leaves-identities-at-one",
        RELIABILITY,
        "        if highest > 0:",
        "        if False:",
        within="_set_identities",
        also=("tests/bot/test_move_to_postgres.py",),
    ),
    M(
        "postgres-instance-lock-is-the-file-lock",
        RELIABILITY,
        "    if settings.database_url is None:\n        return FileInstanceLock(",
        "    if True:\n        return FileInstanceLock(",
        also=("tests/bot/test_postgres_wire.py",),
    ),
    M(
        "gateway-runs-on-after-losing-its-instance-lock",
        RELIABILITY,
        "    await lock.lost()\n",
        "    await asyncio.Event().wait()\n",
        also=("tests/bot/test_postgres_wire.py",),
    ),
    M(
        "postgres-backup-not-refused",
        PRIVACY,
        "    if settings.database_url is not None:\n        raise ConfigError(BACKUP_ON_POSTGRES)",
        "    if False:\n        raise ConfigError(BACKUP_ON_POSTGRES)",
        also=("tests/bot/test_postgres_wire.py",),
    ),
    M(
        "postgres-restore-keeps-web-sign-ins",
        PRIVACY,
        "        sign_ins = await stores.web.delete_every_sign_in()",
        "        sign_ins = 0",
        also=("tests/bot/test_postgres_wire.py",),
    ),
    M(
        "postgres-restore-skips-expiry",
        PRIVACY,
        "        segments = await stores.modes.delete_expired_segments(now)",
        "        segments = 0",
        also=("tests/bot/test_postgres_wire.py",),
    ),
    M(
        "postgres-restore-leaves-the-key-folder-unsettled",
        PRIVACY,
        "        keyless = (await stores.modes.reconcile_keys(now)).keyless",
        "        keyless = 0",
        also=("tests/bot/test_postgres_wire.py",),
    ),
    M(
        "chat-runs-on-after-losing-its-instance-lock",
        RELIABILITY,
        "        lost = asyncio.ensure_future(lock.lost())",
        "        lost = asyncio.ensure_future(asyncio.Event().wait())",
        also=("tests/bot/test_postgres_wire.py",),
    ),
    M(
        "telegram-updates-parsed-twice",
        RELIABILITY,
        "        updates_request.bind(app.bot)  # each update parsed once, there, with the bot (adapters/telegram/updates.py)",
        "        pass",
        also=("tests/adapters/test_telegram_updates.py",),
    ),
    M(
        "telegram-part-sent-outside-its-topic",  # the part goes without send_message's message_thread_id
        RELIABILITY,
        '            "message_thread_id": thread_id,',
        '            "message_thread_id": None,',
        also=("tests/adapters/test_telegram_updates.py",),
    ),
    M(
        "telegram-stream-posted-outside-its-topic",  # a reply shown while written leaves its forum topic
        RELIABILITY,
        '"message_thread_id": thread_id, "reply_parameters": quote}',
        '"message_thread_id": None, "reply_parameters": quote}',
        also=("tests/adapters/test_telegram_updates.py",),
    ),
    M(
        "telegram-one-part-shortcut-keeps-whitespace",  # a fitting text with blank ends skips the split's trim
        RELIABILITY,
        "    if text and not text[0].isspace() and not text[-1].isspace() and (units := _units(text)) <= limit:",
        "    if text and (units := _units(text)) <= limit:",
        also=("tests/adapters/test_telegram_formatting.py",),
    ),
    M(
        "lean-client-sends-url-credentials-unauthenticated",  # user:password@ in a model URL stops being sent
        RELIABILITY,
        "            and not (request.url.username or request.url.password)\n",
        "",
        also=("tests/adapters/test_http_client.py",),
    ),
    M(
        "lean-client-drops-the-cookies-a-server-sets",  # a model server's affinity cookie is not sent back
        RELIABILITY,
        '        if "set-cookie" in response.headers:',
        "        if False:",
        also=("tests/adapters/test_http_client.py",),
    ),
    M(
        "lean-client-request-without-the-client-timeout",  # a request made without the client waits for ever
        RELIABILITY,
        "        self._set_timeout(request)\n",
        "",
        within="LeanClient.send",
        also=("tests/adapters/test_http_client.py",),
    ),
    M(
        "lean-client-ignores-follow-redirects",
        RELIABILITY,
        "            and not (self.follow_redirects if isinstance(follow_redirects, UseClientDefault) else follow_redirects)\n",
        "",
        also=("tests/adapters/test_http_client.py",),
    ),
    M(
        "lean-client-ignores-event-hooks",
        RELIABILITY,
        '            and not self.event_hooks["request"]\n',
        "",
        also=("tests/adapters/test_http_client.py",),
    ),
    M(
        "lean-client-failure-without-its-request",  # httpx's error no longer names the request that failed
        RELIABILITY,
        "        with request_context(request=request):",
        "        if True:",
        also=("tests/adapters/test_http_client.py",),
    ),
    M(
        "lean-client-logs-no-request-line",  # an operator who turned httpx's log on no longer sees the requests
        RELIABILITY,
        "        if _HTTPX_LOG.isEnabledFor(logging.INFO):",
        "        if False:",
        also=("tests/adapters/test_http_client.py", "tests/adapters/test_telegram_media.py"),
    ),
    M(
        "lean-client-takes-httpx-s-whole-path",  # every request through auth, redirects, timer and jar again
        RELIABILITY,
        "        if not self.plain(request, auth, follow_redirects):",
        "        if True:",
        also=("tests/adapters/test_http_client.py",),
    ),
    M(
        "lean-client-pools-left-on-anyio",  # the Bot API and model links pay anyio's scopes on every read again
        RELIABILITY,
        "                pool._network_backend = backend",
        "                pass",
        also=("tests/adapters/test_http_client.py",),
    ),
    M(
        "asyncio-backend-read-waits-without-its-timeout",  # a silent server holds the turn past the read timeout
        RELIABILITY,
        '                    await connection.wait("reading", timeout)',
        '                    await connection.wait("reading", None)',
        within="AsyncioStream.read",
        also=("tests/adapters/test_http_client.py",),
    ),
    M(
        "asyncio-backend-reset-read-as-a-clean-end",
        RELIABILITY,
        "                    raise httpcore.ReadError(str(connection.lost) or type(connection.lost).__name__)",
        '                    return b""',
        also=("tests/adapters/test_http_client.py",),
    ),
    M(
        "asyncio-backend-write-never-waits-for-the-peer",  # a stalled upload is never timed out
        RELIABILITY,
        "        while connection.paused and not connection.ended:",
        "        while False:",
        also=("tests/adapters/test_http_client.py",),
    ),
    M(
        "asyncio-backend-tls-failure-unmapped",  # a refused certificate leaves as ssl.SSLError, not httpx's error
        RELIABILITY,
        "        except (OSError, ssl.SSLError) as exc:",
        "        except ZeroDivisionError as exc:",
        also=("tests/adapters/test_http_client.py",),
    ),
    M(
        "asyncio-backend-tls-reading-resumed-on-the-raw-transport",  # a large download over TLS stalls
        RELIABILITY,
        "        self._connection.transport = transport  # what it pauses and resumes from now on: the TLS transport",
        "        pass",
        also=("tests/adapters/test_http_client.py",),
    ),
    M(
        "asyncio-backend-reading-never-resumed",  # a body larger than the buffers stalls once reading paused
        RELIABILITY,
        "            self._transport.resume_reading()",
        "            pass",
        within="AsyncioStream.read",
        also=("tests/adapters/test_http_client.py",),
    ),
    M(
        "asyncio-backend-closed-stream-handed-out-again",  # the model link's request after a dropped stream fails once
        RELIABILITY,
        "        self._connection.ended = True  # at once: the pool asks `is_readable` before the transport has closed",
        "        pass",
        also=("tests/adapters/test_http_client.py", "tests/adapters/test_stream_fallback.py"),
    ),
    M(
        "asyncio-backend-closed-idle-connection-used-again",  # the next request fails on a connection the server closed
        RELIABILITY,
        '            return bool(connection.chunks) or connection.ended or is_socket_readable(transport.get_extra_info("socket"))',
        "            return False",
        also=("tests/adapters/test_http_client.py",),
    ),
    M(
        "stream-row-in-flight-not-taken-over",
        RELIABILITY,
        "            await asyncio.shield(self._writing)  # the write goes on if the turn is cut off meanwhile",
        "            pass",
    ),
    M(
        "key-lost-at-start-not-closed-by-the-start",  # a message sent in an interval whose key expired while down reaches the model
        PRIVACY,
        '            closed.update(row["conversation_id"] for row in before.rows)',
        "            pass",
        also=("tests/core/test_outbox.py",),
    ),
    M(
        "pg-pool-wait-unbounded-and-untranslated",  # a server gone: a lane waits the pool's 30 s, then no StoreError
        RELIABILITY,
        "        except psycopg.Error as exc:  # psycopg_pool.PoolTimeout\n            raise translate(exc, self.target) from exc",
        "        except ImportError as exc:\n            raise translate(exc, self.target) from exc",
        also=("tests/adapters/test_postgres_engine.py",),
    ),
    M(
        "doctor-keyless-intervals-not-counted",  # an operator never told that intervals are masked for lost keys
        RELIABILITY,
        "    keyless = sum(1 for key in named if key is None or key not in held)",
        "    keyless = 0",
        also=("tests/bot/test_doctor_postgres.py",),
    ),
    # --- served tools behind the wall (issue 32) -------------------------------------------------------
    M(
        "served-tools-offered-in-private-mode",  # every MCP tool in a private request: the canary reaches its server
        PRIVACY,
        '    {"memory-write", "memory-read", "goal", "follow-up", "export", "publish", "delivery", "analytics", SERVED}',
        '    {"memory-write", "memory-read", "goal", "follow-up", "export", "publish", "delivery", "analytics"}',
    ),
    M(
        "served-tool-named-for-private-mode-whatever-the-owner-said",
        PRIVACY,
        "        tags=frozenset({SERVED_PRIVATE if served.private_allowed else SERVED}),",
        "        tags=frozenset({SERVED_PRIVATE}),",
    ),
    M(
        "private-served-call-writes-a-tool-operation-row",  # the call of a private turn outlives it as a row
        PRIVACY,
        "        if outcome.server is not None and private:\n            return\n",
        "        if False:\n            return\n",
    ),
    M(
        "served-tool-shadows-a-built-in-one",  # two tools of one name in a request: the model's call is ambiguous
        RELIABILITY,
        "            if served.name in self._tools or served.name in tools or not _TOOL_NAME.fullmatch(served.name):",
        "            if served.name in tools or not _TOOL_NAME.fullmatch(served.name):",
    ),
    M(
        "served-call-reported-without-its-server",
        RELIABILITY,
        "                server=outcome.server,\n",
        "                server=None,\n",
    ),
    M(
        "served-adapter-bug-ends-the-turn",  # the port never raises; an adapter that does must not cost the answer
        RELIABILITY,
        "        except Exception as exc:  # noqa: BLE001 - the port never raises; an adapter bug must not end the turn",
        "        except ValueError as exc:  # noqa: BLE001 - the port never raises; an adapter bug must not end the turn",
    ),
    M(
        "schema-takes-a-served-call-inside-an-interval",  # SQLite's CHECK: the last wall if the responder wrote one
        PRIVACY,
        "ALTER TABLE tool_operations ADD COLUMN server TEXT CHECK (server IS NULL OR segment_id IS NULL);",
        "ALTER TABLE tool_operations ADD COLUMN server TEXT;",
        also=("tests/adapters/store/test_memory_contract.py",),
    ),
    M(
        "pg-schema-takes-a-served-call-inside-an-interval",
        PRIVACY,
        "ALTER TABLE tool_operations ADD COLUMN server text CHECK (server IS NULL OR segment_id IS NULL);",
        "ALTER TABLE tool_operations ADD COLUMN server text;",
        also=("tests/adapters/store/test_memory_contract.py",),
    ),
    M(
        "mcp-sdk-imported-without-its-configuration",  # every start pays for an SDK nobody configured
        RELIABILITY,
        "    if settings.mcp_config is None:\n        return None\n",
        "    if settings.mcp_config is None:\n        import adapters.mcp.hub  # noqa: F401\n        return None\n",
        also=("tests/bot/test_served_tools_wire.py",),
    ),
    # --- MCP servers (adapters/mcp/) ------------------------------------------
    M(
        "mcp-call-not-cut-at-its-timeout",  # a hanging tool holds the turn until the model's own timeout
        RELIABILITY,
        "                    with anyio.fail_after(timeout):\n                        result = await connection.session.call_tool(name, arguments)",
        "                    with anyio.fail_after(None):\n                        result = await connection.session.call_tool(name, arguments)",
        also=("tests/adapters/mcp/test_mcp_hub.py", "tests/bot/test_served_tools_outage_wire.py"),
    ),
    M(
        "mcp-result-not-cut",  # a server's 10 MB answer goes whole into the request
        RELIABILITY,
        "    if len(data) <= MAX_RESULT_BYTES:\n        return text",
        "    if True:\n        return text",
        also=("tests/adapters/mcp/test_mcp_hub.py",),
    ),
    M(
        "mcp-process-group-spared-when-the-server-left",  # the SDK's way: a child of a server that quit outlives the stop
        RELIABILITY,
        "    if kill_group(pgid, signal.SIGTERM):",
        "    if process.returncode is None and kill_group(pgid, signal.SIGTERM):",
        also=("tests/adapters/mcp/test_mcp_hub.py",),
    ),
    M(
        "mcp-process-group-not-killed-after-the-grace",  # a child ignoring SIGTERM outlives the stop
        RELIABILITY,
        "        if kill_group(pgid, signal.SIGKILL):",
        "        if kill_group(pgid, 0):",
        also=("tests/adapters/mcp/test_mcp_hub.py",),
    ),
    M(
        "mcp-timed-out-call-not-cancelled-at-the-server",  # each call cut at its timeout runs on in the server
        RELIABILITY,
        "            await _cancel(connection, request_id)",
        "            pass",
        also=("tests/adapters/mcp/test_mcp_hub.py", "tests/bot/test_served_tools_outage_wire.py"),
    ),
    M(
        "mcp-session-end-leaves-calls-waiting",  # a server that died mid-call holds the turn until the timeout
        RELIABILITY,
        "                    for call in server.calls:\n                        call.cancel()",
        "                    for call in server.calls:\n                        pass",
        also=("tests/adapters/mcp/test_mcp_hub.py", "tests/bot/test_served_tools_outage_wire.py"),
    ),
    M(
        "mcp-tool-list-change-ignored",  # new tools unseen until a restart
        RELIABILITY,
        "            server.relist = True\n            server.wake.set()",
        "            server.relist = False\n            server.wake.set()",
        also=("tests/adapters/mcp/test_mcp_hub.py", "tests/bot/test_served_tools_outage_wire.py"),
    ),
    M(
        "mcp-served-tool-shadows-a-built-in",  # a server's "remember" offered beside (or for) the companion's own
        RELIABILITY,
        "            elif name in taken:",
        "            elif False:",
        also=("tests/adapters/mcp/test_mcp_hub.py", "tests/bot/test_doctor_mcp.py"),
    ),
    M(
        "mcp-stray-line-logged",  # a server's stray stdout (its own text, anything) into our log
        PRIVACY,
        "                        if message is None:\n                            state.stray_lines += 1\n                            continue",
        '                        if message is None:\n                            log.warning("stray line %s", line)\n                            continue',
        also=("tests/adapters/mcp/test_mcp_hub.py",),
    ),
    M(
        "mcp-sdk-logs-messages-at-debug",  # a tool call's arguments and result in the log at COMPANION_LOG_LEVEL=DEBUG
        PRIVACY,
        '    "mcp": logging.WARNING,',
        '    "mcp_": logging.WARNING,',
        also=("tests/adapters/mcp/test_mcp_hub.py",),
    ),
    M(
        "mcp-private-allowed-over-http",  # a server reached over HTTP handed a private turn's words
        PRIVACY,
        '            self.transport == "stdio"\n            and self.private == "allowed"',
        '            self.transport in ("stdio", "http")\n            and self.private == "allowed"',
        also=("tests/adapters/mcp/test_mcp_config.py",),
    ),
    M(
        "mcp-private-allowed-over-http-in-the-file",
        PRIVACY,
        '    if private == "allowed" and transport == "http":',
        "    if False:",
        also=("tests/adapters/mcp/test_mcp_config.py",),
    ),
    M(
        "mcp-private-allowed-unmarked",  # a server the owner never marked offered in private mode
        PRIVACY,
        '            and self.private == "allowed"\n            and self.include is not None',
        "            and True\n            and self.include is not None",
        also=("tests/adapters/mcp/test_mcp_config.py",),
    ),
    M(
        "mcp-private-allowed-by-a-glob",  # include "*" hands private mode every tool of a marked server
        PRIVACY,
        "            and tool in self.include\n",
        "            and self.admits(tool)\n",
        also=("tests/adapters/mcp/test_mcp_config.py", "tests/adapters/mcp/test_mcp_hub.py"),
    ),
    M(
        "mcp-include-names-a-built-in",
        RELIABILITY,
        "        if tool in builtin:",
        "        if False:",
        also=("tests/adapters/mcp/test_mcp_config.py",),
    ),
    M(
        "mcp-secret-in-a-repr",  # an env value in any log line or error that shows the configuration
        PRIVACY,
        "    env: Mapping[str, str] = dataclasses.field(default_factory=dict, repr=False)",
        "    env: Mapping[str, str] = dataclasses.field(default_factory=dict)",
        also=("tests/adapters/mcp/test_mcp_config.py",),
    ),
    M(
        "mcp-call-not-checked-against-the-catalogue",  # a tool the owner's exclude left out is run when asked by name
        PRIVACY,
        "        if not any(t.server == server and t.name == name for t in self._catalogue):",
        "        if False:",
        also=("tests/adapters/mcp/test_mcp_hub.py",),
    ),
    M(
        "mcp-server-given-the-companions-environment",  # the bot tokens and keys handed to every stdio server
        PRIVACY,
        "    env = {**get_default_environment(), **server.env}",
        "    env = {**os.environ, **server.env}",
        also=("tests/adapters/mcp/test_mcp_hub.py",),
    ),
    M(
        "mcp-sdk-imported-whole",  # the SDK's servers (starlette, uvicorn ...) loaded into the gateway: about 10 MB
        RELIABILITY,
        '    sys.modules["mcp"] = importlib.util.module_from_spec(spec)',
        "    pass",
        also=("tests/adapters/mcp/test_mcp_imports.py",),
    ),
    M(
        "schema-size-kept-for-another-schema",  # a reused id would size a request by a dead schema's repr
        RELIABILITY,
        "    if known is None or known[0] is not schema:",
        "    if known is None:",
        also=("tests/core/test_long_messages.py",),
    ),
    M(
        "mcp-server-outlives-a-killed-companion",  # a server that ignores its end of input runs on after a SIGKILL
        RELIABILITY,
        '    "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)\\n"  # 1: PR_SET_PDEATHSIG',
        '    "pass\\n"  # 1: PR_SET_PDEATHSIG',
        also=("tests/bot/test_served_tools_outage_wire.py",),
    ),
    M(
        "context-read-ahead-shows-the-message-twice",  # a read after the commit holds it: added again as upcoming
        RELIABILITY,
        "    if any(item.position == ahead.message_id and item.masked_segment_id is None for item in items):",
        "    if False:",
        also=("tests/core/test_context_read_ahead.py",),
    ),
    M(
        "context-read-ahead-window-one-longer",  # the upcoming message on top of a full window of read items
        RELIABILITY,
        "    kept = items[max(0, len(items) - (limit - 1)) :]",
        "    kept = list(items)",
        also=("tests/core/test_context_read_ahead.py",),
    ),
    # --- Telegram webhooks and their inbox (issue 33) ---------------------------------------------
    M(
        "webhook-wrong-secret-accepted",  # anyone who finds the URL could speak as any user
        PRIVACY,
        '        if not hmac.compare_digest(given.encode("utf-8", "replace"), self._secret):',
        "        if False:",
        also=(
            "tests/adapters/test_web_webhook.py",
            "tests/bot/test_webhook_wire.py::test_a_delivery_without_the_secret_or_with_a_wrong_one_is_refused_and_stored_nowhere",
        ),
    ),
    M(
        "webhook-missing-secret-not-refused",
        PRIVACY,
        "        if given is None:\n            self._refused()\n            return web.Response(status=401)",
        "        if given is None:\n            given = ''",
        also=(
            "tests/adapters/test_web_webhook.py",
            "tests/bot/test_webhook_wire.py::test_a_delivery_without_the_secret_or_with_a_wrong_one_is_refused_and_stored_nowhere",
        ),
    ),
    M(
        "webhook-csrf-skipped-for-every-route",  # the webhook's exemption from the CSRF check taken by every route
        PRIVACY,
        "        if request.method not in UNSAFE_METHODS or getattr(request.match_info.handler, _BY_SECRET, False):",
        "        if request.method not in UNSAFE_METHODS or True:",
        also=("tests/adapters/test_web_service.py",),
    ),
    M(
        "webhook-200-for-an-update-not-stored",  # Telegram drops what it got a 200 for: lost
        RELIABILITY,
        "            return web.Response(status=503)\n        return web.Response(status=200)",
        "            return web.Response(status=200)\n        return web.Response(status=200)",
        also=(
            "tests/adapters/test_web_webhook.py",
            "tests/bot/test_webhook_wire.py::test_an_update_the_inbox_cannot_store_is_refused_and_delivered_again",
        ),
    ),
    M(
        "webhook-redelivery-stored-again",  # an update Telegram delivers again after its lost 200 is handled twice
        RELIABILITY,
        '                " ON CONFLICT (platform, update_id) DO NOTHING",',
        '                " ON CONFLICT (platform, update_id) DO UPDATE SET body = excluded.body,'
        ' key_id = excluded.key_id, handled_at = NULL",',
        also=(
            "tests/adapters/store/test_inbox_contract.py",
            "tests/bot/test_webhook_wire.py::test_an_update_redelivered_after_a_timeout_is_answered_once",
        ),
    ),
    M(
        "webhook-update-in-hand-taken-again",  # a stored update taken again while its turn runs
        RELIABILITY,
        "                stored = await inbox.take(PLATFORM, TAKE_LIMIT, skip=frozenset(self._inflight))",
        "                stored = await inbox.take(PLATFORM, TAKE_LIMIT, skip=frozenset())",
        also=("tests/bot/test_webhook_wire.py::test_an_update_redelivered_after_a_timeout_is_answered_once",),
    ),
    M(
        "webhook-inbox-body-not-sealed",  # PostgreSQL's WAL and backups would keep a private message readable
        PRIVACY,
        "            stored = self._transit.seal(key_id, _place(platform, update_id), body)",
        "            stored = body",
        also=("tests/adapters/store/test_inbox_contract.py",),
    ),
    M(
        "webhook-handled-body-kept",  # the inbox keeps every update's words after it was answered
        PRIVACY,
        "        self._ledger.finish(update.update_id)\n        await self._settled(update.update_id)\n",
        "        self._ledger.finish(update.update_id)\n",
        also=(
            "tests/bot/test_webhook_wire.py::test_webhook_updates_of_several_chats_are_answered_once_and_in_order_and_a_clean_stop_removes_the_webhook",
        ),
    ),
    M(
        "webhook-transit-key-kept-after-its-rows",  # a key no row needs outlives them: the WAL stays readable
        PRIVACY,
        "            lambda: self.keys.reconcile(set(needed), spare_after=now - TRANSIT_SEAL_SECONDS - SPARE_SECONDS)",
        "            lambda: None",
        also=("tests/adapters/store/test_inbox_contract.py",),
    ),
    M(
        "webhook-transit-key-expiry-ignored",  # a row left past its key's life would still open
        PRIVACY,
        "        expired = await asyncio.to_thread(self.keys.expire, now)",
        "        expired: list[str] = []",
        also=("tests/adapters/store/test_inbox_contract.py",),
    ),
    M(
        "webhook-host-not-answered",  # Telegram's Host through the proxy refused (400): nothing ever delivered
        RELIABILITY,
        "        allowed = AllowedHosts(allowed.entries | AllowedHosts.parse([webhook_host]).entries)",
        "        pass",
        also=("tests/bot/test_webhook_wire.py::test_an_update_redelivered_after_a_timeout_is_answered_once",),
    ),
    M(
        "shared-database-on-sqlite",  # several processes on one SQLite file: no registry, no claims, all alone
        RELIABILITY,
        "        if self.shared_database and self.database_url is None:",
        "        if False:",
        also=("tests/bot/test_database_settings.py",),
    ),
    M(
        "shared-process-alive-on-a-stale-heartbeat",  # a wedged process counts as alive: its chats are never taken
        RELIABILITY,
        "p.heartbeat_at > {NOW} - {DEAD_AFTER_SECONDS} AND EXISTS (",
        "p.heartbeat_at > 0 AND EXISTS (",
        also=("tests/adapters/test_postgres_processes.py",),
    ),
    M(
        "shared-process-alive-without-its-key",  # a killed process's fresh row counts as alive for up to 10 s
        RELIABILITY,
        "p.heartbeat_at > {NOW} - {DEAD_AFTER_SECONDS} AND EXISTS (",
        "p.heartbeat_at > {NOW} - {DEAD_AFTER_SECONDS} OR EXISTS (",
        also=("tests/adapters/test_postgres_processes.py",),
    ),
    M(
        "shared-process-takes-the-run-key-exclusive",  # a second shared gateway is refused (or one alone admitted)
        RELIABILITY,
        "            shared = b\"SELECT pg_try_advisory_lock_shared(hashtext('companion'), %s)\"",
        "            shared = b\"SELECT pg_try_advisory_lock(hashtext('companion'), %s)\"",
        also=("tests/adapters/test_postgres_processes.py",),
    ),
    M(
        "shared-process-beside-one-alone",  # a shared gateway starts beside one that believes itself alone
        RELIABILITY,
        '            if (held := await taken_or_holder(conn, self.target, shared, KEYS["run"])) is not None:',
        '            if (held := await taken_or_holder(conn, self.target, shared, KEYS["run"])) is None:',
        also=("tests/adapters/test_postgres_processes.py",),
    ),
    M(
        "shared-process-loss-unnoticed",  # a process whose connection dropped serves on, dead to the others
        RELIABILITY,
        '            return f"its connection dropped ({type(exc).__name__})"',
        '            await asyncio.Event().wait()\n            return ""',
        also=("tests/adapters/test_postgres_processes.py",),
    ),
    M(
        "shared-process-beats-without-its-row",  # a process whose row was removed as dead serves on, unseen
        RELIABILITY,
        "                if cursor.rowcount != 1:",
        "                if False:",
        also=("tests/adapters/test_postgres_processes.py",),
    ),
    M(
        "shared-gateway-polls-telegram",  # two pollers of one token: Telegram refuses one, updates split between them
        RELIABILITY,
        "    if settings.telegram_token and settings.telegram_webhook_url is None:\n        # Long polling allows one",
        "    if False:\n        # Long polling allows one",
        also=("tests/bot/test_shared_database_wire.py",),
    ),
    M(
        "shared-fence-lets-a-lost-holder-write",  # a process whose chat was taken over writes into it beside the new holder
        PRIVACY,
        "SELECT 1 FROM chat_claims WHERE conversation_id = NEW.conversation_id AND holder IS DISTINCT FROM me::bigint",
        "SELECT 1 FROM chat_claims WHERE FALSE AND holder IS DISTINCT FROM me::bigint",
        also=("tests/adapters/test_postgres_claims.py",),
    ),
    M(
        "shared-claim-taken-from-a-live-holder",  # two processes answer one chat: order and privacy split between them
        RELIABILITY,
        '                f" WHERE chat_claims.holder IS DISTINCT FROM excluded.holder AND {_HOLDER_GONE}"',
        '                " WHERE chat_claims.holder IS DISTINCT FROM excluded.holder"',
        also=("tests/adapters/test_postgres_claims.py",),
    ),
    M(
        "shared-start-closes-a-live-processes-interval",  # a second gateway's start ends a person's private mode
        PRIVACY,
        '        if self._process_id is None:\n            return "", {}',
        '        if True:\n            return "", {}',
        also=("tests/adapters/test_postgres_claims.py",),
    ),
    M(
        "shared-start-closes-a-live-processes-interval-as-keyless",  # its key is in the other's folder only
        PRIVACY,
        '        row["id"] for row in found.rows if (row["key_id"] is None or row["key_id"] in lost) and row["id"] in closable',
        '        row["id"] for row in found.rows if (row["key_id"] is None or row["key_id"] in lost)',
        also=("tests/adapters/test_postgres_claims.py",),
    ),
    M(
        "shared-turn-runs-where-the-chat-is-not-held",  # a gateway handles a chat another live gateway holds
        RELIABILITY,
        '            if claim is None:\n                log.info("conversation %s is held by another process',
        '            if False:\n                log.info("conversation %s is held by another process',
        also=("tests/bot/test_shared_database_wire.py",),
    ),
    M(
        "shared-take-over-recovers-nothing",  # a dead gateway's private interval stays open for whoever claims it
        PRIVACY,
        "        if taken:\n            await self.taken_over(taken)",
        "        if False:\n            await self.taken_over(taken)",
        also=("tests/bot/test_shared_database_wire.py",),
    ),
    M(
        "shared-job-runs-in-every-process",  # a reminder or nudge sent once by each gateway of the database
        RELIABILITY,
        "        if not await take(job.name, job.seconds):\n            return None",
        "        if False:\n            return None",
        also=("tests/adapters/test_postgres_claims.py",),
    ),
    M(
        "shared-claim-taken-over-without-recovery",  # the dead process's private interval read as open by its new holder
        PRIVACY,
        "            if claim.taken_over:\n                await self._recovery.taken_over([conversation.id])",
        "            if False:\n                await self._recovery.taken_over([conversation.id])",
        also=("tests/core/test_claims.py",),
    ),
    M(
        "shared-dispatcher-sends-others-deliveries",  # two processes send one pending delivery: the reply doubled
        RELIABILITY,
        "            if self._holds is not None and not self._holds(conversation_id):\n                continue",
        "            if False:\n                continue",
        also=("tests/core/test_claims.py",),
    ),
    M(
        "shared-take-over-of-a-platform-not-served",  # a chat whose events reach another process held here: never answered
        RELIABILITY,
        '            if platforms is None\n            else " AND conversation_id IN (SELECT id FROM conversations WHERE platform IN"',
        '            if True\n            else " AND conversation_id IN (SELECT id FROM conversations WHERE platform IN"',
        also=("tests/adapters/test_postgres_claims.py",),
    ),
    M(
        "shared-inbox-row-of-a-chat-held-elsewhere-read",  # every process opens and begins another's chat's updates
        PRIVACY,
        '            elsewhere = f" AND NOT {_HELD_ELSEWHERE}"',
        '            elsewhere = ""',
        also=(
            "tests/adapters/test_postgres_claims.py::test_a_process_takes_no_inbox_row_of_a_chat_another_process_holds",
        ),
    ),
    M(
        "shared-inbox-dead-holders-rows-read",  # a dead process's chat answered here before its take-over and recovery
        PRIVACY,
        "WHERE c.platform = i.platform AND c.chat_id = i.chat_id AND h.holder IS DISTINCT FROM :me)",
        "WHERE c.platform = i.platform AND c.chat_id = i.chat_id AND h.holder IS DISTINCT FROM :me AND FALSE)",
        also=(
            "tests/adapters/test_postgres_claims.py::test_a_process_takes_no_inbox_row_of_a_chat_another_process_holds",
        ),
    ),
    M(
        "shared-inbox-undecided-chat-taken-whole",  # a new chat's updates split between processes: out of order
        RELIABILITY,
        "                    if chat in self._deciding:\n                        continue",
        "                    if False:\n                        continue",
        also=("tests/adapters/test_telegram_inbox_reader.py",),
    ),
    M(
        "shared-inbox-update-left-kept-in-hand",  # an update left for another holder never taken here after a take-over
        RELIABILITY,
        "        self._inflight.discard(update_id)\n        self._decided(update_id, answered=False)",
        "        self._decided(update_id, answered=False)",
        also=("tests/adapters/test_telegram_inbox_reader.py",),
    ),
    M(
        "shared-inbox-chat-not-stored",  # no row names its chat: every process takes every chat's rows
        RELIABILITY,
        "        stored = await self.setup.inbox.put(PLATFORM, update_id, body, chat_of(body))",
        "        stored = await self.setup.inbox.put(PLATFORM, update_id, body, None)",
        also=(
            "tests/bot/test_shared_telegram_wire.py::test_three_gateways_answer_fifty_chats_once_and_in_order_and_a_killed_one_loses_nothing",
        ),
    ),
    M(
        "shared-transit-folder-not-checked",  # a process whose transit keys no other has: its rows dropped at a take-over
        RELIABILITY,
        "        if known is not None and others_alive:\n            raise KeyDirError(TRANSIT_NOT_SHARED)",
        "        if False:\n            raise KeyDirError(TRANSIT_NOT_SHARED)",
        also=("tests/adapters/test_postgres_claims.py::test_every_process_must_use_the_transit_folder_of_the_others",),
    ),
    M(
        "shared-webhook-set-by-every-process",  # setWebhook by each start: not one process, as issue 33 asks
        RELIABILITY,
        "        sets_at_start=claims.first_alive,\n",
        "        # sets_at_start: the default, always\n",
        also=(
            "tests/bot/test_shared_telegram_wire.py::test_an_update_redelivered_after_a_timeout_is_answered_once_across_the_gateways",
        ),
    ),
    M(
        "shared-webhook-removed-by-the-first-to-stop",  # the others serve on with no webhook: nothing delivered
        RELIABILITY,
        "        removes_at_stop=claims.last_alive,\n",
        "        # removes_at_stop: the default, always\n",
        also=(
            "tests/bot/test_shared_telegram_wire.py::test_three_gateways_answer_fifty_chats_once_and_in_order_and_a_killed_one_loses_nothing",
        ),
    ),
    M(
        "discord-gateway-taken-without-the-lock",  # every shared process connects: each DM answered by each
        RELIABILITY,
        '            while not (row := await (await conn.execute(TRY, (KEYS["discord"],))).fetchone()) or not row[0]:',
        "            while False:",
        also=("tests/bot/test_shared_discord_wire.py",),
    ),
    M(
        "discord-gateway-lock-lost-unnoticed",  # its lock's connection gone, it stays connected beside the next holder
        RELIABILITY,
        "    held = asyncio.ensure_future(lock.lost())",
        "    held = asyncio.ensure_future(asyncio.Event().wait())",
        also=("tests/bot/test_shared_discord_wire.py::test_a_holder_that_loses_the_gateway_lock_stops_with_one_line",),
    ),
    M(
        "discord-taken-over-while-standing-by",  # a process without the gateway keeps Discord chats from its holder
        RELIABILITY,
        "        self._standby = set(standby)",
        "        self._standby: set[str] = set()",
        also=("tests/core/test_claims.py",),
    ),
    M(
        "discord-gateway-connects-before-the-last-holder-let-go",  # a DM caught up meanwhile is held elsewhere, lost
        RELIABILITY,
        "        while claims is not None and await claims.held_elsewhere(platform) and time.monotonic() < deadline:",
        "        while False:",
        also=("tests/core/test_claims.py",),
    ),
    M(
        "discord-takeover-keeps-into-another-process-interval",  # sealed with a key it lacks: the event fails
        RELIABILITY,
        "            return ClosedByRestart(segment_id, elsewhere=self.claims is not None and conversation.id in self._taken_at)",
        "            return ClosedByRestart(segment_id)",
        also=("tests/bot/test_shared_discord_wire.py",),
    ),
    M(
        "discord-shared-start-refusal-restarted",  # a rejected token read as an outage: the supervisor restarts it
        RELIABILITY,
        "        on_fatal(str(exc))\n        return str(exc)",
        "        return str(exc)",
        also=(
            "tests/bot/test_shared_discord_wire.py::test_a_shared_gateway_whose_discord_token_is_rejected_stops_with_one_line",
        ),
    ),
)
