-- F11: a request to cancel a session's current run, from any replica: the
-- fence of the run it targets (a later run of the session has another
-- fence, so an old request never reaches it). NULL: none. The manager
-- running the session polls for rows whose request names their current
-- fence; the partial index keeps that poll cheap.

ALTER TABLE sessions ADD COLUMN cancel_fence INTEGER;
CREATE INDEX sessions_cancel_requested ON sessions (id) WHERE cancel_fence IS NOT NULL;
