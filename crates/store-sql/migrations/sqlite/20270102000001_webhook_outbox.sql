-- F22: completion webhooks from an outbox; see the PostgreSQL migration of
-- the same name for the design. Every transition of a session row into a
-- terminal status, or into waiting for the user, writes one outbox row in
-- the same transaction (a trigger).

CREATE TABLE webhook_outbox (
    session_id     BLOB    NOT NULL,
    incident_id    BLOB    NOT NULL,
    revision       INTEGER NOT NULL,
    fence          INTEGER NOT NULL,
    kind           TEXT    NOT NULL CHECK (kind IN ('ended', 'waiting')),
    status         TEXT    NOT NULL,
    exit_reason    TEXT,
    created_ms     INTEGER NOT NULL,
    due_ms         INTEGER NOT NULL,
    attempts       INTEGER NOT NULL DEFAULT 0,
    claimed_by     BLOB,
    claim_until_ms INTEGER,
    delivered_ms   INTEGER,
    last_error     TEXT,
    PRIMARY KEY (session_id, revision, fence, kind)
);

CREATE INDEX webhook_outbox_due ON webhook_outbox (due_ms) WHERE delivered_ms IS NULL;

CREATE TRIGGER sessions_webhook_outbox
    AFTER UPDATE ON sessions
    FOR EACH ROW
    WHEN ((NEW.status <> 'running' OR NEW.exit_reason = 'awaiting_user')
          AND (OLD.status IS NOT NEW.status
               OR OLD.exit_reason IS NOT NEW.exit_reason
               OR OLD.fence IS NOT NEW.fence))
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
