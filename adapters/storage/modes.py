"""SQL of the mode state: private segments, and adapter offsets."""

from __future__ import annotations

import logging
import time

import aiosqlite

from adapters.storage.engine import Database, Fetch, Row, Statement
from adapters.storage.intervals import KEY_LOST, ORPHAN_GRACE, Reconciled
from adapters.storage.outbox import ending_shown
from adapters.storage.privacy import Checkpoints, owing_checkpoint
from core.values.errors import StoreError
from core.values.model import Segment

log = logging.getLogger(__name__)

SEGMENT_COLUMNS = (
    "id, conversation_id, anchor_message_id, started_at, last_activity_at, ended_at, end_reason, expires_at"
)

# A restart closes an interval at the end of its stored record: the latest of its start, its last
# activity and its newest message (SQLite's scalar max() and PostgreSQL's greatest() differ, CASE does not).
_RECORD_END = "coalesce((SELECT max(created_at) FROM messages WHERE messages.segment_id = segments.id), 0)"
_LATEST = (
    f"CASE WHEN started_at >= last_activity_at AND started_at >= {_RECORD_END} THEN started_at"
    f" WHEN last_activity_at >= {_RECORD_END} THEN last_activity_at ELSE {_RECORD_END} END"
)


class ModeQueries:
    """Private segments and adapter offsets; implements core.ports.store.modes (ModeStore,
    OpenSegmentRead, CrashModes, IntervalList) and core.ports.chat.AdapterStateStore.

    `checkpoints` (SQLite only: its WAL) is the hook of the checkpoint a deletion of private rows owes:
    with it, deleting expired segments records the debt in the same write and finishes it after; without
    it (PostgreSQL, which has no such checkpoint to force) nothing is owed."""

    def __init__(
        self, engine: Database, checkpoints: Checkpoints | None = None, *, process_id: int | None = None
    ) -> None:
        self._engine = engine
        self._checkpoints = checkpoints
        # A process of a shared database (issue 33): its crash recovery leaves alone every conversation another
        # process holds (its claim taken over first, core/turn/recovery.py), whatever its keys.
        self._process_id = process_id

    def _not_held_elsewhere(self) -> tuple[str, dict[str, object]]:
        """The predicate on `conversation_id` that leaves out what another process holds (none alone)."""
        if self._process_id is None:
            return "", {}
        return (
            " AND conversation_id NOT IN (SELECT conversation_id FROM chat_claims WHERE holder IS DISTINCT FROM :me)",
            {"me": self._process_id},
        )

    # --- private segments (the mode state) ---------------------------------

    async def open_segment(self, conversation_id: int, now: float, expires_at: float | None) -> Segment:
        """The conversation's open segment, opened now unless one is open already: one write. On PostgreSQL
        the conversation's row is locked first, the lock the guard of lasting writes takes (guard.py), so no
        segment opens between a guarded write's check and its commit.

        With a sealer that keeps keys, the interval's key is made durable first and the segment row names
        it (`key_id`): a crash between the two leaves an orphan key, shredded at the next start; a key made
        for nothing (a segment was open already) is shredded at once.

        Raises:
            KeyLost: no key can be made (PostgreSQL without a key folder): nothing opens."""
        sealer = self._engine.sealer
        key_id = await sealer.create(expires_at)
        params = {"c": conversation_id, "now": now, "expires": expires_at, "key": key_id}
        statements = [
            Statement(
                "INSERT INTO segments (conversation_id, anchor_message_id, started_at, last_activity_at, expires_at,"
                " key_id) SELECT :c, coalesce((SELECT max(id) FROM messages WHERE conversation_id = :c), 0), :now,"
                " :now, CAST(:expires AS DOUBLE PRECISION), CAST(:key AS TEXT) WHERE NOT EXISTS"
                " (SELECT 1 FROM segments WHERE conversation_id = :c AND ended_at IS NULL)",
                params,
            ),
            Statement(
                f"SELECT {SEGMENT_COLUMNS}, key_id FROM segments WHERE conversation_id = :c AND ended_at IS NULL"
                " ORDER BY id DESC LIMIT 1",
                params,
                Fetch.ONE,
            ),
        ]
        if self._engine.dialect.for_update:
            lock = f"SELECT id FROM conversations WHERE id = :c{self._engine.dialect.for_update}"
            statements.insert(0, Statement(lock, params))
        try:
            results = await self._engine.write(*statements)
        except BaseException:
            if key_id is not None:
                await sealer.shred([key_id])
            raise
        row = results[-1].one
        if key_id is not None and (row is None or row["key_id"] != key_id):
            await sealer.shred([key_id])  # not used: a segment was open already (or none could open)
        if row is None:  # the INSERT's foreign key refuses a conversation that does not exist
            raise StoreError(f"conversation {conversation_id} has no open segment after opening one")
        sealer.bind(row["id"], row["key_id"])
        return segment_of_row(row)

    async def open_segment_of(self, conversation_id: int) -> Segment | None:
        """The conversation's open segment. One whose key is gone fails closed: it is closed now
        (`key_lost`, its replies not sent yet settled unsent) and the conversation reads as normal mode."""
        (result,) = await self._engine.read(
            Statement(
                f"SELECT {SEGMENT_COLUMNS}, key_id FROM segments WHERE conversation_id = :c AND ended_at IS NULL"
                " ORDER BY id DESC LIMIT 1",
                {"c": conversation_id},
                Fetch.ONE,
            )
        )
        row = result.one
        if row is None:
            return None
        sealer = self._engine.sealer
        if sealer.keyed:
            sealer.bind(row["id"], row["key_id"])
            if not sealer.has_key(row["id"]):
                # Closed at its last activity, as a restart closes one at the end of its record.
                await close_keyless(self._engine, [row["id"]], row["last_activity_at"])
                return None
        return segment_of_row(row)

    # Each end of an interval settles, in the same write, the replies of the interval not sent yet
    # (`ending_shown`): nothing more of it goes out, and what it showed is edited once into a constant.

    async def close_segment(self, segment_id: int, now: float, reason: str) -> bool:
        results = await self._engine.write(
            *ending_shown("SELECT id FROM segments WHERE id = :seg AND ended_at IS NULL", {"seg": segment_id}, now),
            Statement(
                "UPDATE segments SET ended_at = :now, end_reason = :reason WHERE id = :seg AND ended_at IS NULL",
                {"now": now, "reason": reason, "seg": segment_id},
                Fetch.ROWCOUNT,
            ),
        )
        return results[-1].rowcount > 0

    async def close_open_segments(self, conversation_id: int, now: float, reason: str) -> int:
        results = await self._engine.write(
            *ending_shown(
                "SELECT id FROM segments WHERE conversation_id = :c AND ended_at IS NULL", {"c": conversation_id}, now
            ),
            Statement(
                "UPDATE segments SET ended_at = :now, end_reason = :reason WHERE conversation_id = :c"
                " AND ended_at IS NULL",
                {"now": now, "reason": reason, "c": conversation_id},
                Fetch.ROWCOUNT,
            ),
        )
        return results[-1].rowcount

    async def close_crash_open_segments(
        self, platforms: frozenset[str] | None = None, now: float | None = None
    ) -> list[int]:
        """At start-up: close every open segment (of conversations on `platforms`, or all) at the
        end of its stored record (its newest message, or its start when it holds none). Nothing
        after the restart falls inside it; `now` is kept as the segment's `restart_at`, so a
        message sent before it that arrives later is known to belong to it. Returns the
        conversations whose segment was closed.

        First, the interval keys' start-up step (`reconcile_keys`): orphan keys shredded, intervals
        without their key masked (an open one closed `key_lost`, its replies settled unsent)."""
        params: dict[str, object] = {f"p{n}": platform for n, platform in enumerate(sorted(platforms or ()))}
        scope = (
            ""
            if platforms is None
            else (
                " AND conversation_id IN (SELECT id FROM conversations WHERE platform IN"
                f" ({', '.join(f':{name}' for name in params) or 'NULL'}))"
            )
        )
        mine, me = self._not_held_elsewhere()
        scope += mine
        params.update(me)
        open_ones = Statement(
            f"SELECT DISTINCT conversation_id FROM segments WHERE ended_at IS NULL{scope} ORDER BY conversation_id",
            params,
            Fetch.ALL,
        )
        keyed = self._engine.sealer.keyed
        # An interval the keys' step closes (`key_lost`: its key expired by name or is gone) was closed by
        # this start too: what was sent in it before the start must be kept from normal mode like the rest.
        (before,) = await self._engine.read(open_ones) if keyed else (None,)
        await reconcile(self._engine, time.time() if now is None else now, not_held_elsewhere=(mine, me))
        closed = set(await self._close_as_restart(open_ones, scope, params, now))
        if before is not None:
            closed.update(row["conversation_id"] for row in before.rows)
        return sorted(closed)

    async def close_taken_over(self, conversation_ids: list[int], now: float) -> list[int]:
        """A shared database's take-over (core/turn/recovery.py `Recovery.taken_over`): the open segments of
        `conversation_ids`, whose process died or stopped, closed as a restart closes them (at the end of their
        stored record, `now` their `restart_at`), never resumed. Returns the conversations whose segment closed."""
        if not conversation_ids:
            return []
        params: dict[str, object] = {f"c{n}": c for n, c in enumerate(conversation_ids)}
        scope = f" AND conversation_id IN ({', '.join(f':{name}' for name in params)})"
        open_ones = Statement(
            f"SELECT DISTINCT conversation_id FROM segments WHERE ended_at IS NULL{scope} ORDER BY conversation_id",
            params,
            Fetch.ALL,
        )
        return await self._close_as_restart(open_ones, scope, params, now)

    async def _close_as_restart(
        self, open_ones: Statement, scope: str, params: dict[str, object], now: float | None
    ) -> list[int]:
        results = await self._engine.write(
            open_ones,
            # Due at once: the retractions are sent as soon as the adapters can send.
            *ending_shown(f"SELECT id FROM segments WHERE ended_at IS NULL{scope}", params, now or 0.0),
            Statement(
                f"UPDATE segments SET end_reason = 'restart', restart_at = :restart, ended_at = {_LATEST}"
                f" WHERE ended_at IS NULL{scope}",
                {**params, "restart": now},
            ),
        )
        return [row["conversation_id"] for row in results[0].rows]

    async def restart_segment_for(self, conversation_id: int, sent_at: float) -> int | None:
        """The segment a message sent at `sent_at` (platform time) belongs to although it arrives
        only now: the conversation's newest segment, when a restart closed it after `sent_at`.
        Turns of a chat run in order, so a message not stored yet was sent after every stored
        one, inside that interval."""
        (result,) = await self._engine.read(
            Statement(
                "SELECT id, restart_at FROM segments WHERE conversation_id = :c ORDER BY id DESC LIMIT 1",
                {"c": conversation_id},
                Fetch.ONE,
            )
        )
        row = result.one
        if row is None or row["restart_at"] is None:  # only a restart's close sets restart_at
            return None
        return row["id"] if sent_at < row["restart_at"] else None

    async def private_intervals(self, conversation_id: int, now: float) -> list[Segment]:
        """The segments of the conversation that still exist: open, or ended and not expired by `now`
        (an expired one the sweep has not deleted yet is gone already for every reader)."""
        (result,) = await self._engine.read(
            Statement(
                f"SELECT {SEGMENT_COLUMNS} FROM segments WHERE conversation_id = :c"
                " AND (expires_at IS NULL OR expires_at > :now) ORDER BY id",
                {"c": conversation_id, "now": now},
                Fetch.ALL,
            )
        )
        return [segment_of_row(row) for row in result.rows]

    async def delete_expired_segments(self, now: float) -> int:
        """Delete every segment whose expiry has passed; the foreign keys remove what hangs off it
        (messages, summaries, pad entries, tool operations, pending crossings). On SQLite a checkpoint
        leaves none of it in the WAL (or, blocked by a reader, is owed and finished by the next
        deletion, sweep or start).

        Keys first, rows after: every key whose file name says its interval expired is shredded before
        the database is asked anything (so expiry holds while it is down), then the keys of the expired
        segments it names, then their rows."""
        sealer = self._engine.sealer
        expired = "SELECT id FROM segments WHERE expires_at IS NOT NULL AND expires_at <= :now"
        params = {"now": now}
        if sealer.keyed:
            await sealer.expire(now)
            (keyed,) = await self._engine.read(
                Statement(
                    "SELECT key_id FROM segments WHERE expires_at IS NOT NULL AND expires_at <= :now"
                    " AND key_id IS NOT NULL",
                    params,
                    Fetch.ALL,
                )
            )
            await sealer.shred(row["key_id"] for row in keyed.rows)
        owed = () if self._checkpoints is None else (owing_checkpoint(expired, params),)
        results = await self._engine.write(
            *ending_shown(expired, params, now),
            *owed,
            Statement(
                "DELETE FROM segments WHERE expires_at IS NOT NULL AND expires_at <= :now RETURNING id",
                params,
                Fetch.ALL,
            ),
        )
        for row in results[-1].rows:
            sealer.unbind(row["id"])
        if self._checkpoints is not None:
            await self._checkpoints.finish_owed()
        return len(results[-1].rows)

    async def reconcile_keys(self, now: float) -> Reconciled:
        """The start-up step of the interval keys (`reconcile` below), before any
        interval opens. `close_crash_open_segments` runs it at every start; call it alone where no start-up
        recovery runs (after `companion restore`). No-op with a sealer without keys (SQLite's plain text)."""
        return await reconcile(self._engine, now)

    # --- adapter state (offsets, cursors) -----------------------------------

    async def get_adapter_state(self, name: str) -> str | None:
        (result,) = await self._engine.read(
            Statement("SELECT value FROM adapter_state WHERE name = :name", {"name": name}, Fetch.ONE)
        )
        return result.scalar

    async def set_adapter_state(self, name: str, value: str, now: float) -> None:
        """Not fsynced: an offset lost to a power cut only makes the platform deliver again, and
        the inbox makes a redelivery a no-op."""
        await self._engine.write(
            Statement(
                "INSERT INTO adapter_state (name, value, updated_at) VALUES (:name, :value, :now)"
                " ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
                {"name": name, "value": value, "now": now},
            ),
            durable=False,
        )


# --- the interval keys at start, and failing closed ---------------------------------------------------


async def reconcile(
    engine: Database,
    now: float,
    *,
    grace: float = ORPHAN_GRACE,
    not_held_elsewhere: tuple[str, dict[str, object]] = ("", {}),
) -> Reconciled:
    """At start, before any interval opens and while no other process writes (after the instance lock):
    settle the key folder with the segments both ways. Every key no segment names is shredded (an orphan:
    a crash between a key's creation and its segment's commit, or after a deletion's shred); a segment left
    without its key (a lost or restored-elsewhere key folder, a crash between a shred and the deletion) is
    masked: its rows open to nothing and are left out of every view, normal mode still sees its one
    placeholder, an open one is closed (`key_lost`) with its pending replies settled unsent, and it is
    deleted at its expiry or by `/forget private` like any other. A key written in the last `grace` seconds
    (wall clock) is spared: another process's segment may be about to name it. No-op for a sealer without keys."""
    sealer = engine.sealer
    if not sealer.keyed:
        return Reconciled(0, 0)
    await sealer.expire(now)  # keys first: an expired interval's key goes even before its rows
    # On a shared database another process's intervals are sealed under keys of its own folder: never closed here
    # for that (`not_held_elsewhere`, ModeQueries'), only masked to this process, which cannot open them.
    mine, me = not_held_elsewhere
    every = Statement("SELECT id, key_id, ended_at FROM segments", fetch=Fetch.ALL)
    found, *ours = await engine.read(
        every, *([Statement(f"SELECT id FROM segments WHERE TRUE{mine}", me, Fetch.ALL)] if mine else [])
    )
    for row in found.rows:
        sealer.bind(row["id"], row["key_id"])
    live = {row["key_id"] for row in found.rows if row["key_id"] is not None}
    lost = await sealer.reconcile(live, spare_after=time.time() - grace)
    closable = {row["id"] for row in (ours[0] if ours else found).rows}
    keyless = [
        row["id"] for row in found.rows if (row["key_id"] is None or row["key_id"] in lost) and row["id"] in closable
    ]
    closed = await close_keyless(engine, keyless, now)
    if keyless:
        log.warning("%d private interval(s) have no key: masked, %d closed", len(keyless), closed)
    return Reconciled(len(keyless), closed)


async def close_keyless(engine: Database, segment_ids: list[int], now: float) -> int:
    """Close the open ones of `segment_ids` (`key_lost`), settling their replies not sent yet in the same
    write (`ending_shown`): nothing of an interval whose words cannot be opened goes out. Returns how many."""
    if not segment_ids:
        return 0
    params: dict[str, object] = {f"k{n}": segment for n, segment in enumerate(segment_ids)}
    ids = ", ".join(f":{name}" for name in params)
    open_ones = f"SELECT id FROM segments WHERE id IN ({ids}) AND ended_at IS NULL"
    *_, closed = await engine.write(
        *ending_shown(open_ones, params, now),
        Statement(
            f"UPDATE segments SET ended_at = :ended_now, end_reason = '{KEY_LOST}'"
            f" WHERE id IN ({ids}) AND ended_at IS NULL",
            {**params, "ended_now": now},
            Fetch.ROWCOUNT,
        ),
    )
    return closed.rowcount


def segment_of_row(row: Row | aiosqlite.Row) -> Segment:
    return Segment(
        row["id"],
        row["conversation_id"],
        row["anchor_message_id"],
        row["started_at"],
        row["last_activity_at"],
        row["ended_at"],
        row["end_reason"],
        row["expires_at"],
    )
