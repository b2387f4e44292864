"""The log of wrong tries at a secret (the passphrase, a link code) a lockout reads
(adapters.storage.attempts.AttemptQueries implements it, one table per kind of entry)."""

from __future__ import annotations

from typing import Protocol


class AttemptLog(Protocol):
    """One kind of entry's wrong tries, per account (core.privacy.lockout.Lockout)."""

    async def failed_since(self, account_id: int, since: float) -> list[float]:
        """The times of the account's wrong tries after `since`, oldest first."""
        ...

    async def record_failed(self, account_id: int, now: float, keep_after: float) -> None:
        """Log a wrong try at `now`; tries at `keep_after` or before are dropped (every account's)."""
        ...

    async def clear_failed(self, account_id: int) -> None:
        """Forget the account's wrong tries (a right one came)."""
        ...
