-- Streamed replies (issue 24): a reply shown while the model writes it is still one delivery row.
--
-- The row is written when the reply's first useful text exists, as status 'streaming': it holds
-- no text (a partial answer is never stored anywhere) and is never picked to be sent. When the
-- first message of the stream went out, `streamed_ids` records its platform id (and the id of
-- each further message a long reply continued into), so that the final send edits those
-- messages, also after a crash. The reply's transaction (record_reply) then gives the row its
-- text and makes it 'pending', like any other reply; a row a crash left 'streaming' is taken
-- over by the answer of its cut-off turn, or made a constant "cut off" line for its messages.
--
-- SQLite cannot change a CHECK in place: the table is rebuilt with the new state and column,
-- and its indexes and triggers (0005, 0006, 0011) are created again as they were. No table
-- refers to deliveries, so dropping the old one moves nothing else.

CREATE TABLE deliveries_streamed (
    id              INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    message_id      INTEGER REFERENCES messages(id) ON DELETE CASCADE,
    segment_id      INTEGER REFERENCES segments(id) ON DELETE CASCADE,
    kind            TEXT NOT NULL CHECK (kind IN ('reply', 'mirror', 'reminder', 'nudge')),
    platform        TEXT NOT NULL,
    chat_id         TEXT NOT NULL,
    reply_to        TEXT,
    thread_id       TEXT,
    nonce           TEXT NOT NULL,
    text            TEXT,
    parts_sent      INTEGER NOT NULL DEFAULT 0,
    status          TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('streaming', 'pending', 'sent', 'failed')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at REAL NOT NULL,
    error           TEXT,
    created_at      REAL NOT NULL,
    settled_at      REAL,
    binding_id      INTEGER REFERENCES bindings(id) ON DELETE CASCADE,
    -- The platform ids of the messages the reply streamed into, in order, space-separated.
    streamed_ids    TEXT,
    CHECK (kind = 'reply' OR segment_id IS NULL),
    CHECK (status = 'pending' OR text IS NULL),
    -- Only a reply streams; while it streams it carries no stored message yet.
    CHECK (streamed_ids IS NULL OR kind = 'reply'),
    CHECK (status <> 'streaming' OR (kind = 'reply' AND message_id IS NULL))
);

INSERT INTO deliveries_streamed (
    id, conversation_id, message_id, segment_id, kind, platform, chat_id, reply_to, thread_id, nonce, text,
    parts_sent, status, attempts, next_attempt_at, error, created_at, settled_at, binding_id
)
SELECT
    id, conversation_id, message_id, segment_id, kind, platform, chat_id, reply_to, thread_id, nonce, text,
    parts_sent, status, attempts, next_attempt_at, error, created_at, settled_at, binding_id
FROM deliveries;

DROP TABLE deliveries;
ALTER TABLE deliveries_streamed RENAME TO deliveries;

CREATE INDEX deliveries_due ON deliveries (status, next_attempt_at) WHERE status = 'pending';
CREATE INDEX deliveries_by_conversation ON deliveries (conversation_id, status, id);
CREATE INDEX deliveries_by_segment ON deliveries (segment_id) WHERE segment_id IS NOT NULL;
CREATE INDEX deliveries_by_message ON deliveries (message_id) WHERE message_id IS NOT NULL;
CREATE INDEX deliveries_by_binding ON deliveries (binding_id) WHERE binding_id IS NOT NULL;
CREATE INDEX deliveries_streaming ON deliveries (conversation_id) WHERE status = 'streaming';

-- 0005, as it was.
CREATE TRIGGER deliveries_follow_their_message BEFORE INSERT ON deliveries
WHEN new.message_id IS NOT NULL
    AND (SELECT segment_id FROM messages WHERE id = new.message_id) IS NOT new.segment_id
BEGIN
    SELECT RAISE(ABORT, 'a delivery must name the segment of the message it carries');
END;

-- The same rule when a streamed reply's row is given the message it carries (record_reply).
CREATE TRIGGER deliveries_follow_their_message_when_written BEFORE UPDATE OF message_id, segment_id ON deliveries
WHEN new.message_id IS NOT NULL
    AND (SELECT segment_id FROM messages WHERE id = new.message_id) IS NOT new.segment_id
BEGIN
    SELECT RAISE(ABORT, 'a delivery must name the segment of the message it carries');
END;

-- 0006, as it was.
CREATE TRIGGER mirrors_never_leave_a_private_conversation BEFORE INSERT ON deliveries
WHEN new.kind = 'mirror' AND (
    new.segment_id IS NOT NULL
    OR EXISTS (SELECT 1 FROM segments WHERE conversation_id = new.conversation_id AND ended_at IS NULL)
    OR (new.message_id IS NOT NULL AND (SELECT segment_id FROM messages WHERE id = new.message_id) IS NOT NULL)
    OR new.binding_id IS NULL
    OR (SELECT conversation_id FROM bindings WHERE id = new.binding_id) IS NOT new.conversation_id
)
BEGIN
    SELECT RAISE(ABORT, 'a mirror is never written for a private conversation or message');
END;

-- 0011, as it was: a streamed reply's row of a conversation with an open interval names it
-- when it is written, at the first useful text, before anything of it is shown.
CREATE TRIGGER deliveries_belong_to_the_open_interval BEFORE INSERT ON deliveries
WHEN EXISTS (
    SELECT 1 FROM segments s
    WHERE s.conversation_id = new.conversation_id AND s.ended_at IS NULL AND s.id IS NOT new.segment_id
)
BEGIN
    SELECT RAISE(ABORT, 'a delivery written while an interval is open must name that interval');
END;
