"""SQL of the outbox: delivery rows written with what they carry, sent by adapters, marked after."""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from typing import Any

import aiosqlite

from adapters.storage.database import present
from adapters.storage.engine import Database as Engine
from adapters.storage.engine import Fetch, Ref, Row, Statement
from adapters.storage.sealing import KeyLost, Sealer, opened, sealed
from core.values.copy import INTERVAL_ENDED_SHOWN
from core.values.errors import StoreError
from core.values.model import DeliveryTarget, OutboundDelivery, StreamedReply

_COLUMNS = (
    "id, conversation_id, kind, platform, chat_id, reply_to, thread_id, nonce, text, parts_sent, attempts,"
    " message_id, segment_id IS NOT NULL AS in_segment, streamed_ids, segment_id, retracts,"
    " (SELECT g.expires_at FROM segments g WHERE g.id = deliveries.segment_id) AS ends_at"
)


def _interval_open(row: str) -> str:
    """SQL: the delivery `row` (a table name or alias) names no interval, or one that is open now
    (not ended, not expired by :now, not deleted)."""
    return (
        f"({row}.segment_id IS NULL OR EXISTS (SELECT 1 FROM segments g WHERE g.id = {row}.segment_id"
        " AND g.ended_at IS NULL AND (g.expires_at IS NULL OR g.expires_at > :now)))"
    )


# Nothing is sent for an interval that has ended: a delivery that names an interval is picked only
# while that interval is open (not closed by /normal, the idle timeout or a restart, not expired by
# :now, not deleted). The transaction that ends an interval settles its rows (`ending_shown`); the
# minute sweep deletes expired intervals; this predicate, in the queries that pick what to send,
# covers the time until they ran.
_INTERVAL_OPEN = _interval_open("deliveries")


def ending_shown(segments: str, params: Mapping[str, object], now: float) -> tuple[Statement, Statement]:
    """In the write that ends the intervals `segments` (SQL selecting their ids, with named `params`, none
    of them `:shown` or `:ended`), before the statement that closes or deletes them: their replies not
    finally sent are never sent. One that showed messages while written becomes their retraction (it
    leaves the interval as a pending row holding only the constant INTERVAL_ENDED_SHOWN, which edits
    those messages once); every other one is settled unsent. Written with the end, so a crash right
    after it still edits them."""
    return (
        Statement(
            "UPDATE deliveries SET segment_id = NULL, message_id = NULL, status = 'pending', text = :shown,"
            " retracts = 1, parts_sent = 0, attempts = 0, error = NULL, next_attempt_at = :ended"
            f" WHERE segment_id IN ({segments}) AND streamed_ids IS NOT NULL AND status IN ('streaming', 'pending')",
            {**params, "shown": INTERVAL_ENDED_SHOWN, "ended": now},
        ),
        Statement(
            "UPDATE deliveries SET status = 'failed', text = NULL, error = 'interval ended', settled_at = :ended"
            f" WHERE segment_id IN ({segments}) AND status IN ('streaming', 'pending')",
            {**params, "ended": now},
        ),
    )


def delivery_row(
    conversation_id: int,
    target: DeliveryTarget,
    text: str,
    now: float,
    *,
    kind: str = "reply",
    message_id: int | Ref | None = None,
    segment_id: int | None = None,
) -> Statement:
    """One pending delivery, as a statement of the caller's write (RETURNING its id). The schema refuses
    a private segment on anything but a reply, and a segment other than the carried message's."""
    return Statement(
        "INSERT INTO deliveries (conversation_id, message_id, segment_id, kind, platform, chat_id, reply_to,"
        " thread_id, nonce, text, next_attempt_at, created_at)"
        " VALUES (:c, :m, :s, :kind, :platform, :chat, :reply_to, :thread, :nonce, :text, :now, :now) RETURNING id",
        {
            "c": conversation_id,
            "m": message_id,
            "s": segment_id,
            "kind": kind,
            "platform": target.platform,
            "chat": target.chat_id,
            "reply_to": target.reply_to,
            "thread": target.thread_id,
            "nonce": secrets.token_hex(8),
            "text": text,
            "now": now,
        },
        Fetch.ONE,
        inserts="deliveries",
    )


def alone_in_lane(delivery: int | Ref, now: float) -> Statement:
    """The delivery row (as `pending_of` reads it) when no earlier delivery of its lane (its
    conversation, platform and chat) is pending for an open interval: then it goes out first, alone;
    no row otherwise."""
    return Statement(
        f"SELECT {_COLUMNS} FROM deliveries WHERE id = :d AND status = 'pending' AND NOT EXISTS ("
        " SELECT 1 FROM deliveries e WHERE e.conversation_id = deliveries.conversation_id AND e.status = 'pending'"
        " AND e.platform = deliveries.platform AND e.chat_id = deliveries.chat_id AND e.id < deliveries.id"
        f" AND {_interval_open('e')})",
        {"d": delivery, "now": now},
        Fetch.ONE,
    )


async def insert_delivery(
    db: aiosqlite.Connection,
    conversation_id: int,
    target: DeliveryTarget,
    text: str,
    now: float,
    *,
    kind: str = "reply",
    message_id: int | None = None,
    segment_id: int | None = None,
) -> int:
    """`delivery_row` inside the caller's transaction; returns the new row's id."""
    statement = delivery_row(
        conversation_id, target, text, now, kind=kind, message_id=message_id, segment_id=segment_id
    )
    rows = await db.execute_fetchall(statement.sql, statement.params)
    return int(present(next(iter(rows), None))[0])


class OutboxQueries:
    """The outbox's reads and marks; implements core.ports.store.outbox (OutboxStore, StreamMarks) over
    the engine interface (adapters/storage/engine.py)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    async def lane_of(self, delivery_id: int) -> tuple[str, str] | None:
        """The (platform, chat) a delivery goes to: its lane, in which deliveries go out in order."""
        (found,) = await self._engine.read(
            Statement("SELECT platform, chat_id FROM deliveries WHERE id = :id", {"id": delivery_id}, Fetch.ONE)
        )
        row = found.one
        return (row["platform"], row["chat_id"]) if row is not None else None

    async def pending_of(self, conversation_id: int, upto: int, now: float) -> list[OutboundDelivery]:
        """Pending deliveries of one conversation up to `upto` in the lane of `upto` (the same
        platform and chat), oldest first: they go out in order. None of an interval that has ended
        (closed, expired by `now`, deleted): a private answer left pending is never sent after its end."""
        (found,) = await self._engine.read(
            Statement(
                f"SELECT {_COLUMNS} FROM deliveries WHERE conversation_id = :c AND status = 'pending' AND id <= :upto"
                " AND (platform, chat_id) = (SELECT platform, chat_id FROM deliveries WHERE id = :upto)"
                f" AND {_INTERVAL_OPEN} ORDER BY id",
                {"c": conversation_id, "upto": upto, "now": now},
                Fetch.ALL,
            )
        )
        return opened_deliveries(self._engine.sealer, found.rows)

    async def due(
        self, platforms: frozenset[str], now: float, untried_after: float = 0.0, limit: int = 200
    ) -> list[tuple[int, int]]:
        """(conversation, newest due delivery id) for each lane (conversation, platform, chat) with
        a pending delivery due now on one of `platforms`; one never tried only once it is
        `untried_after` seconds old (its adapter, or the turn's mirror task, is sending it). None of
        an interval that has ended (closed, expired by `now`, deleted)."""
        if not platforms:
            return []
        marks = {f"p{i}": platform for i, platform in enumerate(sorted(platforms))}
        (found,) = await self._engine.read(
            Statement(
                "SELECT conversation_id, max(id) AS newest FROM deliveries"
                " WHERE status = 'pending' AND next_attempt_at <= :now"
                f" AND (attempts > 0 OR created_at <= :untried) AND platform IN ({', '.join(':' + k for k in marks)})"
                f" AND {_INTERVAL_OPEN}"
                " GROUP BY conversation_id, platform, chat_id ORDER BY min(id) LIMIT :limit",
                {"now": now, "untried": now - untried_after, "limit": limit, **marks},
                Fetch.ALL,
            )
        )
        return [(r["conversation_id"], r["newest"]) for r in found.rows]

    async def mark_sent(self, delivery_id: int, parts_sent: int, now: float) -> None:
        # Not fsynced: a mark lost to a power cut only sends the reply again (at least once). One trip.
        await self._engine.write(
            Statement(_FORGET_RETRACTION, {"id": delivery_id}),
            Statement(
                "UPDATE deliveries SET status = 'sent', text = NULL, parts_sent = :parts, settled_at = :now,"
                " error = NULL WHERE id = :id AND status = 'pending'",
                {"parts": parts_sent, "now": now, "id": delivery_id},
            ),
            durable=False,
        )

    async def mark_retry(self, delivery_id: int, parts_sent: int, error: str, next_attempt_at: float) -> None:
        await self._engine.write(
            Statement(
                "UPDATE deliveries SET attempts = attempts + 1, parts_sent = :parts, error = :error,"
                " next_attempt_at = :next WHERE id = :id AND status = 'pending'",
                {"parts": parts_sent, "error": error[:64], "next": next_attempt_at, "id": delivery_id},
            )
        )

    async def mark_failed(self, delivery_id: int, parts_sent: int, error: str, now: float) -> None:
        await self._engine.write(
            Statement(_FORGET_RETRACTION, {"id": delivery_id}),
            Statement(
                "UPDATE deliveries SET status = 'failed', text = NULL, attempts = attempts + 1, parts_sent = :parts,"
                " error = :error, settled_at = :now WHERE id = :id AND status = 'pending'",
                {"parts": parts_sent, "error": error[:64], "now": now, "id": delivery_id},
            ),
        )

    async def append_text(self, delivery_id: int, suffix: str) -> None:
        """Add a line to a pending delivery before it is sent (the note to delete a secret). A private
        reply's text is sealed: it is opened, added to and sealed again in Python, inside the transaction
        (the row locked on PostgreSQL); one whose interval's key is gone is left as it is (never sent)."""
        sealer = self._engine.sealer
        async with self._engine.tx() as tx:
            (found,) = await tx.run(
                Statement(
                    "SELECT text, segment_id FROM deliveries WHERE id = :id AND status = 'pending' AND parts_sent = 0"
                    f"{self._engine.dialect.for_update}",
                    {"id": delivery_id},
                    Fetch.ONE,
                )
            )
            row = found.one
            if row is None or row["text"] is None:
                return
            segment_id = row["segment_id"]
            text = opened(sealer, segment_id, "deliveries.text", row["text"])
            if text is None:
                return
            try:
                longer = sealed(sealer, segment_id, "deliveries.text", text + suffix)
            except KeyLost:
                return
            await tx.run(
                Statement("UPDATE deliveries SET text = :text WHERE id = :id", {"text": longer, "id": delivery_id})
            )

    async def give_up_mirror(
        self, delivery_id: int, parts_sent: int, error: str, now: float, notice: str
    ) -> int | None:
        """A mirror's target refused it for good: in one transaction, settle the row as failed,
        disable its binding (the reason is `error`, a kind), settle the binding's other pending
        copies, and, only when this disabled the binding, queue `notice` (its `{target}` filled
        in) as a reply to the source conversation. Returns that notice's delivery id, or None."""
        error = error[:64]
        async with self._engine.tx() as tx:  # the notice's text is made in Python, from the binding disabled
            _, disabled = await tx.run(
                Statement(
                    "UPDATE deliveries SET status = 'failed', text = NULL, attempts = attempts + 1,"
                    " parts_sent = :parts, error = :error, settled_at = :now WHERE id = :id AND status = 'pending'",
                    {"parts": parts_sent, "error": error, "now": now, "id": delivery_id},
                ),
                Statement(
                    "UPDATE bindings SET state = 'disabled', disabled_reason = :error, disabled_at = :now"
                    " WHERE state = 'active'"
                    " AND id = (SELECT binding_id FROM deliveries WHERE id = :id AND kind = 'mirror')"
                    " RETURNING id, conversation_id, platform, chat_id",
                    {"error": error, "now": now, "id": delivery_id},
                    Fetch.ONE,
                ),
            )
            binding = disabled.one
            if binding is None:
                return None  # disabled already (by an earlier copy), or removed: nothing to say again
            source_of = {"c": binding["conversation_id"]}
            _, source, segment = await tx.run(
                Statement(
                    "UPDATE deliveries SET status = 'failed', text = NULL, error = 'binding disabled',"
                    " settled_at = :now WHERE binding_id = :b AND status = 'pending'",
                    {"now": now, "b": binding["id"]},
                ),
                # Locked on PostgreSQL as the valve locks it to open a segment: none opens before the notice is in.
                Statement(
                    f"SELECT platform, chat_id FROM conversations WHERE id = :c{self._engine.dialect.for_update}",
                    source_of,
                    Fetch.ONE,
                ),
                # Said in the interval open in the source now, if one is: written while private, it
                # belongs there (the schema refuses it otherwise, 0011).
                Statement(
                    "SELECT id FROM segments WHERE conversation_id = :c AND ended_at IS NULL ORDER BY id DESC LIMIT 1",
                    source_of,
                    Fetch.ONE,
                ),
            )
            if source.one is None:
                return None
            in_segment = segment.one["id"] if segment.one is not None else None
            words = notice.format(target=f"{binding['platform']}:{binding['chat_id']}", reason=error)
            try:
                text = sealed(self._engine.sealer, in_segment, "deliveries.text", words)
            except KeyLost:
                return None  # an interval whose key is gone says nothing more: the binding stays disabled
            (notice_row,) = await tx.run(
                delivery_row(
                    binding["conversation_id"],
                    DeliveryTarget(source.one["platform"], source.one["chat_id"]),
                    text,
                    now,
                    segment_id=in_segment,
                )
            )
            return int(notice_row.scalar)

    async def prune_settled(self, before: float) -> int:
        """Forget settled rows (they hold no text) once they are old."""
        (deleted,) = await self._engine.write(
            Statement(
                "DELETE FROM deliveries WHERE status IN ('sent', 'failed') AND settled_at < :before",
                {"before": before},
                Fetch.ROWCOUNT,
            )
        )
        return deleted.rowcount

    # --- streamed replies ------------------------------------------------------------------

    async def open_stream(
        self, conversation_id: int, target: DeliveryTarget, now: float, *, segment_id: int | None
    ) -> StreamedReply:
        """The row of a reply shown while the model writes it: 'streaming', without text (no partial
        answer is stored), in the interval of its turn (the trigger of 0011 refuses another), with
        that interval's expiry, read in the same transaction (one trip).

        Raises:
            IntervalEnded: `segment_id` names an interval that is no longer open by `now`.
        """
        nonce = secrets.token_hex(8)
        statements = []
        if segment_id is not None:  # first: nothing is written for an interval that ended
            statements.append(
                Statement(
                    "SELECT companion_raise('interval_ended', :what) WHERE NOT EXISTS (SELECT 1 FROM segments"
                    " WHERE id = :s AND ended_at IS NULL AND (expires_at IS NULL OR expires_at > :now))",
                    {"s": segment_id, "now": now, "what": f"segment {segment_id} ended before its reply was shown"},
                )
            )
        statements.append(
            Statement(
                "INSERT INTO deliveries (conversation_id, segment_id, kind, platform, chat_id, reply_to, thread_id,"
                " nonce, status, next_attempt_at, created_at)"
                " VALUES (:c, :s, 'reply', :platform, :chat, :reply_to, :thread, :nonce, 'streaming', :now, :now)"
                " RETURNING id, (SELECT expires_at FROM segments WHERE id = :s) AS ends_at",
                {
                    "c": conversation_id,
                    "s": segment_id,
                    "platform": target.platform,
                    "chat": target.chat_id,
                    "reply_to": target.reply_to,
                    "thread": target.thread_id,
                    "nonce": nonce,
                    "now": now,
                },
                Fetch.ONE,
            )
        )
        *_, written = await self._engine.write(*statements)
        row = written.one
        if row is None:
            raise StoreError("a stream's row was not written")
        return StreamedReply(row["id"], conversation_id, target, nonce, row["ends_at"])

    async def may_stream(self, delivery_id: int, now: float) -> bool:
        """Still streaming, its interval (if any) open at `now`, and no earlier delivery of its lane
        waiting to be sent (one of an ended interval never will be: it holds nothing back)."""
        (found,) = await self._engine.read(
            Statement(
                "SELECT 1 AS yes FROM deliveries d WHERE d.id = :id AND d.status = 'streaming'"
                f" AND {_interval_open('d')} AND NOT EXISTS ("
                " SELECT 1 FROM deliveries e WHERE e.conversation_id = d.conversation_id AND e.status = 'pending'"
                f" AND e.platform = d.platform AND e.chat_id = d.chat_id AND e.id < d.id AND {_interval_open('e')})",
                {"id": delivery_id, "now": now},
                Fetch.ONE,
            )
        )
        return found.one is not None

    async def retract(
        self, delivery_id: int, conversation_id: int, target: DeliveryTarget, shown: tuple[str, ...], now: float
    ) -> OutboundDelivery | None:
        """The row of a private answer whose interval ended while this process showed it (`shown`:
        the messages it posted, in order) or sent it becomes their retraction, as `ending_shown` makes
        it, unless its interval is still open (then nothing changes). A row its interval's deletion
        took with it is written again as the retraction alone. Returns the retraction to send; None
        when nothing was shown, or the row was settled already."""
        async with self._engine.tx() as tx:  # what is written depends on the row read first
            (found,) = await tx.run(
                Statement(
                    f"SELECT status, streamed_ids, retracts, {_INTERVAL_OPEN} AS is_open FROM deliveries"
                    f" WHERE id = :id{self._engine.dialect.for_update}",
                    {"id": delivery_id, "now": now},
                    Fetch.ONE,
                )
            )
            row = found.one
            if row is not None:
                if row["status"] not in ("streaming", "pending") or (row["is_open"] and not row["retracts"]):
                    return None
                recorded = tuple((row["streamed_ids"] or "").split())
                ids = shown if len(shown) >= len(recorded) else recorded
                if not ids:
                    return None
                await tx.run(
                    Statement(
                        "UPDATE deliveries SET segment_id = NULL, message_id = NULL, status = 'pending', text = :shown,"
                        " retracts = 1, streamed_ids = :ids, parts_sent = 0, attempts = 0, error = NULL,"
                        " next_attempt_at = :now WHERE id = :id",
                        {"shown": INTERVAL_ENDED_SHOWN, "ids": " ".join(ids), "now": now, "id": delivery_id},
                    )
                )
                retraction = delivery_id
            else:
                if not shown:
                    return None
                # Gone with its interval (the sweep ran first): only the retraction is written, and only
                # while no interval is open in the conversation (it belongs to none).
                (inserted,) = await tx.run(
                    Statement(
                        "INSERT INTO deliveries (conversation_id, kind, platform, chat_id, reply_to, thread_id, nonce,"
                        " text, retracts, streamed_ids, next_attempt_at, created_at)"
                        " SELECT :c, 'reply', :platform, :chat, :reply_to, :thread, :nonce, :shown, 1, :ids, :now, :now"
                        " WHERE NOT EXISTS (SELECT 1 FROM segments WHERE conversation_id = :c AND ended_at IS NULL)"
                        " RETURNING id",
                        {
                            "c": conversation_id,
                            "platform": target.platform,
                            "chat": target.chat_id,
                            "reply_to": target.reply_to,
                            "thread": target.thread_id,
                            "nonce": secrets.token_hex(8),
                            "shown": INTERVAL_ENDED_SHOWN,
                            "ids": " ".join(shown),
                            "now": now,
                        },
                        Fetch.ONE,
                    )
                )
                if inserted.one is None:
                    return None
                retraction = int(inserted.scalar)
            (written,) = await tx.run(
                Statement(f"SELECT {_COLUMNS} FROM deliveries WHERE id = :id", {"id": retraction}, Fetch.ONE)
            )
            return delivery_of(written.one) if written.one is not None else None

    async def retractions(self, conversation_id: int | None = None) -> list[tuple[int, int]]:
        """(conversation, id) of each retraction waiting to be sent (of one conversation, or all)."""
        scope = "" if conversation_id is None else " AND conversation_id = :c"
        (found,) = await self._engine.read(
            Statement(
                f"SELECT conversation_id, id FROM deliveries WHERE retracts = 1 AND status = 'pending'{scope}"
                " ORDER BY id",
                {} if conversation_id is None else {"c": conversation_id},
                Fetch.ALL,
            )
        )
        return [(r["conversation_id"], r["id"]) for r in found.rows]

    async def record_streamed(self, delivery_id: int, message_ids: tuple[str, ...]) -> None:
        # Fsynced: after a power cut as after a crash, the final send must find the messages to edit.
        await self._engine.write(
            Statement(
                "UPDATE deliveries SET streamed_ids = :ids WHERE id = :id AND status IN ('streaming', 'pending')",
                {"ids": " ".join(message_ids), "id": delivery_id},
            )
        )

    async def left_stream(self, conversation_id: int, before: float) -> int | None:
        (found,) = await self._engine.read(
            Statement(
                "SELECT max(id) FROM deliveries WHERE conversation_id = :c AND status = 'streaming'"
                " AND created_at < :before",
                {"c": conversation_id, "before": before},
                Fetch.ONE,
            )
        )
        return found.scalar

    async def cut_off_streams(self, before: float, text: str, now: float) -> list[tuple[int, int]]:
        """Streams a crash left: one that showed nothing is deleted; the others get `text` (sealed in a
        private one's row; one whose interval's key is gone is settled unsent) and become pending."""
        _, cut, private = await self._engine.write(
            Statement(
                "DELETE FROM deliveries WHERE status = 'streaming' AND created_at < :before AND streamed_ids IS NULL",
                {"before": before},
            ),
            Statement(
                "UPDATE deliveries SET status = 'pending', text = :text, next_attempt_at = :now"
                " WHERE status = 'streaming' AND created_at < :before AND segment_id IS NULL"
                " RETURNING conversation_id, id",
                {"text": text, "now": now, "before": before},
                Fetch.ALL,
            ),
            Statement(
                "SELECT conversation_id, id, segment_id FROM deliveries"
                " WHERE status = 'streaming' AND created_at < :before AND segment_id IS NOT NULL",
                {"before": before},
                Fetch.ALL,
            ),
        )
        rows = [(r["conversation_id"], r["id"]) for r in cut.rows]
        if private.rows:  # rare (a restart closes intervals first): each row sealed under its own interval's key
            rows += await self._cut_off_private(private.rows, text, now)
        return sorted(rows)

    async def _cut_off_private(self, found: Sequence[Row], text: str, now: float) -> list[tuple[int, int]]:
        statements: list[Statement] = []
        made_pending: list[bool] = []
        for row in found:
            try:
                words = sealed(self._engine.sealer, row["segment_id"], "deliveries.text", text)
            except KeyLost:  # its words cannot be sealed: settled unsent, as its interval's close settles it
                statements.append(
                    Statement(
                        "UPDATE deliveries SET status = 'failed', text = NULL, error = 'key lost', settled_at = :now"
                        " WHERE id = :id AND status = 'streaming'",
                        {"now": now, "id": row["id"]},
                        Fetch.ROWCOUNT,
                    )
                )
                made_pending.append(False)
                continue
            statements.append(
                Statement(
                    "UPDATE deliveries SET status = 'pending', text = :text, next_attempt_at = :now"
                    " WHERE id = :id AND status = 'streaming' AND segment_id = :s",
                    {"text": words, "now": now, "id": row["id"], "s": row["segment_id"]},
                    Fetch.ROWCOUNT,
                )
            )
            made_pending.append(True)
        results = await self._engine.write(*statements)
        return [
            (row["conversation_id"], row["id"])
            for row, result, pending in zip(found, results, made_pending, strict=True)
            if pending and result.rowcount > 0
        ]

    async def report(self, now: float) -> dict[str, Any]:
        """For `companion report`: deliveries by kind and state, the oldest pending one's age, and
        bindings by state. Counts and times only."""
        by_kind, oldest, streamed, bindings = await self._engine.read(
            Statement("SELECT kind, status, count(*) AS n FROM deliveries GROUP BY kind, status", fetch=Fetch.ALL),
            Statement("SELECT min(created_at) FROM deliveries WHERE status = 'pending'", fetch=Fetch.ONE),
            Statement(
                "SELECT count(*) FROM deliveries WHERE kind = 'reply' AND status = 'sent' AND streamed_ids IS NOT NULL",
                fetch=Fetch.ONE,
            ),
            Statement("SELECT state, count(*) AS n FROM bindings GROUP BY state", fetch=Fetch.ALL),
        )
        oldest_at = oldest.scalar
        # Sorted here, not in SQL: by code point on every engine (PostgreSQL's collation may order otherwise).
        return {
            "deliveries": sorted((r["kind"], r["status"], r["n"]) for r in by_kind.rows),
            "oldest_pending_age": None if oldest_at is None else max(0.0, now - oldest_at),
            "streamed": streamed.scalar or 0,
            "bindings": sorted((r["state"], r["n"]) for r in bindings.rows),
        }


# A retraction settled is deleted at once: nothing of its interval is kept longer than needed.
_FORGET_RETRACTION = "DELETE FROM deliveries WHERE id = :id AND retracts = 1"


def opened_deliveries(sealer: Sealer, rows: Sequence[Row]) -> list[OutboundDelivery]:
    """Delivery rows with a private reply's text opened; one whose interval's key is gone is left out:
    never sent, settled unsent when its interval is closed (`key_lost`)."""
    deliveries = []
    for row in rows:
        text = opened(sealer, row["segment_id"], "deliveries.text", row["text"])
        if text is None and row["text"] is not None:
            continue
        deliveries.append(delivery_of({**row, "text": text}))
    return deliveries


def delivery_of(row: Row | aiosqlite.Row) -> OutboundDelivery:
    return OutboundDelivery(
        id=row["id"],
        conversation_id=row["conversation_id"],
        kind=row["kind"],
        target=DeliveryTarget(row["platform"], row["chat_id"], row["reply_to"], row["thread_id"]),
        nonce=row["nonce"],
        text=row["text"] or "",
        parts_sent=row["parts_sent"],
        attempts=row["attempts"],
        in_segment=bool(row["in_segment"]),
        message_id=row["message_id"],
        streamed=tuple((row["streamed_ids"] or "").split()),
        segment_id=row["segment_id"],
        ends_at=row["ends_at"],
        retracts=bool(row["retracts"]),
    )
