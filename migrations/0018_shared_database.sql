-- Several `companion run` processes on one database (issue 33, COMPANION_SHARED_DATABASE; docs/operations.md).
-- Only PostgreSQL serves several processes; SQLite has the tables so that both engines keep one schema (a
-- file moved to PostgreSQL copies neither: they describe processes, not conversations).
--
-- gateway_processes: one row per running process, written at its start, deleted at its clean stop. A process
-- is alive while it holds its session advisory lock (hashtext('companion process'), id) on its own connection
-- AND its heartbeat_at (the server's clock) is fresh (adapters/storage/postgres/processes.py states the times).
--
-- chat_claims: which process answers a conversation now (`holder`, NULL once that process's row is gone), and
-- `fence`, incremented on each take-over: a process writes a conversation's turns only while the row still
-- names it with the fence it took. No text: ids and times only. PostgreSQL's twin also fences the writes in
-- the schema (a trigger); SQLite, never shared, has none.
-- The twin of migrations/postgres/0018_shared_database.sql.

CREATE TABLE gateway_processes (
    id            INTEGER PRIMARY KEY,
    host          TEXT NOT NULL,
    pid           INTEGER NOT NULL,
    started_at    REAL NOT NULL,
    heartbeat_at  REAL NOT NULL
);

CREATE TABLE chat_claims (
    conversation_id  INTEGER PRIMARY KEY REFERENCES conversations(id) ON DELETE CASCADE,
    holder           INTEGER REFERENCES gateway_processes(id) ON DELETE SET NULL,
    fence            INTEGER NOT NULL CHECK (fence > 0),
    claimed_at       REAL NOT NULL
);
CREATE INDEX chat_claims_by_holder ON chat_claims (holder);

-- job_runs: each run of a scheduled job once across the processes (bot/scheduler.py `once_across`): a row per job
-- and slot (its interval's count since the epoch, by the server's clock); the process whose insert wins runs it.
CREATE TABLE job_runs (
    job         TEXT NOT NULL,
    slot        INTEGER NOT NULL,
    process_id  INTEGER NOT NULL,
    ran_at      REAL NOT NULL,
    PRIMARY KEY (job, slot)
);
