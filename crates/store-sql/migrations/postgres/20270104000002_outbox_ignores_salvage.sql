-- F24: a salvage of a settled session (attach_kept_output) moves its fence
-- and changes nothing else of the row. The outbox trigger fired on any
-- fence change of a terminal or waiting row, so every salvage would send
-- the session's end (or wait) again under a new webhook id. A run's end
-- or wait changes its status or exit reason, always (every path that moves
-- a row to a new fence passes through `running` first), so the trigger
-- now fires on those alone.

DROP TRIGGER sessions_webhook_outbox ON sessions;

CREATE TRIGGER sessions_webhook_outbox
    AFTER UPDATE ON sessions
    FOR EACH ROW
    WHEN ((NEW.status <> 'running' OR NEW.exit_reason = 'awaiting_user')
          AND (OLD.status IS DISTINCT FROM NEW.status
               OR OLD.exit_reason IS DISTINCT FROM NEW.exit_reason))
    EXECUTE FUNCTION korvus_webhook_outbox();
