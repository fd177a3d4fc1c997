-- F29: a session whose budget ran out pauses like one waiting for the
-- user: `running`, idle, with exit reason 'budget_reached' — every run it
-- made kept; a raised budget continues it. Idle was the single reason
-- 'awaiting_user' in the triggers below (the queries are built by the
-- crate from `exit_reason::IDLE`); they now take both. The outbox writes
-- a 'waiting' row for either, its exit reason telling them apart.

CREATE OR REPLACE FUNCTION korvus_notify_queue() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- A run that ended is worth a wake-up only when something waits in
    -- its pool (the partial index sessions_queued answers that).
    IF TG_OP = 'UPDATE'
       AND (NEW.status <> 'running' OR NEW.exit_reason IN ('awaiting_user', 'budget_reached'))
       AND NOT EXISTS (
        SELECT 1 FROM sessions
        WHERE pool = NEW.pool AND status = 'running' AND owner IS NULL
          AND started_at IS NULL
          AND (exit_reason IS NULL OR exit_reason NOT IN ('awaiting_user', 'budget_reached'))
    ) THEN
        RETURN NEW;
    END IF;
    PERFORM pg_notify('korvus_queue', NEW.pool);
    RETURN NEW;
END;
$$;

DROP TRIGGER sessions_queue_notify_update ON sessions;

CREATE TRIGGER sessions_queue_notify_update
    AFTER UPDATE OF owner, status, exit_reason ON sessions
    FOR EACH ROW
    WHEN ((NEW.owner IS NULL AND OLD.owner IS NOT NULL AND NEW.started_at IS NULL
           AND NEW.status = 'running')
          OR (OLD.status = 'running' AND NEW.status <> 'running')
          OR (NEW.exit_reason IN ('awaiting_user', 'budget_reached')
              AND OLD.exit_reason IS DISTINCT FROM NEW.exit_reason))
    EXECUTE FUNCTION korvus_notify_queue();

DROP TRIGGER sessions_webhook_outbox ON sessions;

CREATE TRIGGER sessions_webhook_outbox
    AFTER UPDATE ON sessions
    FOR EACH ROW
    WHEN ((NEW.status <> 'running' OR NEW.exit_reason IN ('awaiting_user', 'budget_reached'))
          AND (OLD.status IS DISTINCT FROM NEW.status
               OR OLD.exit_reason IS DISTINCT FROM NEW.exit_reason))
    EXECUTE FUNCTION korvus_webhook_outbox();
