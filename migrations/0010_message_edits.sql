-- Edits (issue 15): an edited message's text is replaced in place, in its own mode and segment.
-- The recall index follows the text, for normal rows only (the same WHEN as recall_message_insert):
-- a private row's edit never enters the index.
CREATE TRIGGER recall_message_update AFTER UPDATE OF text ON messages
WHEN new.mode = 'normal' AND new.segment_id IS NULL AND new.kind = 'chat'
BEGIN
    DELETE FROM recall_fts WHERE rowid = old.id * 4 + 1;
    INSERT INTO recall_fts (rowid, text, source, person_id)
    SELECT new.id * 4 + 1, new.text, 'message', c.person_id
    FROM conversations c WHERE c.id = new.conversation_id AND c.person_id IS NOT NULL;
END;
