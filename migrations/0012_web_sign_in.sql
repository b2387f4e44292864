-- The HTTP service (issue 23): one-time sign-in codes, sessions, and the readiness probe's row.
-- Secrets are kept only as SHA-256 hashes: each is 256 random bits, so a fast hash is as hard
-- to reverse as a slow one, and a hash can be looked up by its index (a /link code is 8 digits
-- and needs scrypt instead). None of these rows holds text or anything a conversation said.

-- A code `companion web-login` printed: valid until expires_at (10 minutes), used up by the
-- transaction that opens a session with it.
CREATE TABLE web_login_codes (
    id          INTEGER PRIMARY KEY,
    code_hash   TEXT NOT NULL UNIQUE,
    created_at  REAL NOT NULL,
    expires_at  REAL NOT NULL
);
CREATE INDEX web_login_codes_by_expiry ON web_login_codes (expires_at);

-- A signed-in browser: its cookie's hash, and until when it is valid. The CSRF token is derived
-- from the cookie (adapters/web/auth.py), so nothing else is stored.
CREATE TABLE web_sessions (
    id          INTEGER PRIMARY KEY,
    token_hash  TEXT NOT NULL UNIQUE,
    created_at  REAL NOT NULL,
    expires_at  REAL NOT NULL
);
CREATE INDEX web_sessions_by_expiry ON web_sessions (expires_at);

-- /readyz writes this one row to show that the database takes writes.
CREATE TABLE health_probe (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    probed_at  REAL NOT NULL
);
