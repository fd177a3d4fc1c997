-- F24: a salvage of a settled session (attach_kept_output) moves its fence
-- and changes nothing else of the row. The outbox trigger fired on any
-- fence change of a terminal or waiting row, so every salvage would send
-- the session's end (or wait) again under a new webhook id. A run's end
-- or wait changes its status or exit reason, always (every path that moves
-- a row to a new fence passes through `running` first), so the trigger
-- now fires on those alone.

DROP TRIGGER sessions_webhook_outbox;

CREATE TRIGGER sessions_webhook_outbox
    AFTER UPDATE ON sessions
    FOR EACH ROW
    WHEN ((NEW.status <> 'running' OR NEW.exit_reason = 'awaiting_user')
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
