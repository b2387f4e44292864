-- The wall at the edges (issue 22): everything written while a conversation is private belongs to
-- its interval.

-- A delivery of a conversation with an open interval names that interval, whatever wrote it: a
-- reply, a command's answer, a refusal, an apology, an unknown command's answer, a button's
-- prompt. It then goes with the interval (/forget private, expiry, the backup's filter), and by the
-- CHECK of 0005 it can only be a reply into the private thread itself: no mirror, reminder or
-- nudge is written while an interval is open. A writer that forgets to name it is refused here.
CREATE TRIGGER deliveries_belong_to_the_open_interval BEFORE INSERT ON deliveries
WHEN EXISTS (
    SELECT 1 FROM segments s
    WHERE s.conversation_id = new.conversation_id AND s.ended_at IS NULL AND s.id IS NOT new.segment_id
)
BEGIN
    SELECT RAISE(ABORT, 'a delivery written while an interval is open must name that interval');
END;

-- What a mirror copies of a user's message: the words the person typed (in a group, headed with
-- who spoke), never the lines the companion put before them (what it replies to, where it was
-- forwarded from), since those may stand for a private interval (its placeholder). NULL: the
-- stored text is those words already. The mirror INSERT reads this column, never `text`.
ALTER TABLE messages ADD COLUMN said TEXT;
