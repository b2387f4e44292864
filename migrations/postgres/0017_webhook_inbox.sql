-- The webhook inbox (issue 33): each Telegram update a webhook delivered, written durably before the 200
-- is answered; once the core's outcome for it is in, its body is deleted (set NULL) and the row stays a
-- day (`handled_at`) as the tombstone that makes a late redelivery of the same update a no-op, as is one
-- of an update still waiting (the primary key; adapters/storage/inbox.py).
--
-- `body` may hold a private message's words, so it is never stored readable: it is sealed (AES-256-GCM,
-- the format of adapters/storage/sealing.py) under the transit key `key_id`, a file of the key folder's
-- `transit/` folder (COMPANION_KEY_DIR), never the database. A transit key expires by its name within
-- the hour and is shredded once no row needs it, so the WAL, backups and dead tuples of this table hold
-- nothing readable past that. The CHECKs prove the shape of a sealed body, not the sealing.
--
-- `chat_id` is the update's chat (its message's, edit's or pressed button's), read from the update when it
-- is stored: on a shared database a process takes only the rows of chats no other live process holds
-- (adapters/storage/inbox.py), without opening a body. NULL: an update of no chat.
-- The twin of migrations/0017_webhook_inbox.sql.

CREATE TABLE webhook_inbox (
    platform text NOT NULL,
    update_id bigint NOT NULL,
    chat_id text,
    body text CHECK (body ~ '^s1\.[A-Za-z0-9_-]{38,}$'),
    key_id text CHECK (key_id ~ '^[0-9a-f]{32}$'),
    received_at double precision NOT NULL,
    handled_at double precision,
    CHECK ((handled_at IS NULL) = (body IS NOT NULL) AND (body IS NULL) = (key_id IS NULL)),
    PRIMARY KEY (platform, update_id)
);

CREATE INDEX webhook_inbox_waiting ON webhook_inbox (platform, chat_id, update_id) WHERE body IS NOT NULL;
