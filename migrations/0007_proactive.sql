-- Proactive messages (issue 14): reminders sent at their time, budgeted nudges, and the record
-- of every decision (without any message text).

-- How a follow-up ended: 'sent' (its message and delivery were written in the transaction that
-- claimed it) or 'missed' (more than 12 hours late; listed in /followups). status is 'done' then.
ALTER TABLE followups ADD COLUMN outcome TEXT CHECK (outcome IN ('sent', 'missed'));
-- The candidate scan of due follow-ups reads only what is due (an index range, flat in the rest).
CREATE INDEX followups_due ON followups (kind, due_at) WHERE status = 'scheduled' AND due_at IS NOT NULL;

-- When the companion last checked in on a goal (NULL: never; its created_at counts then).
ALTER TABLE goals ADD COLUMN checked_in_at REAL;
CREATE INDEX goals_checkin_due ON goals (coalesce(checked_in_at, created_at)) WHERE status = 'active';

-- One row per person: where proactive messages go and the manners they keep. Holds no text.
-- conversation_id: the direct conversation the person last wrote in, in normal mode (kept by
-- the trigger below from normal messages only: a private message never moves or touches it).
-- pinned_conversation_id: `/nudges here`. budget NULL: the default; 0: `/nudges off`.
-- quiet NULL: the default; 'off' or 'HH:MM-HH:MM'. timezone NULL: the default.
-- unanswered: nudges sent since the person last wrote (back-off after two).
-- checkin_open: 1 while an open check-in after a long silence may still be sent.
CREATE TABLE proactive_people (
    person_id              INTEGER PRIMARY KEY REFERENCES people(id) ON DELETE CASCADE,
    conversation_id        INTEGER REFERENCES conversations(id) ON DELETE SET NULL,
    pinned_conversation_id INTEGER REFERENCES conversations(id) ON DELETE SET NULL,
    last_wrote_at          REAL,
    budget                 INTEGER CHECK (budget IS NULL OR budget BETWEEN 0 AND 24),
    quiet                  TEXT,
    timezone               TEXT,
    last_nudge_at          REAL,
    unanswered             INTEGER NOT NULL DEFAULT 0,
    checkin_open           INTEGER NOT NULL DEFAULT 0 CHECK (checkin_open IN (0, 1))
);
CREATE INDEX proactive_people_checkin ON proactive_people (last_wrote_at) WHERE checkin_open = 1;

-- A normal user message in a direct conversation: that is where the person is, they are not
-- silent, and every unanswered nudge is answered. Private messages (segment_id set) never match.
CREATE TRIGGER proactive_person_wrote AFTER INSERT ON messages
WHEN new.role = 'user' AND new.mode = 'normal' AND new.segment_id IS NULL
BEGIN
    INSERT INTO proactive_people (person_id, conversation_id, last_wrote_at, unanswered, checkin_open)
    SELECT c.person_id, c.id, new.created_at, 0, 1 FROM conversations c
    WHERE c.id = new.conversation_id AND c.kind = 'direct' AND c.person_id IS NOT NULL
    ON CONFLICT (person_id) DO UPDATE SET conversation_id = excluded.conversation_id,
        last_wrote_at = excluded.last_wrote_at, unanswered = 0, checkin_open = 1;
END;

-- Every proactive decision: what (kind, subject), the outcome and its reason, the person's
-- local day; never any text. A decision to wait because the conversation is in private mode
-- names that segment and goes with it (cascade): not even the time of private mode outlives it.
CREATE TABLE proactive_decisions (
    id          INTEGER PRIMARY KEY,
    person_id   INTEGER NOT NULL REFERENCES people(id) ON DELETE CASCADE,
    segment_id  INTEGER REFERENCES segments(id) ON DELETE CASCADE,
    kind        TEXT NOT NULL CHECK (kind IN ('reminder', 'watch', 'goal', 'checkin')),
    subject     TEXT NOT NULL,           -- 'followup:12', 'goal:3', 'checkin:7': ids only
    outcome     TEXT NOT NULL CHECK (outcome IN ('sent', 'silent', 'skipped', 'missed')),
    reason      TEXT NOT NULL CHECK (reason IN ('due', 'late', 'model', 'budget', 'quiet', 'cooldown',
                    'active', 'backoff', 'private', 'disabled', 'missed', 'restart')),
    local_day   TEXT NOT NULL,
    decided_at  REAL NOT NULL,
    CHECK ((reason = 'private') = (segment_id IS NOT NULL))
);
CREATE INDEX proactive_decisions_by_day ON proactive_decisions (person_id, local_day, outcome);
CREATE INDEX proactive_decisions_by_subject ON proactive_decisions (subject, id);
CREATE INDEX proactive_decisions_by_segment ON proactive_decisions (segment_id) WHERE segment_id IS NOT NULL;
