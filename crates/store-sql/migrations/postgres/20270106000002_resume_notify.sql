-- F26: a run sent back to its pool to be resumed (a takeover's release, a
-- hand-off, a resume given back while stopping) wakes the managers of its
-- pool at once, as a queued row does (NOTIFY korvus_queue, payload: the
-- pool), instead of at their next poll. A release writes `resume_pending`
-- and the reserved owner's claim expiring in 9999 together; a claim clears
-- the flag, so only the release fires. SQLite has no NOTIFY: it polls.

CREATE TRIGGER sessions_resume_notify
    AFTER UPDATE OF resume_pending ON sessions
    FOR EACH ROW
    WHEN (NEW.resume_pending AND NEW.lease_expires_ms = 253402300799999
          AND NEW.status = 'running')
    EXECUTE FUNCTION korvus_notify_queue();
