"""SQL of chat claims on a shared PostgreSQL database (issue 33): implements core.ports.store.claims.ChatClaims.

One row per conversation (`chat_claims`): its holder (a row of gateway_processes) and a fence incremented at
each take-over. A claim is taken in one statement: inserted, or updated when its holder is dead (its key
released or its heartbeat stale, adapters/storage/postgres/processes.py ALIVE) or gone; a live holder keeps it.
The schema's trigger (migrations/postgres/0018) refuses the writes of a process that no longer holds it.
"""

from __future__ import annotations

import logging

from adapters.storage.engine import Database, Fetch, Statement
from adapters.storage.postgres.processes import ALIVE, NOW
from core.ports.store.claims import Claim

log = logging.getLogger(__name__)

# The holder of `chat_claims` may be replaced: none (its process stopped), or a process no longer alive.
_HOLDER_GONE = (
    f"(chat_claims.holder IS NULL OR NOT EXISTS (SELECT 1 FROM gateway_processes p WHERE p.id = chat_claims.holder"
    f" AND {ALIVE}))"
)


class ClaimQueries:
    """The claims of process `process_id` (its row in gateway_processes)."""

    def __init__(self, engine: Database, process_id: int) -> None:
        self._engine = engine
        self.process_id = process_id
        self._held: dict[int, int] = {}  # conversation -> the fence this process took it under
        self.taken_over = 0  # conversations taken over from a process that died or stopped, since the start

    async def claim(self, conversation_id: int) -> Claim | None:
        if (fence := self._held.get(conversation_id)) is not None:
            # Held since: lost only when this process counts as dead, and then it stops (and the fence refuses).
            return Claim(conversation_id, fence, taken_over=False)
        params = {"c": conversation_id, "me": self.process_id}
        taken, now_held = await self._engine.write(
            Statement(
                "INSERT INTO chat_claims (conversation_id, holder, fence, claimed_at)"
                f" VALUES (:c, :me, 1, {NOW})"
                " ON CONFLICT (conversation_id) DO UPDATE SET holder = excluded.holder,"
                " fence = chat_claims.fence + 1, claimed_at = excluded.claimed_at"
                f" WHERE chat_claims.holder IS DISTINCT FROM excluded.holder AND {_HOLDER_GONE}"
                " RETURNING fence",
                params,
                Fetch.ONE,
            ),
            Statement("SELECT holder, fence FROM chat_claims WHERE conversation_id = :c", params, Fetch.ONE),
        )
        row = now_held.one
        if row is None or row["holder"] != self.process_id:
            return None
        fence = int(row["fence"])
        self._held[conversation_id] = fence
        # A fence past 1 that this statement set: the row named another process, dead or gone.
        taken_over = taken.one is not None and fence > 1
        if taken_over:
            self.taken_over += 1
            log.info("conversation %s taken over (fence %d)", conversation_id, fence)
        return Claim(conversation_id, fence, taken_over=taken_over)

    async def take_over_dead(self, platforms: frozenset[str] | None = None) -> list[Claim]:
        params: dict[str, object] = {f"p{n}": platform for n, platform in enumerate(sorted(platforms or ()))}
        served = (
            ""
            if platforms is None
            else " AND conversation_id IN (SELECT id FROM conversations WHERE platform IN"
            f" ({', '.join(f':{name}' for name in params) or 'NULL'}))"
        )
        (taken,) = await self._engine.write(
            Statement(
                f"UPDATE chat_claims SET holder = :me, fence = fence + 1, claimed_at = {NOW}"
                f" WHERE holder IS DISTINCT FROM :me AND {_HOLDER_GONE}{served} RETURNING conversation_id, fence",
                {"me": self.process_id, **params},
                Fetch.ALL,
            )
        )
        claims = [Claim(int(r["conversation_id"]), int(r["fence"]), taken_over=True) for r in taken.rows]
        for claim in claims:
            self._held[claim.conversation_id] = claim.fence
        self.taken_over += len(claims)
        if claims:
            log.info("took over %d conversations of processes that died or stopped", len(claims))
        return claims

    async def held_elsewhere(self, platform: str) -> int:
        (held,) = await self._engine.read(
            Statement(
                "SELECT count(*) AS n FROM chat_claims JOIN conversations v ON v.id = chat_claims.conversation_id"
                f" WHERE v.platform = :platform AND chat_claims.holder IS DISTINCT FROM :me AND NOT {_HOLDER_GONE}",
                {"platform": platform, "me": self.process_id},
                Fetch.ONE,
            )
        )
        return int(held.one["n"]) if held.one is not None else 0

    def holds(self, conversation_id: int) -> bool:
        return conversation_id in self._held

    async def others_alive(self) -> list[int]:
        """The ids of the other live processes of the database, lowest first (by the server's clock)."""
        (found,) = await self._engine.read(
            Statement(
                f"SELECT p.id FROM gateway_processes p WHERE p.id <> :me AND {ALIVE} ORDER BY p.id",
                {"me": self.process_id},
                Fetch.ALL,
            )
        )
        return [int(row["id"]) for row in found.rows]

    async def first_alive(self) -> bool:
        """Whether this process has the lowest id of the live ones: the one that sets Telegram's webhook."""
        return all(other > self.process_id for other in await self.others_alive())

    async def last_alive(self) -> bool:
        """Whether no other process is alive: the one that removes Telegram's webhook at a clean stop."""
        return not await self.others_alive()

    @property
    def held(self) -> int:
        """How many conversations this process holds (for /readyz and /metrics)."""
        return len(self._held)


class JobSlots:
    """Each run of a scheduled job once across the processes of a shared database (bot/scheduler.py
    `once_across`): a row of job_runs per job and slot (the job's interval count since the epoch, by the server's
    clock, so that hosts whose clocks differ agree); the first insert wins the slot, the others skip it."""

    KEEP_SLOTS = 100  # rows kept per job: enough to read who ran what lately, never growing

    def __init__(self, engine: Database, process_id: int) -> None:
        self._engine = engine
        self.process_id = process_id

    async def take(self, job: str, seconds: float) -> bool:
        """Whether this process runs the job's current slot (an interval of `seconds`)."""
        slot = f"CAST(floor({NOW} / :seconds) AS bigint)"
        taken, _ = await self._engine.write(
            Statement(
                f"INSERT INTO job_runs (job, slot, process_id, ran_at) VALUES (:job, {slot}, :me, {NOW})"
                " ON CONFLICT (job, slot) DO NOTHING",
                {"job": job, "seconds": seconds, "me": self.process_id},
                Fetch.ROWCOUNT,
            ),
            Statement(
                f"DELETE FROM job_runs WHERE job = :job AND slot < {slot} - :keep",
                {"job": job, "seconds": seconds, "keep": self.KEEP_SLOTS},
            ),
            durable=False,  # a slot lost to a crash of the server only lets a run happen once more
        )
        return taken.rowcount == 1
