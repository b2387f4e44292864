-- The webhook inbox (issue 33): each Telegram update a webhook delivered, written durably before the 200
-- is answered; once the core's outcome for it is in, its body is deleted (set NULL) and the row stays a
-- day (`handled_at`) as the tombstone that makes a late redelivery of the same update a no-op, as is one
-- of an update still waiting (the primary key; adapters/storage/inbox.py). At start, the rows a crash left
-- are handled; the messages table's inbox key makes a message handled twice a no-op.
--
-- `body` is the update's JSON as Telegram sent it: it may hold a private message's words for the moment
-- the row lives. On SQLite it is kept in plain text (as private rows are here until expiry) and deleted
-- with secure_delete on; `key_id` is always NULL here. The twin of migrations/postgres/0017_webhook_inbox.sql,
-- where the body is sealed under a transit key of the key folder.

CREATE TABLE webhook_inbox (
    platform TEXT NOT NULL,
    update_id INTEGER NOT NULL,
    chat_id TEXT,  -- the update's chat, read when it is stored (the twin's comment)
    body TEXT,
    key_id TEXT,
    received_at REAL NOT NULL,
    handled_at REAL CHECK ((handled_at IS NULL) = (body IS NOT NULL)),
    PRIMARY KEY (platform, update_id)
);
