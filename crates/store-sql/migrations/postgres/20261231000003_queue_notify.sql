-- F19: work for the queue wakes the managers of a pool at once. PostgreSQL
-- sends NOTIFY korvus_queue (payload: the pool) when a row becomes queued
-- (created without an owner, or given back), and when a run ends or goes
-- idle (waiting for the user) while sessions of its pool wait: a slot, or
-- room under a per-key cap, may be free on another replica. Managers
-- LISTEN and try a claim at once instead of at their next poll period
-- (which stays as the fallback). SQLite has no NOTIFY: it keeps polling.

CREATE FUNCTION korvus_notify_queue() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- A run that ended is worth a wake-up only when something waits in
    -- its pool (the partial index sessions_queued answers that).
    IF TG_OP = 'UPDATE' AND (NEW.status <> 'running' OR NEW.exit_reason = 'awaiting_user')
       AND NOT EXISTS (
        SELECT 1 FROM sessions
        WHERE pool = NEW.pool AND status = 'running' AND owner IS NULL
          AND started_at IS NULL
          AND (exit_reason IS NULL OR exit_reason <> 'awaiting_user')
    ) THEN
        RETURN NEW;
    END IF;
    PERFORM pg_notify('korvus_queue', NEW.pool);
    RETURN NEW;
END;
$$;

CREATE TRIGGER sessions_queue_notify_insert
    AFTER INSERT ON sessions
    FOR EACH ROW
    WHEN (NEW.owner IS NULL AND NEW.started_at IS NULL AND NEW.status = 'running')
    EXECUTE FUNCTION korvus_notify_queue();

CREATE TRIGGER sessions_queue_notify_update
    AFTER UPDATE OF owner, status, exit_reason ON sessions
    FOR EACH ROW
    WHEN ((NEW.owner IS NULL AND OLD.owner IS NOT NULL AND NEW.started_at IS NULL
           AND NEW.status = 'running')
          OR (OLD.status = 'running' AND NEW.status <> 'running')
          OR (NEW.exit_reason = 'awaiting_user'
              AND OLD.exit_reason IS DISTINCT FROM 'awaiting_user'))
    EXECUTE FUNCTION korvus_notify_queue();
