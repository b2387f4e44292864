"""SQL of the timeline: people, accounts, conversations, messages, the masked view, summaries and pads."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from adapters.storage.bindings import mirror_rows
from adapters.storage.engine import Database, Fetch, Ref, Result, Row, Statement
from adapters.storage.guard import refusing_while_private
from adapters.storage.memory import run_rows
from adapters.storage.outbox import alone_in_lane, delivery_of, delivery_row
from adapters.storage.sealing import KeyLost, Sealer, opened, sealed
from core.values.errors import IntervalEnded, StoreError
from core.values.model import (
    Account,
    ContextReads,
    Conversation,
    ConversationKey,
    DeliveryTarget,
    MirrorOf,
    Mode,
    OpenTurn,
    PadEntry,
    RecordedReply,
    RunRecord,
    Summary,
    TimelineItem,
)

log = logging.getLogger(__name__)

_CONVERSATION = "SELECT id, platform, chat_id, kind, person_id FROM conversations"


def _conversation(row: Row) -> Conversation:
    return Conversation(row["id"], row["platform"], row["chat_id"], row["kind"], row["person_id"])


class TimelineQueries:
    """The conversation record as each mode may see it; implements
    core.ports.store.timeline (every Protocol there)."""

    def __init__(self, engine: Database) -> None:
        self._engine = engine

    # --- people, accounts, conversations -----------------------------------

    async def ensure_account(self, platform: str, user_id: str, display_name: str | None, now: float) -> Account:
        select = Statement(
            "SELECT id, person_id FROM accounts WHERE platform = :platform AND platform_user_id = :user",
            {"platform": platform, "user": user_id},
            Fetch.ONE,
        )
        (found,) = await self._engine.read(select)
        row = found.one
        if row is None:  # the first contact writes once; a concurrent first contact's person is removed again
            params = {"platform": platform, "user": user_id, "name": display_name, "now": now, "person": Ref(0)}
            *_, written = await self._engine.write(
                Statement(
                    "INSERT INTO people (display_name, created_at) VALUES (CAST(:name AS TEXT), :now) RETURNING id",
                    {"name": display_name, "now": now},
                    Fetch.ONE,
                    inserts="people",
                ),
                Statement(
                    "INSERT INTO accounts (person_id, platform, platform_user_id, created_at)"
                    " VALUES (:person, :platform, :user, :now) ON CONFLICT (platform, platform_user_id) DO NOTHING",
                    params,
                ),
                Statement(
                    "DELETE FROM people WHERE id = :person AND NOT EXISTS"
                    " (SELECT 1 FROM accounts WHERE accounts.person_id = people.id)",
                    params,
                ),
                select,
            )
            row = written.one
            if row is None:
                raise StoreError(f"no account of {platform} after writing it")
        return Account(row["id"], row["person_id"], platform, user_id)

    async def ensure_conversation(
        self, key: ConversationKey, kind: str, person_id: int | None, now: float
    ) -> Conversation:
        select = Statement(
            f"{_CONVERSATION} WHERE platform = :platform AND chat_id = :chat",
            {"platform": key.platform, "chat": key.chat_id},
            Fetch.ONE,
        )
        (found,) = await self._engine.read(select)
        row = found.one
        if row is None:
            _, written = await self._engine.write(
                Statement(
                    "INSERT INTO conversations (platform, chat_id, kind, person_id, created_at)"
                    " VALUES (:platform, :chat, :kind, CAST(:p AS BIGINT), :now) ON CONFLICT (platform, chat_id) DO NOTHING",
                    {
                        "platform": key.platform,
                        "chat": key.chat_id,
                        "kind": kind,
                        "p": person_id if kind == "direct" else None,
                        "now": now,
                    },
                ),
                select,
            )
            row = written.one
            if row is None:
                raise StoreError(f"no conversation of {key.platform} after writing it")
        return _conversation(row)

    async def conversation_at(self, key: ConversationKey) -> Conversation | None:
        """The conversation of one chat, if it began; None otherwise (nothing is created)."""
        (found,) = await self._engine.read(
            Statement(
                f"{_CONVERSATION} WHERE platform = :platform AND chat_id = :chat",
                {"platform": key.platform, "chat": key.chat_id},
                Fetch.ONE,
            )
        )
        return None if found.one is None else _conversation(found.one)

    async def conversations_of(self, person_id: int) -> list[Conversation]:
        """The person's direct conversations on every platform, oldest first (a group has no person)."""
        (found,) = await self._engine.read(
            Statement(
                f"{_CONVERSATION} WHERE person_id = :p AND kind = 'direct' ORDER BY id", {"p": person_id}, Fetch.ALL
            )
        )
        return [_conversation(row) for row in found.rows]

    # --- the timeline -------------------------------------------------------

    async def add_message(
        self,
        conversation_id: int,
        role: str,
        text: str,
        now: float,
        *,
        segment_id: int | None = None,
        kind: str = "chat",
        account_id: int | None = None,
        run: RunRecord | None = None,
        platform_message_id: str | None = None,
    ) -> int | None:
        """Append a message. A message with a segment is private: its capture is 'skipped' here,
        whatever any caller wants, and the schema's CHECK refuses anything else. `run` (a normal
        turn's analytics record) is written in the same transaction; a private one cannot be.
        With `platform_message_id` (the inbox key), a message stored already is not stored
        again and None is returned."""
        if run is not None and segment_id is not None:
            raise ValueError("a private turn has no analytics run")
        mode = Mode.PRIVATE.value if segment_id is not None else Mode.NORMAL.value
        capture = "pending" if (mode == "normal" and kind == "chat") else "skipped"
        stored_text = sealed(self._engine.sealer, segment_id, "messages.text", text)
        # A run is lasting: the write is refused whole (PrivateWriteRefused) while the conversation is private.
        guard = () if run is None else refusing_while_private(self._engine.dialect, conversation_id, "analytics")
        insert = Statement(
            "INSERT INTO messages (conversation_id, segment_id, account_id, mode, role, kind, text, capture,"
            " created_at, platform_message_id) VALUES (:c, :s, :account, :mode, :role, :kind, :text, :capture,"
            " :now, :key) ON CONFLICT (conversation_id, platform_message_id) WHERE platform_message_id IS NOT NULL"
            " DO NOTHING RETURNING id",
            {
                "c": conversation_id,
                "s": segment_id,
                "account": account_id,
                "mode": mode,
                "role": role,
                "kind": kind,
                "text": stored_text,
                "capture": capture,
                "now": now,
                "key": platform_message_id,
            },
            Fetch.ONE,
            inserts="messages",
        )
        if run is None or platform_message_id is None:  # one write
            keyed = None if platform_message_id is None else Ref(len(guard))  # the idle clock: only if stored
            after = [] if segment_id is None else [_touch_segment(segment_id, now, stored=keyed)]
            after += [] if run is None else run_rows(run, at=len(guard) + 1)
            results = await self._engine.write(*guard, insert, *after)
            return results[len(guard)].scalar
        # A normal turn's run with an inbox key that may be stored already: the run only when the row was.
        async with self._engine.tx() as tx:
            results = await tx.run(*guard, insert)
            message_id = results[-1].scalar
            if message_id is not None:
                await tx.run(*run_rows(run, at=0))  # its own trip: its Refs count from 0
            return message_id

    async def add_inbound(
        self,
        conversation_id: int,
        text: str,
        now: float,
        *,
        segment_id: int | None,
        account_id: int | None,
        platform_message_id: str | None,
        said: str | None = None,
        assumed_normal: bool = False,
    ) -> int | None:
        """Store a user's chat message as an open turn, keyed by its platform id (the inbox).
        `said`: the person's own words, when `text` holds more (what a mirror copies).
        Returns None when that platform message is stored already: a redelivery is a no-op.
        `assumed_normal`: normal mode was not read but assumed; the write begins with the guard of lasting
        writes (adapters/storage/guard.py), so it is refused whole, PrivateWriteRefused, while a segment of
        the conversation is open, and no segment opens between that check and the commit."""
        if assumed_normal and segment_id is not None:
            raise ValueError("a message assumed normal names no segment")
        mode = Mode.PRIVATE.value if segment_id is not None else Mode.NORMAL.value
        capture = "pending" if mode == "normal" else "skipped"
        if segment_id is not None:
            # Only mirrors read `said`, and nothing of a private row is mirrored: it is kept nowhere.
            text, said = sealed(self._engine.sealer, segment_id, "messages.text", text), None
        guard: tuple[Statement, ...] = ()
        if assumed_normal:  # refused whole while a segment is open, and none opens before the commit
            guard = refusing_while_private(self._engine.dialect, conversation_id, "message assumed normal")
        statements = [
            *guard,
            Statement(
                "INSERT INTO messages (conversation_id, segment_id, account_id, mode, role, kind, text, capture,"
                " created_at, platform_message_id, turn, said)"
                " VALUES (:c, :s, :account, :mode, 'user', 'chat', :text, :capture, :now, :key, 'open', :said)"
                " ON CONFLICT (conversation_id, platform_message_id) WHERE platform_message_id IS NOT NULL"
                " DO NOTHING RETURNING id",
                {
                    "c": conversation_id,
                    "s": segment_id,
                    "account": account_id,
                    "mode": mode,
                    "text": text,
                    "capture": capture,
                    "now": now,
                    "key": platform_message_id,
                    "said": said,
                },
                Fetch.ONE,
                inserts="messages",
            ),
        ]
        if segment_id is not None:  # the idle clock, only when the message was stored (not a redelivery)
            statements.append(_touch_segment(segment_id, now, stored=Ref(0)))
        stored = await self._engine.write(*statements)
        return stored[len(guard)].scalar

    async def record_reply(
        self,
        conversation_id: int,
        send_text: str,
        now: float,
        *,
        stored_text: str | None = None,
        segment_id: int | None = None,
        run: RunRecord | None = None,
        answers: int | None = None,
        target: DeliveryTarget | None = None,
        mirror: MirrorOf | None = None,
        stream: int | None = None,
    ) -> RecordedReply:
        """Write the outcome of a turn in one transaction: the assistant message (`stored_text`,
        if any), the analytics run, the answered turns (every open turn of the conversation up
        to `answers`), the pending delivery of `send_text` to `target`, and with `mirror` the
        mirror rows of the exchange (none for a private message or conversation, by the SQL).
        With `stream`, the streaming row of this reply (of this conversation and interval) is
        that delivery: it gets the text and becomes pending, so its send edits what it showed.

        Raises:
            IntervalEnded: `segment_id` names an interval that is no longer open by `now` (closed,
                expired or deleted while the turn ran): nothing is written, so nothing of it is sent,
                and a row its end made a retraction keeps the constant line.
        """
        if run is not None and segment_id is not None:
            raise ValueError("a private turn has no analytics run")
        if segment_id is not None:
            try:  # sealed before anything is written: an interval whose key is gone has ended for its reply
                send_text = sealed(self._engine.sealer, segment_id, "deliveries.text", send_text)
                if stored_text is not None:
                    stored_text = sealed(self._engine.sealer, segment_id, "messages.text", stored_text)
            except KeyLost as exc:
                raise IntervalEnded(f"segment {segment_id} has no key; its reply is not written") from exc
        statements: list[Statement] = []
        if segment_id is not None:  # first: nothing of the write is kept when the interval ended
            statements.append(
                Statement(
                    "SELECT companion_raise('interval_ended', :what) WHERE NOT EXISTS (SELECT 1 FROM segments"
                    " WHERE id = :s AND ended_at IS NULL AND (expires_at IS NULL OR expires_at > :now))",
                    {"s": segment_id, "now": now, "what": f"segment {segment_id} ended before its reply was written"},
                )
            )
        message: Ref | None = None
        if stored_text is not None:
            mode = Mode.PRIVATE.value if segment_id is not None else Mode.NORMAL.value
            message = Ref(len(statements))
            statements.append(
                Statement(
                    "INSERT INTO messages (conversation_id, segment_id, mode, role, kind, text, capture, created_at)"
                    " VALUES (:c, :s, :mode, 'assistant', 'chat', :text, :capture, :now) RETURNING id",
                    {
                        "c": conversation_id,
                        "s": segment_id,
                        "mode": mode,
                        "text": stored_text,
                        "capture": "skipped" if segment_id else "pending",
                        "now": now,
                    },
                    Fetch.ONE,
                    inserts="messages",
                )
            )
            if segment_id is not None:
                statements.append(_touch_segment(segment_id, now))
        run_at = len(statements)
        if run is not None:
            statements += run_rows(run, at=run_at)
        if answers is not None:
            statements.append(
                Statement(
                    "UPDATE messages SET turn = 'done' WHERE conversation_id = :c AND turn = 'open' AND id <= :upto",
                    {"c": conversation_id, "upto": answers},
                )
            )
        streamed_at = None
        if target is not None and stream is not None:
            streamed_at = len(statements)
            statements.append(
                Statement(
                    "UPDATE deliveries SET text = :text, message_id = :m, status = 'pending', next_attempt_at = :now"
                    " WHERE id = :stream AND conversation_id = :c AND status = 'streaming'"
                    " AND segment_id IS NOT DISTINCT FROM :s RETURNING id",
                    {
                        "text": send_text,
                        "m": message,
                        "now": now,
                        "stream": stream,
                        "c": conversation_id,
                        "s": segment_id,
                    },
                    Fetch.ONE,
                )
            )
        delivery_at = alone_at = None
        if target is not None and stream is None:
            delivery_at = len(statements)
            statements.append(
                delivery_row(conversation_id, target, send_text, now, message_id=message, segment_id=segment_id)
            )
            if segment_id is None:  # the row as written, when nothing earlier waits in its lane
                alone_at = len(statements)
                statements.append(alone_in_lane(Ref(delivery_at), now))
        copied = mirror is not None and message is not None
        delivery = mirrored = None
        if streamed_at is not None and target is not None:
            # Whether the streaming row took the text is known only once the UPDATE ran: a second trip,
            # in the same transaction, writes a delivery of its own when it did not (the stream was cut
            # off), and the mirrors after it, as in one trip.
            async with self._engine.tx() as tx:
                results = await tx.run(*statements)
                delivery_id = results[streamed_at].scalar
                message_id = results[message.statement].scalar if message is not None else None
                later = []
                if delivery_id is None:
                    later.append(
                        delivery_row(
                            conversation_id, target, send_text, now, message_id=message_id, segment_id=segment_id
                        )
                    )
                if copied and mirror is not None and message_id is not None:
                    later.append(mirror_rows(conversation_id, message_id, mirror, now))
                ran = await tx.run(*later) if later else []
                if delivery_id is None:
                    delivery_id = ran[0].scalar
                mirrored = ran[-1] if copied else None
        else:
            if copied and mirror is not None and message is not None:
                statements.append(mirror_rows(conversation_id, message, mirror, now))
            results = await self._engine.write(*statements)
            delivery_id = results[delivery_at].scalar if delivery_at is not None else None
            alone = results[alone_at].one if alone_at is not None else None
            delivery = delivery_of(alone) if alone is not None else None
            mirrored = results[-1] if copied else None
        if run is not None and results[run_at].rowcount == 0:
            # A segment the valve could not close is still open: the run is the one lasting row of
            # this reply and is left out; the reply itself is not lost to it.
            log.warning("conversation %s: analytics run skipped (a segment is open)", conversation_id)
        message_id = results[message.statement].scalar if message is not None else None
        mirror_ids = tuple(sorted(row["id"] for row in mirrored.rows)) if mirrored is not None else ()
        return RecordedReply(message_id, delivery_id, mirror_ids, delivery)

    async def open_turns(self, platforms: frozenset[str] | None) -> list[OpenTurn]:
        """The newest open normal turn of each conversation (on `platforms`, or all): a user
        message whose reply was never written because the process died mid-turn."""
        params: dict[str, object] = {f"p{n}": platform for n, platform in enumerate(sorted(platforms or ()))}
        scope = "" if platforms is None else f" AND c.platform IN ({', '.join(f':{n}' for n in params) or 'NULL'})"
        (found,) = await self._engine.read(
            Statement(
                "SELECT m.id, m.account_id, m.created_at, m.platform_message_id, c.id AS cid, c.platform, c.chat_id,"
                " c.kind, c.person_id FROM messages m JOIN conversations c ON c.id = m.conversation_id"
                " WHERE m.turn = 'open' AND m.segment_id IS NULL AND m.mode = 'normal'"
                " AND m.id = (SELECT max(id) FROM messages WHERE conversation_id = m.conversation_id AND turn = 'open')"
                f"{scope} ORDER BY m.id",
                params,
                Fetch.ALL,
            )
        )
        return [
            OpenTurn(
                r["id"],
                Conversation(r["cid"], r["platform"], r["chat_id"], r["kind"], r["person_id"]),
                r["account_id"],
                r["created_at"],
                r["platform_message_id"],
            )
            for r in found.rows
        ]

    async def turn_is_open(self, message_id: int) -> bool:
        (found,) = await self._engine.read(
            Statement("SELECT turn FROM messages WHERE id = :m", {"m": message_id}, Fetch.ONE)
        )
        return found.scalar == "open"

    async def view(
        self,
        conversation_id: int,
        *,
        visible_segment: int | None,
        after: int,
        upto: int | None = None,
        limit: int,
        newest_first: bool = True,
    ) -> list[TimelineItem]:
        """The conversation as one mode may see it: `limit` items after the watermark `after`.

        Normal messages are always visible. Messages of `visible_segment` (the private
        segment being lived in, or None in normal mode) are visible. Every other segment
        appears as exactly one placeholder: its rows are never read here, because the
        placeholders come from the segments table and the message queries name the
        segment they may read.
        Returns items in timeline order (oldest first) either way; `newest_first`
        chooses which end of the range `limit` keeps.
        """
        statements = _view_statements(
            conversation_id,
            visible_segment,
            ":after",
            {"after": after},
            upto=upto,
            limit=limit,
            newest_first=newest_first,
        )
        return _view_items(
            await self._engine.read(*statements), self._engine.sealer, limit=limit, newest_first=newest_first
        )

    async def context_reads(
        self, conversation_id: int, *, person_id: int | None, segment_id: int | None, limit: int, count_up_to: int
    ) -> ContextReads:
        """What a turn's context reads, in one trip and one snapshot: the normal summary, the private
        one of `segment_id`, the normal pad of `person_id` (and in private mode the private pad of this
        conversation's intervals), the newest `limit` items of the view after the watermark of the
        summary the mode uses (the private one if it exists, else the normal one: ContextAssembler's
        rule), and the count of the view's messages after that watermark, up to `count_up_to` per
        source (its own count decides whether a fold is due: the view's messages before the window)."""
        after = (
            "coalesce((SELECT watermark FROM summaries WHERE segment_id = :s AND mode = 'private'),"
            " (SELECT watermark FROM summaries WHERE conversation_id = :c AND segment_id IS NULL AND mode = 'normal'), 0)"
        )
        params = {"c": conversation_id, "s": segment_id}
        statements = [
            Statement(_NORMAL_SUMMARY, {"c": conversation_id}, Fetch.ONE),
            Statement(_NORMAL_PAD, {"p": person_id}, Fetch.ALL),
        ]
        if segment_id is not None:  # a normal turn reads no interval's summary nor the private pad: not even asked
            statements += [
                Statement(_PRIVATE_SUMMARY, {"s": segment_id}, Fetch.ONE),
                Statement(_PRIVATE_PAD + " ORDER BY id", {"p": person_id, "c": conversation_id}, Fetch.ALL),
            ]
        statements.append(
            Statement(
                "SELECT count(*) AS n FROM ("
                " SELECT 1 AS one FROM (SELECT 1 AS one FROM messages WHERE conversation_id = :c AND segment_id IS NULL"
                f"   AND kind = 'chat' AND id > {after} LIMIT :cap) AS normal_rows"
                " UNION ALL"
                " SELECT 1 AS one FROM (SELECT 1 AS one FROM messages WHERE conversation_id = :c AND segment_id = :s"
                f"   AND kind = 'chat' AND id > {after} LIMIT :cap) AS own_rows) AS counted",
                {**params, "cap": count_up_to},
                Fetch.ONE,
            )
        )
        view_at = len(statements)
        statements += _view_statements(
            conversation_id, segment_id, after, {}, upto=None, limit=limit, newest_first=True
        )
        results = await self._engine.read(*statements)
        normal, pad = results[:2]
        private, private_pad = results[2:4] if segment_id is not None else (None, None)
        counted = results[view_at - 1]
        sealer = self._engine.sealer
        return ContextReads(
            normal_summary=_summary(normal.one),
            private_summary=_private_summary(sealer, segment_id, private.one if private is not None else None),
            normal_pad=[PadEntry(r["id"], Mode.NORMAL, r["text"], None) for r in pad.rows],
            private_pad=_private_pad(sealer, private_pad.rows if private_pad is not None else ()),
            items=_view_items(results[view_at:], sealer, limit=limit, newest_first=True),
            messages_after=int((counted.one or {"n": 0})["n"]),
        )

    # --- summaries ----------------------------------------------------------

    async def normal_summary(self, conversation_id: int) -> Summary | None:
        (found,) = await self._engine.read(Statement(_NORMAL_SUMMARY, {"c": conversation_id}, Fetch.ONE))
        return _summary(found.one)

    async def private_summary(self, segment_id: int) -> Summary | None:
        (found,) = await self._engine.read(Statement(_PRIVATE_SUMMARY, {"s": segment_id}, Fetch.ONE))
        return _private_summary(self._engine.sealer, segment_id, found.one)

    async def save_summary(
        self,
        conversation_id: int,
        summary: Summary,
        now: float,
        *,
        segment_id: int | None = None,
        pad_person_id: int | None = None,
        pad_facts: tuple[str, ...] = (),
    ) -> None:
        """Store a rolling summary and advance its watermark; for a private summary, in the
        same write, add the stable facts its consolidation found to the private pad,
        owned by the segment they came from (a fact the person's private pad holds word for word
        already is not added again: compared in Python, where the pad's words are sealed)."""
        sealer = self._engine.sealer
        # One summary per conversation in normal mode, one per segment in private mode: the partial unique
        # indexes summaries_normal_key and summaries_private_key, named by the upsert's conflict target.
        target = (
            "(segment_id) WHERE segment_id IS NOT NULL"
            if segment_id is not None
            else ("(conversation_id) WHERE segment_id IS NULL")
        )
        statements = [
            Statement(
                "INSERT INTO summaries (conversation_id, segment_id, mode, text, watermark, updated_at)"
                " VALUES (:c, :s, :mode, :text, :watermark, :now)"
                f" ON CONFLICT {target} DO UPDATE SET text = excluded.text, watermark = excluded.watermark,"
                " updated_at = excluded.updated_at",
                {
                    "c": conversation_id,
                    "s": segment_id,
                    "mode": "private" if segment_id is not None else "normal",
                    "text": sealed(sealer, segment_id, "summaries.text", summary.text),
                    "watermark": summary.watermark,
                    "now": now,
                },
            )
        ]
        if segment_id is None or pad_person_id is None or not pad_facts:
            await self._engine.write(*statements)
            return
        # The private pad's words are sealed (each under its own nonce): SQL cannot find a duplicate, so the
        # pad is read and opened inside the transaction, the person's row locked so that no other fold adds
        # the same fact between the read and the write.
        async with self._engine.tx() as tx:
            _, held = await tx.run(
                Statement(
                    f"SELECT id FROM people WHERE id = :p{self._engine.dialect.for_update}", {"p": pad_person_id}
                ),
                Statement(
                    "SELECT id, segment_id, text FROM pad_entries WHERE person_id = :p AND mode = 'private'",
                    {"p": pad_person_id},
                    Fetch.ALL,
                ),
            )
            known = {entry.text for entry in _private_pad(sealer, held.rows)}
            for fact in pad_facts:
                if fact in known:
                    continue
                known.add(fact)
                statements.append(
                    Statement(
                        "INSERT INTO pad_entries (person_id, segment_id, mode, text, created_at)"
                        " VALUES (:p, :s, 'private', :fact, :now)",
                        {
                            "p": pad_person_id,
                            "s": segment_id,
                            "fact": sealed(sealer, segment_id, "pad_entries.text", fact),
                            "now": now,
                        },
                    )
                )
            await tx.run(*statements)

    # --- memory pads --------------------------------------------------------

    async def normal_pad(self, person_id: int) -> list[PadEntry]:
        (found,) = await self._engine.read(Statement(_NORMAL_PAD, {"p": person_id}, Fetch.ALL))
        return [PadEntry(r["id"], Mode.NORMAL, r["text"], None) for r in found.rows]

    async def private_pad(self, person_id: int, conversation_id: int | None = None) -> list[PadEntry]:
        """Only the private-mode context assembly calls this. With `conversation_id`, only the
        facts of that conversation's own intervals: a linked account's private mode in another
        conversation never reads them (a private interval belongs to one conversation)."""
        (found,) = await self._engine.read(
            Statement(_PRIVATE_PAD + " ORDER BY id", {"p": person_id, "c": conversation_id}, Fetch.ALL)
        )
        return _private_pad(self._engine.sealer, found.rows)


_NORMAL_SUMMARY = (
    "SELECT text, watermark FROM summaries WHERE conversation_id = :c AND segment_id IS NULL AND mode = 'normal'"
)
_PRIVATE_SUMMARY = "SELECT text, watermark FROM summaries WHERE segment_id = :s AND mode = 'private'"
_NORMAL_PAD = (
    "SELECT id, text FROM pad_entries WHERE person_id = :p AND mode = 'normal' AND segment_id IS NULL ORDER BY id"
)
# Only private-mode context assembly reads it. With :c, only the facts of that conversation's own intervals.
_PRIVATE_PAD = (
    "SELECT id, text, segment_id FROM pad_entries WHERE person_id = :p AND mode = 'private'"
    " AND (CAST(:c AS BIGINT) IS NULL OR segment_id IN (SELECT id FROM segments WHERE conversation_id = :c))"
)


def _summary(row: Row | None) -> Summary | None:
    return Summary(row["text"], row["watermark"]) if row is not None else None


def _private_summary(sealer: Sealer, segment_id: int | None, row: Row | None) -> Summary | None:
    """The interval's summary opened; none when its key is gone (masked: the fold starts again, unread)."""
    if row is None or segment_id is None:
        return None
    text = opened(sealer, segment_id, "summaries.text", row["text"])
    return None if text is None else Summary(text, row["watermark"])


def _private_pad(sealer: Sealer, rows: Sequence[Row]) -> list[PadEntry]:
    """Private pad entries opened, each under its own interval's key; an entry whose key is gone is left out."""
    entries = []
    for row in rows:
        text = opened(sealer, row["segment_id"], "pad_entries.text", row["text"])
        if text is not None:
            entries.append(PadEntry(row["id"], Mode.PRIVATE, text, row["segment_id"]))
    return entries


def _view_statements(
    conversation_id: int,
    visible_segment: int | None,
    after: str,
    extra: dict[str, object],
    *,
    upto: int | None,
    limit: int,
    newest_first: bool,
) -> list[Statement]:
    """The masked view's reads (see `TimelineQueries.view`): normal messages, the visible segment's own
    messages (in private mode only) and one placeholder per other segment, each after `after` (SQL: a
    parameter or the watermark's subquery)."""
    order = "DESC" if newest_first else "ASC"
    upto_sql = "" if upto is None else " AND id <= :upto"
    params = {"c": conversation_id, "s": visible_segment, "upto": upto, "n": limit, **extra}
    statements = [
        Statement(
            "SELECT id, role, text FROM messages"
            " WHERE conversation_id = :c AND segment_id IS NULL AND kind = 'chat' AND mode <> 'private'"
            f" AND id > {after}{upto_sql} ORDER BY id {order} LIMIT :n",
            params,
            Fetch.ALL,
        )
    ]
    if visible_segment is not None:
        statements.append(
            Statement(
                "SELECT id, role, text, segment_id FROM messages"
                " WHERE segment_id = :s AND conversation_id = :c AND kind = 'chat'"
                f" AND id > {after}{upto_sql} ORDER BY id {order} LIMIT :n",
                params,
                Fetch.ALL,
            )
        )
    anchor_upto = "" if upto is None else " AND anchor_message_id < :upto"
    statements.append(
        Statement(
            "SELECT id, anchor_message_id FROM segments"
            " WHERE conversation_id = :c AND id IS DISTINCT FROM :s"
            f" AND anchor_message_id >= {after}{anchor_upto}"
            f" ORDER BY anchor_message_id {order}, id {order} LIMIT :n",
            params,
            Fetch.ALL,
        )
    )
    return statements


def _view_items(results: list[Result], sealer: Sealer, *, limit: int, newest_first: bool) -> list[TimelineItem]:
    """The view's items from `_view_statements`' results, in timeline order (oldest first). The visible
    interval's messages are opened; when its key is gone they are left out (masked), never shown sealed."""
    normal, *own, masked = results
    items = [TimelineItem(r["id"], r["role"], r["text"]) for r in normal.rows]
    for result in own:
        for r in result.rows:
            text = opened(sealer, r["segment_id"], "messages.text", r["text"])
            if text is not None:
                items.append(TimelineItem(r["id"], r["role"], text))
    items += [TimelineItem(r["anchor_message_id"], None, None, r["id"]) for r in masked.rows]
    items.sort(key=timeline_order, reverse=newest_first)
    items = items[:limit]
    if newest_first:
        items.reverse()
    return items


def _touch_segment(segment_id: int, now: float, *, stored: Ref | None = None) -> Statement:
    """The interval's idle clock moves with each message written in it (with `stored`: only when that
    insert stored a row)."""
    only_if = "" if stored is None else " AND EXISTS (SELECT 1 FROM messages WHERE id = :stored)"
    params: dict[str, object] = {"now": now, "s": segment_id}
    if stored is not None:
        params["stored"] = stored
    return Statement(f"UPDATE segments SET last_activity_at = :now WHERE id = :s AND ended_at IS NULL{only_if}", params)


def timeline_order(item: TimelineItem) -> tuple[int, int, int]:
    # A placeholder stands right after the message that preceded its interval.
    return (item.position, 0 if item.masked_segment_id is None else 1, item.masked_segment_id or 0)
