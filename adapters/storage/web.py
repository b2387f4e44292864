"""SQL of the HTTP service: one-time sign-in codes and sessions (hashes only), and the readiness probe."""

from __future__ import annotations

from dataclasses import dataclass

from adapters.storage.database import Database, inserted_id


@dataclass(frozen=True, slots=True)
class StoredSession:
    id: int
    expires_at: float


class WebQueries:
    """Implements adapters.web.auth.SessionStore and the database half of readiness."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def save_login_code(self, code_hash: str, now: float, expires_at: float) -> None:
        """Keep a new code's hash (and drop every expired code and session)."""
        async with self._db.tx() as db:
            await db.execute("DELETE FROM web_login_codes WHERE expires_at <= ?", (now,))
            await db.execute("DELETE FROM web_sessions WHERE expires_at <= ?", (now,))
            await db.execute(
                "INSERT INTO web_login_codes (code_hash, created_at, expires_at) VALUES (?, ?, ?)",
                (code_hash, now, expires_at),
            )

    async def exchange_login_code(
        self, code_hash: str, token_hash: str, now: float, expires_at: float
    ) -> StoredSession | None:
        """One transaction: use up the code (unexpired) and open a session with `token_hash`.
        None: no such code, or it expired or was used; nothing changed."""
        async with self._db.tx() as db:
            async with db.execute(
                "DELETE FROM web_login_codes WHERE code_hash = ? AND expires_at > ? RETURNING id", (code_hash, now)
            ) as cur:
                if await cur.fetchone() is None:
                    return None
            cur = await db.execute(
                "INSERT INTO web_sessions (token_hash, created_at, expires_at) VALUES (?, ?, ?)",
                (token_hash, now, expires_at),
            )
            return StoredSession(inserted_id(cur), expires_at)

    async def session(self, token_hash: str, now: float) -> StoredSession | None:
        """The unexpired session with this cookie's hash."""
        row = await self._db.read_one(
            "SELECT id, expires_at FROM web_sessions WHERE token_hash = ? AND expires_at > ?", (token_hash, now)
        )
        return StoredSession(row["id"], row["expires_at"]) if row is not None else None

    async def end_session(self, session_id: int) -> None:
        async with self._db.tx() as db:
            await db.execute("DELETE FROM web_sessions WHERE id = ?", (session_id,))

    async def probe_write(self, now: float) -> None:
        """Write the probe's row: raises when the database takes no writes. Not fsynced: a probe
        every few seconds would otherwise cost an fsync each."""
        async with self._db.tx(durable=False) as db:
            await db.execute(
                "INSERT INTO health_probe (id, probed_at) VALUES (1, ?)"
                " ON CONFLICT (id) DO UPDATE SET probed_at = excluded.probed_at",
                (now,),
            )
