-- The end of an interval ends what it shows (issue 29).
--
-- A private answer whose messages were shown (streamed_ids) but whose final text was not sent when
-- its interval ended (expiry, /normal, /forget private, the idle timeout, a restart) is not sent any
-- more: in the transaction that ends the interval its row leaves the interval as a retraction, a
-- pending row whose only text is a constant line (core/values/copy.py INTERVAL_ENDED_SHOWN) and
-- whose send edits the messages shown into it, once. It names no interval and no stored message
-- (so the interval's deletion does not take it before it is sent, and it carries none of the
-- interval's words), and it is deleted once settled rather than kept for the week of settled rows.
ALTER TABLE deliveries ADD COLUMN retracts INTEGER NOT NULL DEFAULT 0 CHECK (
    retracts IN (0, 1)
    AND (retracts = 0 OR (kind = 'reply' AND segment_id IS NULL AND message_id IS NULL AND streamed_ids IS NOT NULL))
);
