"""SQL of the lockout logs: one implementation of the log of wrong tries, over the table of each
kind of entry (the valve's passphrase, link codes)."""

from __future__ import annotations

from typing import Literal

from adapters.storage.database import Database

# The tables of wrong tries (migrations): the only names this class puts into its SQL.
AttemptTable = Literal["valve_attempts", "link_attempts"]


class AttemptQueries:
    """Implements core.ports.store.attempts.AttemptLog over `table`."""

    def __init__(self, db: Database, table: AttemptTable) -> None:
        self._db = db
        self._table = table

    async def failed_since(self, account_id: int, since: float) -> list[float]:
        rows = await self._db.all(
            f"SELECT attempted_at FROM {self._table} WHERE account_id = ? AND attempted_at > ? ORDER BY attempted_at",
            (account_id, since),
        )
        return [r[0] for r in rows]

    async def record_failed(self, account_id: int, now: float, keep_after: float) -> None:
        async with self._db.tx() as db:
            await db.execute(f"INSERT INTO {self._table} (account_id, attempted_at) VALUES (?, ?)", (account_id, now))
            await db.execute(f"DELETE FROM {self._table} WHERE attempted_at <= ?", (keep_after,))

    async def clear_failed(self, account_id: int) -> None:
        async with self._db.tx() as db:
            await db.execute(f"DELETE FROM {self._table} WHERE account_id = ?", (account_id,))
