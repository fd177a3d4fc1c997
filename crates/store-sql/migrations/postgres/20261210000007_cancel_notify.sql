-- F11: a cancel request wakes the replica that runs the session at once.
-- Whenever a cancel request is written (also again: a repeated request is
-- a fresh nudge), PostgreSQL sends NOTIFY korvus_cancel (payload: the
-- session id) when the transaction commits; managers LISTEN and poll their requests at once
-- instead of at their next poll period (which stays as the fallback, e.g.
-- while a listener reconnects). SQLite has no NOTIFY: it keeps polling.

CREATE FUNCTION korvus_notify_cancel() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('korvus_cancel', NEW.id::text);
    RETURN NEW;
END;
$$;

CREATE TRIGGER sessions_cancel_notify
    AFTER UPDATE OF cancel_fence ON sessions
    FOR EACH ROW
    WHEN (NEW.cancel_fence IS NOT NULL)
    EXECUTE FUNCTION korvus_notify_cancel();
