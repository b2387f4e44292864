-- Interval keys (issue 31): the key a private interval's words are sealed under, and the schema refusing
-- a private word in plain text.
--
-- `key_id` names a file of the key folder (COMPANION_KEY_DIR, adapters/storage/keys.py), never a key: no
-- key ever reaches PostgreSQL. The twin of migrations/0015_interval_keys.sql (the same column on SQLite).
--
-- Every column of a private row that can hold words holds them sealed (adapters/storage/sealing.py
-- SEALED_PATTERN: "s1." and base64url of nonce || ciphertext || tag), so its WAL, data files, dead tuples,
-- replicas, base backups, dumps and statement logs hold no private word. The CHECKs prove the shape, not
-- the sealing: the query classes seal every private value whatever they say; they are the last wall
-- against a write that forgot to. `said` (the words a mirror copies) is never kept in a private row.

ALTER TABLE segments ADD COLUMN key_id text CHECK (key_id ~ '^[0-9a-f]{32}$');
CREATE UNIQUE INDEX segments_by_key ON segments (key_id) WHERE key_id IS NOT NULL;

ALTER TABLE messages ADD CONSTRAINT messages_private_text_sealed
    CHECK (segment_id IS NULL OR text ~ '^s1\.[A-Za-z0-9_-]{38,}$');
ALTER TABLE messages ADD CONSTRAINT messages_private_said_kept_nowhere
    CHECK (segment_id IS NULL OR said IS NULL);
ALTER TABLE summaries ADD CONSTRAINT summaries_private_text_sealed
    CHECK (segment_id IS NULL OR text ~ '^s1\.[A-Za-z0-9_-]{38,}$');
ALTER TABLE pad_entries ADD CONSTRAINT pad_entries_private_text_sealed
    CHECK (segment_id IS NULL OR text ~ '^s1\.[A-Za-z0-9_-]{38,}$');
ALTER TABLE deliveries ADD CONSTRAINT deliveries_private_text_sealed
    CHECK (segment_id IS NULL OR text IS NULL OR text ~ '^s1\.[A-Za-z0-9_-]{38,}$');
ALTER TABLE crossings ADD CONSTRAINT crossings_destination_sealed
    CHECK (destination ~ '^s1\.[A-Za-z0-9_-]{38,}$');
