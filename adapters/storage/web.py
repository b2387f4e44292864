"""SQL of the HTTP service: one-time sign-in codes and sessions (hashes only), and the readiness probe."""

from __future__ import annotations

from dataclasses import dataclass

from adapters.storage.engine import Database as Engine
from adapters.storage.engine import Fetch, Statement


@dataclass(frozen=True, slots=True)
class StoredSession:
    id: int
    expires_at: float


class WebQueries:
    """Implements adapters.web.auth.SessionStore and the database half of readiness, over the engine
    interface (adapters/storage/engine.py)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    async def save_login_code(self, code_hash: str, now: float, expires_at: float) -> None:
        """Keep a new code's hash (and drop every expired code and session)."""
        await self._engine.write(
            Statement("DELETE FROM web_login_codes WHERE expires_at <= :now", {"now": now}),
            Statement("DELETE FROM web_sessions WHERE expires_at <= :now", {"now": now}),
            Statement(
                "INSERT INTO web_login_codes (code_hash, created_at, expires_at) VALUES (:code, :now, :expires)",
                {"code": code_hash, "now": now, "expires": expires_at},
            ),
        )

    async def exchange_login_code(
        self, code_hash: str, token_hash: str, now: float, expires_at: float
    ) -> StoredSession | None:
        """One transaction: use up the code (unexpired) and open a session with `token_hash`.
        None: no such code, or it expired or was used; nothing changed."""
        # Two trips: the session is written only once this transaction deleted the code (of two exchanges
        # of one code at once, PostgreSQL's second DELETE waits for the first and finds nothing).
        async with self._engine.tx() as tx:
            (used,) = await tx.run(
                Statement(
                    "DELETE FROM web_login_codes WHERE code_hash = :code AND expires_at > :now RETURNING id",
                    {"code": code_hash, "now": now},
                    Fetch.ONE,
                )
            )
            if used.one is None:
                return None
            (made,) = await tx.run(
                Statement(
                    "INSERT INTO web_sessions (token_hash, created_at, expires_at) VALUES (:token, :now, :expires)"
                    " RETURNING id",
                    {"token": token_hash, "now": now, "expires": expires_at},
                    Fetch.ONE,
                )
            )
            return StoredSession(int(made.scalar), expires_at)

    async def session(self, token_hash: str, now: float) -> StoredSession | None:
        """The unexpired session with this cookie's hash."""
        (found,) = await self._engine.read(
            Statement(
                "SELECT id, expires_at FROM web_sessions WHERE token_hash = :token AND expires_at > :now",
                {"token": token_hash, "now": now},
                Fetch.ONE,
            )
        )
        row = found.one
        return StoredSession(row["id"], row["expires_at"]) if row is not None else None

    async def end_session(self, session_id: int) -> None:
        await self._engine.write(Statement("DELETE FROM web_sessions WHERE id = :id", {"id": session_id}))

    async def delete_every_sign_in(self) -> int:
        """Delete every session and sign-in code (a restored database must sign nobody in again); how many."""
        results = await self._engine.write(
            Statement("DELETE FROM web_sessions", {}, Fetch.ROWCOUNT),
            Statement("DELETE FROM web_login_codes", {}, Fetch.ROWCOUNT),
        )
        return sum(result.rowcount for result in results)

    async def probe_write(self, now: float) -> None:
        """Write the probe's row: raises when the database takes no writes. Not fsynced: a probe
        every few seconds would otherwise cost an fsync each."""
        await self._engine.write(
            Statement(
                "INSERT INTO health_probe (id, probed_at) VALUES (1, :now)"
                " ON CONFLICT (id) DO UPDATE SET probed_at = excluded.probed_at",
                {"now": now},
            ),
            durable=False,
        )
