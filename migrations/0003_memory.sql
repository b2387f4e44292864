-- Memory that serves normal mode (seed 001): daily notes, goals, follow-ups and
-- event watches, tool operations, agent runs and events, and the recall index.
-- Private turns write none of these except tool operations of the live thread,
-- which name their segment and go with it.

-- Daily notes: what the capture job distilled from normal messages, per person and day.
CREATE TABLE notes (
    id         INTEGER PRIMARY KEY,
    person_id  INTEGER NOT NULL REFERENCES people(id) ON DELETE CASCADE,
    day        TEXT NOT NULL,           -- YYYY-MM-DD in the configured timezone
    text       TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE INDEX notes_by_person_day ON notes (person_id, day);

-- Which messages a note was made from; a note made from a message goes with it.
CREATE TABLE note_sources (
    note_id    INTEGER NOT NULL REFERENCES notes(id) ON DELETE CASCADE,
    message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
    PRIMARY KEY (note_id, message_id)
);
CREATE INDEX note_sources_by_message ON note_sources (message_id);

CREATE TABLE goals (
    id              INTEGER PRIMARY KEY,
    person_id       INTEGER NOT NULL REFERENCES people(id) ON DELETE CASCADE,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    title           TEXT NOT NULL,
    status          TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'done', 'dropped')),
    due_at          REAL,
    created_at      REAL NOT NULL,
    updated_at      REAL NOT NULL
);
CREATE INDEX goals_by_person ON goals (person_id, status);

-- Follow-ups: reminders the companion brings up at a time, and event watches
-- (something to ask about when it has happened).
CREATE TABLE followups (
    id              INTEGER PRIMARY KEY,
    person_id       INTEGER NOT NULL REFERENCES people(id) ON DELETE CASCADE,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    kind            TEXT NOT NULL CHECK (kind IN ('reminder', 'watch')),
    text            TEXT NOT NULL,
    due_at          REAL,
    status          TEXT NOT NULL DEFAULT 'scheduled' CHECK (status IN ('scheduled', 'paused', 'done', 'cancelled')),
    created_at      REAL NOT NULL,
    updated_at      REAL NOT NULL
);
CREATE INDEX followups_by_person ON followups (person_id, status, due_at);

-- Tool operations of a conversation: which tool, how it ended, sizes; never the arguments.
-- A private thread's operations name its segment and go with it.
CREATE TABLE tool_operations (
    id              INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    segment_id      INTEGER REFERENCES segments(id) ON DELETE CASCADE,
    tool            TEXT NOT NULL,
    status          TEXT NOT NULL,
    args_bytes      INTEGER NOT NULL,
    result_bytes    INTEGER NOT NULL,
    created_at      REAL NOT NULL
);
CREATE INDEX tool_operations_by_conversation ON tool_operations (conversation_id);
CREATE INDEX tool_operations_by_segment ON tool_operations (segment_id) WHERE segment_id IS NOT NULL;

-- Analytics: one run per normal turn, and its structural events (ids, kinds,
-- timings, sizes; never text). A private turn has no run, so it has no events.
CREATE TABLE agent_runs (
    id              INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    started_at      REAL NOT NULL,
    ended_at        REAL,
    status          TEXT
);
CREATE INDEX agent_runs_by_conversation ON agent_runs (conversation_id);

CREATE TABLE agent_events (
    id          INTEGER PRIMARY KEY,
    run_id      INTEGER NOT NULL REFERENCES agent_runs(id) ON DELETE CASCADE,
    kind        TEXT NOT NULL CHECK (kind IN ('provider_call', 'tool_call', 'error', 'terminal')),
    name        TEXT NOT NULL,
    status      TEXT NOT NULL,
    duration_ms REAL,
    size_in     INTEGER,
    size_out    INTEGER,
    created_at  REAL NOT NULL
);
CREATE INDEX agent_events_by_run ON agent_events (run_id);
CREATE INDEX agent_events_by_kind ON agent_events (kind, name);

-- Recall: one full-text index over normal messages, notes and normal pad entries.
-- rowid = source id * 4 + source code (1 message, 2 note, 3 pad), so a source's
-- entry is removed by rowid. Private messages and private pad entries are never
-- inserted (the WHEN clauses), and every recall query also says so in its SQL.
CREATE VIRTUAL TABLE recall_fts USING fts5 (
    text,
    source UNINDEXED,
    person_id UNINDEXED,
    tokenize = 'unicode61 remove_diacritics 2'
);

CREATE TRIGGER recall_message_insert AFTER INSERT ON messages
WHEN new.mode = 'normal' AND new.segment_id IS NULL AND new.kind = 'chat'
BEGIN
    INSERT INTO recall_fts (rowid, text, source, person_id)
    SELECT new.id * 4 + 1, new.text, 'message', c.person_id
    FROM conversations c WHERE c.id = new.conversation_id AND c.person_id IS NOT NULL;
END;

CREATE TRIGGER recall_message_delete AFTER DELETE ON messages
WHEN old.mode = 'normal'
BEGIN
    DELETE FROM recall_fts WHERE rowid = old.id * 4 + 1;
END;

CREATE TRIGGER recall_note_insert AFTER INSERT ON notes
BEGIN
    INSERT INTO recall_fts (rowid, text, source, person_id) VALUES (new.id * 4 + 2, new.text, 'note', new.person_id);
END;

CREATE TRIGGER recall_note_delete AFTER DELETE ON notes
BEGIN
    DELETE FROM recall_fts WHERE rowid = old.id * 4 + 2;
END;

CREATE TRIGGER recall_pad_insert AFTER INSERT ON pad_entries
WHEN new.mode = 'normal' AND new.segment_id IS NULL
BEGIN
    INSERT INTO recall_fts (rowid, text, source, person_id) VALUES (new.id * 4 + 3, new.text, 'pad', new.person_id);
END;

CREATE TRIGGER recall_pad_delete AFTER DELETE ON pad_entries
WHEN old.mode = 'normal'
BEGIN
    DELETE FROM recall_fts WHERE rowid = old.id * 4 + 3;
END;
