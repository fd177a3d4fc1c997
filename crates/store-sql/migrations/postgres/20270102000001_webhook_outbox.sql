-- F22: completion webhooks from an outbox. Every transition of a session
-- row into a terminal status, or into waiting for the user, writes one
-- outbox row in the same transaction — a trigger, so no path that moves
-- a row (settle, settle with report, idle or queued cancel, forced
-- cancel, takeover) can skip it, and a refused (stale-fenced) write,
-- which changes no row, writes none. A row is keyed by the run it
-- reports: (session, revision, fence, kind), kind 'ended' or 'waiting'
-- (an idle session cancelled later ends at the same revision and fence).
-- Any replica delivers: a claim is a lease (claimed_by, claim_until_ms,
-- by the database clock); an expired claim is claimed again, so a
-- replica killed mid-delivery loses nothing.

CREATE TABLE webhook_outbox (
    session_id     uuid    NOT NULL,
    incident_id    uuid    NOT NULL,
    revision       integer NOT NULL,
    fence          bigint  NOT NULL,
    kind           text    NOT NULL,
    status         text    NOT NULL,
    exit_reason    text,
    created_ms     bigint  NOT NULL,
    due_ms         bigint  NOT NULL,
    attempts       integer NOT NULL DEFAULT 0,
    claimed_by     uuid,
    claim_until_ms bigint,
    delivered_ms   bigint,
    last_error     text,
    CONSTRAINT webhook_outbox_pkey PRIMARY KEY (session_id, revision, fence, kind),
    CONSTRAINT webhook_outbox_kind_check CHECK (kind IN ('ended', 'waiting'))
);

CREATE INDEX webhook_outbox_due ON webhook_outbox (due_ms) WHERE delivered_ms IS NULL;

CREATE FUNCTION korvus_webhook_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    now_ms bigint := CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT);
BEGIN
    INSERT INTO webhook_outbox
        (session_id, incident_id, revision, fence, kind, status, exit_reason, created_ms, due_ms)
    VALUES
        (NEW.id, NEW.incident_id, NEW.revision, NEW.fence,
         CASE WHEN NEW.status = 'running' THEN 'waiting' ELSE 'ended' END,
         NEW.status, NEW.exit_reason, now_ms, now_ms)
    ON CONFLICT DO NOTHING;
    RETURN NEW;
END;
$$;

CREATE TRIGGER sessions_webhook_outbox
    AFTER UPDATE ON sessions
    FOR EACH ROW
    WHEN ((NEW.status <> 'running' OR NEW.exit_reason = 'awaiting_user')
          AND (OLD.status IS DISTINCT FROM NEW.status
               OR OLD.exit_reason IS DISTINCT FROM NEW.exit_reason
               OR OLD.fence IS DISTINCT FROM NEW.fence))
    EXECUTE FUNCTION korvus_webhook_outbox();
