-- The ground: people, their platform accounts, conversations, the timeline,
-- private segments, rolling summaries and memory pads, and the valve's attempt log.
-- Every child row names its owner with ON DELETE CASCADE: deleting a private
-- segment removes everything derived from it, with no handwritten deletion list.
-- Times are seconds since the epoch (REAL).

CREATE TABLE people (
    id          INTEGER PRIMARY KEY,
    display_name TEXT,
    created_at  REAL NOT NULL
);

CREATE TABLE accounts (
    id               INTEGER PRIMARY KEY,
    person_id        INTEGER NOT NULL REFERENCES people(id) ON DELETE CASCADE,
    platform         TEXT NOT NULL,
    platform_user_id TEXT NOT NULL,
    created_at       REAL NOT NULL,
    UNIQUE (platform, platform_user_id)
);

-- kind: 'direct' (one-to-one with the bot) or 'group' (a group, guild channel).
-- Private mode is possible only in direct conversations; person_id is the
-- person a direct conversation belongs to (NULL for groups).
CREATE TABLE conversations (
    id         INTEGER PRIMARY KEY,
    platform   TEXT NOT NULL,
    chat_id    TEXT NOT NULL,
    kind       TEXT NOT NULL CHECK (kind IN ('direct', 'group')),
    person_id  INTEGER REFERENCES people(id) ON DELETE CASCADE,
    created_at REAL NOT NULL,
    UNIQUE (platform, chat_id)
);

-- A private segment: one interval of private mode in one conversation.
-- ended_at NULL means open (the mode state); start-up closes every open one.
-- anchor_message_id: the newest message id when it opened (0 if none), which
-- is where its single placeholder stands in the masked view.
-- expires_at NULL means 'never'.
CREATE TABLE segments (
    id                INTEGER PRIMARY KEY,
    conversation_id   INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    anchor_message_id INTEGER NOT NULL,
    started_at        REAL NOT NULL,
    last_activity_at  REAL NOT NULL,
    ended_at          REAL,
    end_reason        TEXT,
    expires_at        REAL
);
CREATE INDEX segments_by_conversation ON segments (conversation_id, anchor_message_id);
CREATE INDEX segments_open ON segments (ended_at) WHERE ended_at IS NULL;
CREATE INDEX segments_by_expiry ON segments (expires_at) WHERE expires_at IS NOT NULL;

-- The timeline. mode and segment_id agree (CHECK): a private message always
-- belongs to its segment, so it goes when the segment goes.
-- kind: 'chat' enters the model context; 'command' is stored (redacted where it
-- carried a secret) but never enters it.
-- capture: normal messages start 'pending'; private ones can only be 'skipped'.
CREATE TABLE messages (
    id              INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    segment_id      INTEGER REFERENCES segments(id) ON DELETE CASCADE,
    account_id      INTEGER REFERENCES accounts(id) ON DELETE SET NULL,
    mode            TEXT NOT NULL CHECK (mode IN ('normal', 'private')),
    role            TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
    kind            TEXT NOT NULL DEFAULT 'chat' CHECK (kind IN ('chat', 'command')),
    text            TEXT NOT NULL,
    capture         TEXT NOT NULL CHECK (capture IN ('pending', 'skipped', 'done')),
    created_at      REAL NOT NULL,
    CHECK ((mode = 'private') = (segment_id IS NOT NULL)),
    CHECK (mode = 'normal' OR capture = 'skipped')
);
CREATE INDEX messages_timeline ON messages (conversation_id, segment_id, kind, id);
CREATE INDEX messages_by_segment ON messages (segment_id) WHERE segment_id IS NOT NULL;

-- Rolling summaries: one normal summary per conversation (segment_id NULL), and
-- one private summary per private segment. Each has its own watermark: the id
-- of the newest message it covers. The normal one folds only the masked view.
CREATE TABLE summaries (
    id              INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    segment_id      INTEGER REFERENCES segments(id) ON DELETE CASCADE,
    mode            TEXT NOT NULL CHECK (mode IN ('normal', 'private')),
    text            TEXT NOT NULL,
    watermark       INTEGER NOT NULL,
    updated_at      REAL NOT NULL,
    CHECK ((mode = 'private') = (segment_id IS NOT NULL))
);
CREATE UNIQUE INDEX summaries_normal_key ON summaries (conversation_id) WHERE segment_id IS NULL;
CREATE UNIQUE INDEX summaries_private_key ON summaries (segment_id) WHERE segment_id IS NOT NULL;

-- Long-term memory pads, one per person and mode. A private pad entry names
-- the segment whose consolidation produced it and goes with it.
CREATE TABLE pad_entries (
    id         INTEGER PRIMARY KEY,
    person_id  INTEGER NOT NULL REFERENCES people(id) ON DELETE CASCADE,
    segment_id INTEGER REFERENCES segments(id) ON DELETE CASCADE,
    mode       TEXT NOT NULL CHECK (mode IN ('normal', 'private')),
    text       TEXT NOT NULL,
    created_at REAL NOT NULL,
    CHECK ((mode = 'private') = (segment_id IS NOT NULL))
);
CREATE INDEX pad_by_person ON pad_entries (person_id, mode);

-- Failed private-mode entries, per account, for the lockout (kept across restarts).
-- Holds no secret: only who and when.
CREATE TABLE valve_attempts (
    id           INTEGER PRIMARY KEY,
    account_id   INTEGER NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    attempted_at REAL NOT NULL
);
CREATE INDEX valve_attempts_by_account ON valve_attempts (account_id, attempted_at);
