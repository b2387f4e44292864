-- Messages over time (issue 10): the inbox key of inbound messages, the turn state of
-- user messages, the moment a restart closed a segment, and the outbox.

-- Inbox: the platform's id of an inbound message. One conversation is one (platform, chat),
-- so (conversation, platform message id) names a platform message; a redelivery is a no-op.
ALTER TABLE messages ADD COLUMN platform_message_id TEXT;
CREATE UNIQUE INDEX messages_inbox_key ON messages (conversation_id, platform_message_id)
    WHERE platform_message_id IS NOT NULL;

-- A user chat message is an open turn until its reply (or the apology) is written, in the
-- reply's transaction. A process that dies mid-turn leaves it open; start-up answers it.
-- NULL: not a turn (assistant lines, commands, every message from before this migration).
ALTER TABLE messages ADD COLUMN turn TEXT CHECK (turn IN ('open', 'done'));
CREATE INDEX messages_open_turns ON messages (conversation_id) WHERE turn = 'open';

-- The wall-clock moment a restart closed a segment (its ended_at is the end of its stored
-- record). A message sent before this moment that arrives later belongs to the segment.
ALTER TABLE segments ADD COLUMN restart_at REAL;

-- The outbox: every outbound message is a delivery row before it is a send, written in the
-- transaction that stores what it carries. Adapters only send and mark.
-- A reply inside a private thread names its segment and goes with it; every other kind
-- (copies outside the thread) can never name one (CHECK). `text` is what to send and is
-- cleared once it was sent; `parts_sent` lets a long message resume where it stopped.
CREATE TABLE deliveries (
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
    status          TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sent', 'failed')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at REAL NOT NULL,
    error           TEXT,
    created_at      REAL NOT NULL,
    settled_at      REAL,
    CHECK (kind = 'reply' OR segment_id IS NULL),
    CHECK (status = 'pending' OR text IS NULL)
);
CREATE INDEX deliveries_due ON deliveries (status, next_attempt_at) WHERE status = 'pending';
CREATE INDEX deliveries_by_conversation ON deliveries (conversation_id, status, id);
CREATE INDEX deliveries_by_segment ON deliveries (segment_id) WHERE segment_id IS NOT NULL;
CREATE INDEX deliveries_by_message ON deliveries (message_id) WHERE message_id IS NOT NULL;

-- A delivery of a stored message names exactly that message's segment: a private message's
-- delivery goes with its segment, and (by the CHECK above) can only be the reply in its thread.
CREATE TRIGGER deliveries_follow_their_message BEFORE INSERT ON deliveries
WHEN new.message_id IS NOT NULL
    AND (SELECT segment_id FROM messages WHERE id = new.message_id) IS NOT new.segment_id
BEGIN
    SELECT RAISE(ABORT, 'a delivery must name the segment of the message it carries');
END;
