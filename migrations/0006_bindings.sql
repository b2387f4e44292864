-- Mirrors (issue 13): bindings of a conversation's normal output to another chat, and the
-- guard that no copy outside the thread is ever written for a private conversation.

-- A binding: copy each normal exchange of `conversation_id` to (platform, chat_id). It holds
-- no message text: the copies are outbox rows, written with the reply they carry. `state`
-- 'disabled' means the target refused a copy for good (`disabled_reason` is that failure's
-- kind, never text); the binding stays listed until /unmirror removes it. A binding is
-- created only by the store's mutator, whose INSERT ... SELECT refuses a conversation with
-- an open segment.
CREATE TABLE bindings (
    id              INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    platform        TEXT NOT NULL,
    chat_id         TEXT NOT NULL,
    state           TEXT NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'disabled')),
    disabled_reason TEXT,
    disabled_at     REAL,
    created_at      REAL NOT NULL,
    UNIQUE (conversation_id, platform, chat_id),
    CHECK ((state = 'disabled') = (disabled_reason IS NOT NULL))
);

-- A mirror row names its binding: /unmirror removes the copies still pending with it.
ALTER TABLE deliveries ADD COLUMN binding_id INTEGER REFERENCES bindings(id) ON DELETE CASCADE;
CREATE INDEX deliveries_by_binding ON deliveries (binding_id) WHERE binding_id IS NOT NULL;

-- The schema's own wall behind the mirror INSERT's predicate: a mirror is a copy outside the
-- thread, so it never carries a segment (the CHECK of 0005), never carries a private message
-- (the trigger of 0005 then demands its segment), names a binding of its own conversation,
-- and is never written while that conversation has an open segment.
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
