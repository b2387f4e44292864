"""The interval keys over an engine: each segment bound to its key at start (the reconcile is ModeQueries')."""

from __future__ import annotations

from dataclasses import dataclass

from adapters.storage.engine import Database, Fetch, Statement

KEY_LOST = "key_lost"  # the end_reason of an interval closed because its key is gone
# A key younger than this is no orphan at start: `companion run` and `companion chat` may share a database,
# and the other one may be between a key's creation and its segment's commit (milliseconds, as a rule).
ORPHAN_GRACE = 600.0


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
