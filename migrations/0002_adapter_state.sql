-- Small durable state of platform adapters, such as the last Telegram update id
-- handled, so a restart neither handles an update twice nor skips one.
-- Holds ids and offsets only, never message content.
CREATE TABLE adapter_state (
    name       TEXT PRIMARY KEY,
    value      TEXT NOT NULL,
    updated_at REAL NOT NULL
);
