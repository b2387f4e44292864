-- Boundary crossings (seed 001). A crossing starts as a pending request that
-- belongs to its private segment (and goes with it); only an explicit
-- confirmation creates an artifact: a new, separately governed, non-private
-- row with its own retention. The segment itself is never relabelled.

CREATE TABLE crossings (
    id           INTEGER PRIMARY KEY,
    segment_id   INTEGER NOT NULL REFERENCES segments(id) ON DELETE CASCADE,
    destination  TEXT NOT NULL,
    requested_at REAL NOT NULL,
    confirm_by   REAL NOT NULL
);
CREATE INDEX crossings_by_segment ON crossings (segment_id);

CREATE TABLE artifacts (
    id              INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    kind            TEXT NOT NULL CHECK (kind IN ('crossing')),
    destination     TEXT NOT NULL,
    filename        TEXT NOT NULL,
    content         TEXT NOT NULL,
    created_at      REAL NOT NULL,
    expires_at      REAL             -- its own retention, independent of any segment
);
CREATE INDEX artifacts_by_expiry ON artifacts (expires_at) WHERE expires_at IS NOT NULL;
