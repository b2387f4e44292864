"""The interval keys' life over an engine: segments bound to their keys at start, and start-up's reconcile."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from adapters.storage.engine import Database, Fetch, Statement
from adapters.storage.outbox import ending_shown

log = logging.getLogger(__name__)

KEY_LOST = "key_lost"  # the end_reason of an interval closed because its key is gone


@dataclass(frozen=True, slots=True)
class Reconciled:
    """What `reconcile` did: keyless segments found (masked; the open ones closed) and orphan keys shredded.
    Counts only: never an id or a time in a log line."""

    keyless: int
    closed: int


async def bind_segments(engine: Database) -> None:
    """Tell the engine's sealer the key of every segment that exists (at start: the keys outlive a restart,
    so a later interval reads the private pad of the earlier ones until they expire)."""
    if not engine.sealer.keyed:
        return
    (found,) = await engine.read(Statement("SELECT id, key_id FROM segments", fetch=Fetch.ALL))
    for row in found.rows:
        engine.sealer.bind(row["id"], row["key_id"])


async def reconcile(engine: Database, now: float) -> Reconciled:
    """At start, before any interval opens and while no other process writes (after the instance lock):
    settle the key folder with the segments both ways. Every key no segment names is shredded (an orphan:
    a crash between a key's creation and its segment's commit, or after a deletion's shred); a segment left
    without its key (a lost or restored-elsewhere key folder, a crash between a shred and the deletion) is
    masked: its rows open to nothing and are left out of every view, normal mode still sees its one
    placeholder, an open one is closed (`key_lost`) with its pending replies settled unsent, and it is
    deleted at its expiry or by `/forget private` like any other. No-op for a sealer without keys."""
    sealer = engine.sealer
    if not sealer.keyed:
        return Reconciled(0, 0)
    await sealer.expire(now)  # keys first: an expired interval's key goes even before its rows
    (found,) = await engine.read(Statement("SELECT id, key_id, ended_at FROM segments", fetch=Fetch.ALL))
    for row in found.rows:
        sealer.bind(row["id"], row["key_id"])
    live = {row["key_id"] for row in found.rows if row["key_id"] is not None}
    lost = await sealer.reconcile(live)
    keyless = [row["id"] for row in found.rows if row["key_id"] is None or row["key_id"] in lost]
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
