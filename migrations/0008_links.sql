-- Linked accounts (issue 16): one person across Telegram, Discord and the terminal.
-- Linking moves an account's person (accounts.person_id) in one transaction; these tables hold
-- only the pending one-time codes (as slow hashes) and the times of wrong ones.

-- A pending `/link` code of one account: never the code itself, only its scrypt hash. Single use
-- (the redeeming transaction deletes the row), valid until expires_at; one pending per account.
CREATE TABLE link_codes (
    id          INTEGER PRIMARY KEY,
    account_id  INTEGER NOT NULL UNIQUE REFERENCES accounts(id) ON DELETE CASCADE,
    code_hash   TEXT NOT NULL,
    created_at  REAL NOT NULL,
    expires_at  REAL NOT NULL
);
CREATE INDEX link_codes_by_expiry ON link_codes (expires_at);

-- Wrong `/link CODE` attempts, per account, for the lockout (kept across restarts, like
-- valve_attempts). Holds no code: only who and when.
CREATE TABLE link_attempts (
    id           INTEGER PRIMARY KEY,
    account_id   INTEGER NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    attempted_at REAL NOT NULL
);
CREATE INDEX link_attempts_by_account ON link_attempts (account_id, attempted_at);
