-- F29: a session whose budget ran out pauses like one waiting for the
-- user: `running`, idle, with exit reason 'budget_reached' — every run it
-- made kept; a raised budget continues it. Idle was the single reason
-- 'awaiting_user' in the outbox trigger (the queries are built by the
-- crate from `exit_reason::IDLE`); it now takes both. The outbox writes a
-- 'waiting' row for either, its exit reason telling them apart.

DROP TRIGGER sessions_webhook_outbox;

CREATE TRIGGER sessions_webhook_outbox
    AFTER UPDATE ON sessions
    FOR EACH ROW
    WHEN ((NEW.status <> 'running' OR NEW.exit_reason IN ('awaiting_user', 'budget_reached'))
          AND (OLD.status IS NOT NEW.status
               OR OLD.exit_reason IS NOT NEW.exit_reason))
BEGIN
    INSERT OR IGNORE INTO webhook_outbox
        (session_id, incident_id, revision, fence, kind, status, exit_reason, created_ms, due_ms)
    VALUES
        (NEW.id, NEW.incident_id, NEW.revision, NEW.fence,
         CASE WHEN NEW.status = 'running' THEN 'waiting' ELSE 'ended' END,
         NEW.status, NEW.exit_reason,
         CAST(unixepoch('subsec') * 1000 AS INTEGER),
         CAST(unixepoch('subsec') * 1000 AS INTEGER));
END;
