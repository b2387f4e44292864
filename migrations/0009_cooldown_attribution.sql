-- Nudge cooldown per person (issue 14) and where a memory came from (issue 16).

-- `/cooldown`: the least gap between two nudges to this person, in seconds. NULL: the default
-- (COMPANION_NUDGE_COOLDOWN_MINUTES); 0: `/cooldown off`. Holds no text.
ALTER TABLE proactive_people ADD COLUMN cooldown REAL CHECK (cooldown IS NULL OR cooldown BETWEEN 0 AND 604800);

-- The conversation a normal pad entry was said in (`/remember`, the remember tool, capture), so
-- `/memory` of a person with linked accounts can say which account said it. Attribution only:
-- SET NULL when the conversation goes, like messages.account_id; private pad entries leave it NULL
-- (they belong to their segment and go with it).
ALTER TABLE pad_entries ADD COLUMN conversation_id INTEGER REFERENCES conversations(id) ON DELETE SET NULL;
