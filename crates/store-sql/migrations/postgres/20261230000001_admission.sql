-- F19: admission. A session created or continued without a lease is
-- queued: running, no owner, `started_at` NULL. `started_at` is when the
-- current revision's run started (its manager recorded that it calls the
-- runner); every continue clears it. `pool` names the runner pool whose
-- managers may claim the row, `priority` 1..9 (5 the default) orders the
-- queue, `queue_key` (NULL: the incident) is the key it is queued and
-- capped under, `idempotency_key` is unique per incident, and
-- `queued_ms` (the database clock, ms) orders the queue: when the row was
-- last queued. Rows older
-- than this migration count as started (at their creation), so an unowned
-- one stays an orphan, as before. Lengths and NUL bytes are checked by
-- korvus_store::validate.

ALTER TABLE sessions ADD COLUMN started_at timestamptz;
ALTER TABLE sessions ADD COLUMN pool text NOT NULL DEFAULT 'default';
ALTER TABLE sessions ADD COLUMN priority smallint NOT NULL DEFAULT 5
    CONSTRAINT sessions_priority_check CHECK (priority BETWEEN 1 AND 9);
ALTER TABLE sessions ADD COLUMN queue_key text;
ALTER TABLE sessions ADD COLUMN idempotency_key text;
ALTER TABLE sessions ADD COLUMN queued_ms bigint;
UPDATE sessions SET started_at = created_at;
CREATE UNIQUE INDEX sessions_idempotency_key ON sessions (incident_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX sessions_queued ON sessions (pool, priority)
    WHERE status = 'running' AND owner IS NULL AND started_at IS NULL;
