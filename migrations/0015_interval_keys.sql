-- Interval keys (issue 31): the key a private interval's words are sealed under, by its id.
--
-- `key_id` names a file of the key folder (COMPANION_KEY_DIR, adapters/storage/keys.py), never a key:
-- the key itself never reaches the database. It is NULL here on SQLite, which keeps private text in
-- plain text until expiry (secure_delete and the owed checkpoint, PRIVACY.md), and set on PostgreSQL,
-- where every private word is sealed (migrations/postgres/0015_interval_keys.sql). The twin of that file:
-- both engines have the same columns, so a database moves from one to the other row for row.

ALTER TABLE segments ADD COLUMN key_id TEXT;
CREATE UNIQUE INDEX segments_by_key ON segments (key_id) WHERE key_id IS NOT NULL;
