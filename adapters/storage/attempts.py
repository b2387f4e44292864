"""SQL of the lockout logs: one implementation of the log of wrong tries, over the table of each
kind of entry (the valve's passphrase, link codes)."""

from __future__ import annotations

from typing import Literal

from adapters.storage.engine import Database, Fetch, Statement

# The tables of wrong tries (migrations): the only names this class puts into its SQL.
AttemptTable = Literal["valve_attempts", "link_attempts"]


class AttemptQueries:
    """Implements core.ports.store.attempts.AttemptLog over `table`."""

    def __init__(self, engine: Database, table: AttemptTable) -> None:
        self._engine = engine
        self._table = table

    async def failed_since(self, account_id: int, since: float) -> list[float]:
        (found,) = await self._engine.read(
            Statement(
                f"SELECT attempted_at FROM {self._table} WHERE account_id = :a AND attempted_at > :since"
                " ORDER BY attempted_at",
                {"a": account_id, "since": since},
                Fetch.ALL,
            )
        )
        return [r["attempted_at"] for r in found.rows]

    async def record_failed(self, account_id: int, now: float, keep_after: float) -> None:
        await self._engine.write(
            Statement(
                f"INSERT INTO {self._table} (account_id, attempted_at) VALUES (:a, :now)", {"a": account_id, "now": now}
            ),
            Statement(f"DELETE FROM {self._table} WHERE attempted_at <= :keep_after", {"keep_after": keep_after}),
        )

    async def clear_failed(self, account_id: int) -> None:
        await self._engine.write(Statement(f"DELETE FROM {self._table} WHERE account_id = :a", {"a": account_id}))
