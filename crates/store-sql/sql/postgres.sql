-- Every statement korvus-store-sql runs on PostgreSQL, rendered by the
-- snapshot test (src/snapshot.rs). Do not edit: change the code, then
-- run `KORVUS_UPDATE_SQL=1 cargo test -p korvus-store-sql --lib snapshot`.

-- INSERT_INCIDENT (shared)
INSERT INTO incidents (id, title, status, workspace_repo, workspace_commit, created_at)
VALUES ($1, $2, $3, $4, $5, $6);

-- SELECT_INCIDENT (shared)
SELECT id, title, status, workspace_repo, workspace_commit, created_at
FROM incidents
WHERE id = $1;

-- LIST_INCIDENTS (shared)
SELECT id, title, status, workspace_repo, workspace_commit, created_at
FROM incidents
WHERE id > $1
ORDER BY id
LIMIT $2;

-- CLOSE_INCIDENT (shared)
UPDATE incidents
SET status = $2
WHERE id = $1
RETURNING id, title, status, workspace_repo, workspace_commit, created_at;

-- SELECT_SESSION (shared)
SELECT id, incident_id, seq, kind, status, prompt, workspace_repo, workspace_commit, exit_reason, turns, tool_calls, input_tokens, output_tokens, revision, fence, cancel_fence, owner, COALESCE((SELECT o.expires_ms FROM owners AS o WHERE o.id = sessions.owner AND o.expires_ms > sessions.lease_expires_ms AND sessions.detached = FALSE), lease_expires_ms) AS lease_expires_ms, created_at, ended_at, started_at, pool, priority, queue_key, idempotency_key, attempt, resume_pending, resume_after_ms, runner
FROM sessions
WHERE id = $1;

-- SESSION_BY_IDEMPOTENCY_KEY (shared)
SELECT id, incident_id, seq, kind, status, prompt, workspace_repo, workspace_commit, exit_reason, turns, tool_calls, input_tokens, output_tokens, revision, fence, cancel_fence, owner, COALESCE((SELECT o.expires_ms FROM owners AS o WHERE o.id = sessions.owner AND o.expires_ms > sessions.lease_expires_ms AND sessions.detached = FALSE), lease_expires_ms) AS lease_expires_ms, created_at, ended_at, started_at, pool, priority, queue_key, idempotency_key, attempt, resume_pending, resume_after_ms, runner
FROM sessions
WHERE incident_id = $1 AND idempotency_key = $2;

-- SESSION_EXISTS (shared)
SELECT 1
FROM sessions
WHERE id = $1;

-- LIST_SESSIONS (shared)
SELECT id, incident_id, seq, kind, status, prompt, workspace_repo, workspace_commit, exit_reason, turns, tool_calls, input_tokens, output_tokens, revision, fence, cancel_fence, owner, COALESCE((SELECT o.expires_ms FROM owners AS o WHERE o.id = sessions.owner AND o.expires_ms > sessions.lease_expires_ms AND sessions.detached = FALSE), lease_expires_ms) AS lease_expires_ms, created_at, ended_at, started_at, pool, priority, queue_key, idempotency_key, attempt, resume_pending, resume_after_ms, runner
FROM sessions
WHERE incident_id = $1 AND seq > $2
ORDER BY seq
LIMIT $3;

-- SETTLE (shared)
UPDATE sessions
SET status = $2, exit_reason = $3, turns = $4, tool_calls = $5, input_tokens = $6, output_tokens = $7, ended_at = $8, owner = NULL, lease_expires_ms = NULL
WHERE id = $1 AND fence = $9 AND status = 'running' AND (exit_reason IS NULL OR exit_reason NOT IN ('awaiting_user', 'budget_reached'))
RETURNING id, incident_id, seq, kind, status, prompt, workspace_repo, workspace_commit, exit_reason, turns, tool_calls, input_tokens, output_tokens, revision, fence, cancel_fence, owner, COALESCE((SELECT o.expires_ms FROM owners AS o WHERE o.id = sessions.owner AND o.expires_ms > sessions.lease_expires_ms AND sessions.detached = FALSE), lease_expires_ms) AS lease_expires_ms, created_at, ended_at, started_at, pool, priority, queue_key, idempotency_key, attempt, resume_pending, resume_after_ms, runner;

-- CANCEL_IDLE (shared)
UPDATE sessions
SET status = $2, exit_reason = $3, ended_at = $4
WHERE id = $1 AND status = $5 AND exit_reason IN ('awaiting_user', 'budget_reached')
RETURNING id, incident_id, seq, kind, status, prompt, workspace_repo, workspace_commit, exit_reason, turns, tool_calls, input_tokens, output_tokens, revision, fence, cancel_fence, owner, COALESCE((SELECT o.expires_ms FROM owners AS o WHERE o.id = sessions.owner AND o.expires_ms > sessions.lease_expires_ms AND sessions.detached = FALSE), lease_expires_ms) AS lease_expires_ms, created_at, ended_at, started_at, pool, priority, queue_key, idempotency_key, attempt, resume_pending, resume_after_ms, runner;

-- BUMP_FENCE (shared)
UPDATE sessions
SET fence = fence + 1
WHERE id = $1 AND fence = $2 AND status = 'running' AND (exit_reason IS NULL OR exit_reason NOT IN ('awaiting_user', 'budget_reached'))
RETURNING id, incident_id, seq, kind, status, prompt, workspace_repo, workspace_commit, exit_reason, turns, tool_calls, input_tokens, output_tokens, revision, fence, cancel_fence, owner, COALESCE((SELECT o.expires_ms FROM owners AS o WHERE o.id = sessions.owner AND o.expires_ms > sessions.lease_expires_ms AND sessions.detached = FALSE), lease_expires_ms) AS lease_expires_ms, created_at, ended_at, started_at, pool, priority, queue_key, idempotency_key, attempt, resume_pending, resume_after_ms, runner;

-- SALVAGE_FENCE (shared)
UPDATE sessions
SET fence = fence + 1
WHERE id = $1 AND fence = $2 AND revision >= $3 AND NOT (status = 'running' AND (exit_reason IS NULL OR exit_reason NOT IN ('awaiting_user', 'budget_reached')))
RETURNING id, incident_id, seq, kind, status, prompt, workspace_repo, workspace_commit, exit_reason, turns, tool_calls, input_tokens, output_tokens, revision, fence, cancel_fence, owner, COALESCE((SELECT o.expires_ms FROM owners AS o WHERE o.id = sessions.owner AND o.expires_ms > sessions.lease_expires_ms AND sessions.detached = FALSE), lease_expires_ms) AS lease_expires_ms, created_at, ended_at, started_at, pool, priority, queue_key, idempotency_key, attempt, resume_pending, resume_after_ms, runner;

-- SALVAGE_REPORT (shared)
UPDATE reports
SET markdown_bytes = CASE WHEN markdown_key IS NULL THEN $4 ELSE markdown_bytes END, markdown_key = COALESCE(markdown_key, $3), manifest_key = COALESCE($5, manifest_key), salvaged_from = $6, detail = $7, fence = $8
WHERE session_id = $1 AND revision = $2;

-- MARK_STARTED (shared)
UPDATE sessions
SET started_at = COALESCE(started_at, $3)
WHERE id = $1 AND fence = $2 AND status = 'running' AND (exit_reason IS NULL OR exit_reason NOT IN ('awaiting_user', 'budget_reached'))
RETURNING id, incident_id, seq, kind, status, prompt, workspace_repo, workspace_commit, exit_reason, turns, tool_calls, input_tokens, output_tokens, revision, fence, cancel_fence, owner, COALESCE((SELECT o.expires_ms FROM owners AS o WHERE o.id = sessions.owner AND o.expires_ms > sessions.lease_expires_ms AND sessions.detached = FALSE), lease_expires_ms) AS lease_expires_ms, created_at, ended_at, started_at, pool, priority, queue_key, idempotency_key, attempt, resume_pending, resume_after_ms, runner;

-- REQUEST_CANCEL (shared)
UPDATE sessions
SET cancel_fence = fence
WHERE id = $1 AND status = $2
RETURNING id, incident_id, seq, kind, status, prompt, workspace_repo, workspace_commit, exit_reason, turns, tool_calls, input_tokens, output_tokens, revision, fence, cancel_fence, owner, COALESCE((SELECT o.expires_ms FROM owners AS o WHERE o.id = sessions.owner AND o.expires_ms > sessions.lease_expires_ms AND sessions.detached = FALSE), lease_expires_ms) AS lease_expires_ms, created_at, ended_at, started_at, pool, priority, queue_key, idempotency_key, attempt, resume_pending, resume_after_ms, runner;

-- CANCEL_REQUESTS (shared)
SELECT id, fence
FROM sessions
WHERE cancel_fence IS NOT NULL AND cancel_fence = fence AND status = $1;

-- LIST_CONTEXT_REFS (shared)
SELECT session_id, incident_id, artifact_id, role, position
FROM session_context_refs
WHERE session_id = $1
ORDER BY position;

-- SELECT_REPORT (shared)
SELECT session_id, incident_id, revision, markdown_key, markdown_bytes, exit_reason, turns, tool_calls, input_tokens, output_tokens, detail, fence, created_at, manifest_key, salvaged_from
FROM reports
WHERE session_id = $1 AND revision = $2;

-- LIST_REPORTS (shared)
SELECT session_id, incident_id, revision, markdown_key, markdown_bytes, exit_reason, turns, tool_calls, input_tokens, output_tokens, detail, fence, created_at, manifest_key, salvaged_from
FROM reports
WHERE session_id = $1 AND revision > $2
ORDER BY revision
LIMIT $3;

-- NEXT_REPORT_REVISION (shared)
SELECT CAST((SELECT COALESCE(MAX(revision), 0) FROM reports WHERE session_id = $1) AS BIGINT) + 1
FROM sessions
WHERE id = $1;

-- INSERT_REPORT_IF_ABSENT (shared)
INSERT INTO reports (session_id, incident_id, revision, markdown_key, markdown_bytes, exit_reason, turns, tool_calls, input_tokens, output_tokens, detail, fence, created_at, manifest_key, salvaged_from)
SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15
WHERE EXISTS (SELECT 1 FROM sessions WHERE id = $1 AND incident_id = $2 AND fence = $12)
ON CONFLICT (session_id, revision) DO NOTHING;

-- LIST_SESSION_ARTIFACTS (shared)
SELECT id, incident_id, session_id, kind, path, blob_key, content_type, size_bytes, sha256, revision, created_at, fence
FROM artifacts
WHERE session_id = $1 AND id > $2
ORDER BY id
LIMIT $3;

-- LATEST_SESSION_ARTIFACTS (shared)
SELECT id, incident_id, session_id, kind, path, blob_key, content_type, size_bytes, sha256, revision, created_at, fence
FROM (SELECT id, incident_id, session_id, kind, path, blob_key, content_type, size_bytes, sha256, revision, created_at, fence, ROW_NUMBER() OVER (PARTITION BY kind, path ORDER BY revision DESC, created_at DESC, id DESC) AS newest FROM artifacts WHERE session_id = $1 AND kind <> 'checkpoint') AS latest
WHERE newest = 1
ORDER BY path, id;

-- LIST_INCIDENT_ARTIFACTS (shared)
SELECT id, incident_id, session_id, kind, path, blob_key, content_type, size_bytes, sha256, revision, created_at, fence
FROM artifacts
WHERE incident_id = $1 AND id > $2
ORDER BY id
LIMIT $3;

-- GUARD_REPLACEMENT (shared)
UPDATE sessions
SET fence = fence
WHERE id = $1 AND fence = $2 AND status = 'running' AND (exit_reason IS NULL OR exit_reason NOT IN ('awaiting_user', 'budget_reached'));

-- DELETE_CHECKPOINT (shared)
DELETE
FROM artifacts
WHERE id = $1 AND session_id = $2 AND fence = $3 AND kind = $4;

-- GUARD_DELETION (shared)
UPDATE sessions
SET fence = fence
WHERE id = $1 AND fence = $2 AND status IN ('completed', 'failed', 'cancelled');

-- INHERITED_ARTIFACT (shared)
SELECT 1
FROM artifacts a JOIN session_context_refs r ON r.incident_id = a.incident_id AND r.artifact_id = a.id
WHERE a.session_id = $1 AND r.session_id <> $1
LIMIT 1;

-- DELETE_SESSION_REFS (shared)
DELETE
FROM session_context_refs
WHERE session_id = $1;

-- DELETE_SESSION_REPORTS (shared)
DELETE
FROM reports
WHERE session_id = $1;

-- DELETE_SESSION_ARTIFACTS (shared)
DELETE
FROM artifacts
WHERE session_id = $1;

-- DELETE_SESSION_EVENTS (shared)
DELETE
FROM webhook_outbox
WHERE session_id = $1;

-- DELETE_SESSION_BUDGET (shared)
DELETE
FROM budgets
WHERE scope = 'session' AND scope_id = $1;

-- DELETE_SESSION (shared)
DELETE
FROM sessions
WHERE id = $1;

-- UNDELIVERED_EVENTS (shared)
SELECT COUNT(*)
FROM webhook_outbox
WHERE delivered_ms IS NULL;

-- INSERT_LOG (shared)
INSERT INTO turn_logs (id, header, size_bytes)
VALUES ($1, $2, $3);

-- SELECT_LOG (shared)
SELECT header, event_count, size_bytes
FROM turn_logs
WHERE id = $1;

-- LIST_LOGS (shared)
SELECT id
FROM turn_logs
ORDER BY id;

-- DELETE_LOG_EVENTS (shared)
DELETE
FROM turn_events
WHERE log_id = $1;

-- DELETE_LOG (shared)
DELETE
FROM turn_logs
WHERE id = $1;

-- READ_EVENTS (shared)
SELECT seq, body
FROM turn_events
WHERE log_id = $1 AND seq >= $2
ORDER BY seq
LIMIT $3;

-- READ_BODIES (shared)
SELECT body
FROM turn_events
WHERE log_id = $1 AND seq >= $2
ORDER BY seq
LIMIT $3;

-- EVENT_COUNT (shared)
SELECT event_count
FROM turn_logs
WHERE id = $1;

-- CLAIM_EPOCH (shared)
UPDATE turn_logs
SET epoch = $2
WHERE id = $1 AND epoch <= $2;

-- SELECT_EPOCH (shared)
SELECT epoch
FROM turn_logs
WHERE id = $1;

-- COUNT_AND_EPOCH (shared)
SELECT event_count, epoch
FROM turn_logs
WHERE id = $1;

-- READ_COMMITTED (postgres)
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;

-- LOCK_QUEUE_KEY (postgres)
INSERT INTO queue_keys (pool, queue_key)
VALUES ($1, $2)
ON CONFLICT (pool, queue_key) DO
UPDATE
SET pool = EXCLUDED.pool;

-- INSERT_CONTEXT_REFS (postgres)
WITH s AS ( UPDATE sessions SET context_ref_count = context_ref_count + $4 WHERE id = $1 RETURNING id, incident_id, context_ref_count - $4 AS start )
INSERT INTO session_context_refs (session_id, incident_id, artifact_id, role, position)
SELECT s.id, s.incident_id, r.artifact_id, r.role, (s.start + r.ord - 1)::integer
FROM s, UNNEST($2::uuid[], $3::text[])
WITH ORDINALITY AS r(artifact_id, role, ord)
RETURNING session_id, incident_id, artifact_id, role, position;

-- INSERT_ARTIFACTS (postgres)
WITH s AS (SELECT id, incident_id, fence FROM sessions WHERE id = ANY($3) AND status = 'running' AND (exit_reason IS NULL OR exit_reason NOT IN ('awaiting_user', 'budget_reached')) FOR SHARE), stale AS (SELECT 1 FROM UNNEST($2::uuid[], $3::uuid[], $12::int8[]) AS f(incident_id, session_id, fence) WHERE NOT EXISTS (SELECT 1 FROM s WHERE s.id = f.session_id AND s.incident_id = f.incident_id AND s.fence = f.fence))
INSERT INTO artifacts (id, incident_id, session_id, kind, path, blob_key, content_type, size_bytes, sha256, revision, created_at, fence)
SELECT u.id, u.incident_id, u.session_id, u.kind, u.path, u.blob_key, u.content_type, u.size_bytes, u.sha256, u.revision, $11, u.fence
FROM UNNEST($1::uuid[], $2::uuid[], $3::uuid[], $4::text[], $5::text[], $6::text[], $7::text[], $8::int8[], $9::text[], $10::int4[], $12::int8[]) AS u(id, incident_id, session_id, kind, path, blob_key, content_type, size_bytes, sha256, revision, fence)
WHERE NOT EXISTS (SELECT 1 FROM stale);

-- INSERT_SETTLED_ARTIFACTS (postgres)
INSERT INTO artifacts (id, incident_id, session_id, kind, path, blob_key, content_type, size_bytes, sha256, revision, created_at, fence)
SELECT u.id, u.incident_id, u.session_id, u.kind, u.path, u.blob_key, u.content_type, u.size_bytes, u.sha256, u.revision, $11, u.fence
FROM UNNEST($1::uuid[], $2::uuid[], $3::uuid[], $4::text[], $5::text[], $6::text[], $7::text[], $8::int8[], $9::text[], $10::int4[], $12::int8[]) AS u(id, incident_id, session_id, kind, path, blob_key, content_type, size_bytes, sha256, revision, fence);

-- SESSION_FENCES_OF (postgres)
SELECT id, incident_id, fence, (status = 'running' AND (exit_reason IS NULL OR exit_reason NOT IN ('awaiting_user', 'budget_reached')))
FROM sessions
WHERE id = ANY($1);

-- ARTIFACTS_BY_ID (postgres)
SELECT id, incident_id, session_id, kind, path, blob_key, content_type, size_bytes, sha256, revision, created_at, fence
FROM artifacts
WHERE id = ANY($1);

-- APPEND_EVENTS (postgres)
WITH l AS ( UPDATE turn_logs SET event_count = event_count + $3, size_bytes = size_bytes + $4, epoch = $6 WHERE id = $1 AND event_count = $5 AND epoch <= $6 RETURNING event_count - $3 AS start )
INSERT INTO turn_events (log_id, seq, body)
SELECT $1, l.start + e.ord - 1, e.body
FROM l, UNNEST($2::text[])
WITH ORDINALITY AS e(body, ord);

-- INSERT_SESSION (postgres dialect)
WITH next AS ( UPDATE incidents SET last_seq = last_seq + 1 WHERE id = $2 RETURNING last_seq )
INSERT INTO sessions (id, incident_id, seq, kind, status, prompt, workspace_repo, workspace_commit, revision, created_at, owner, lease_expires_ms, pool, priority, queue_key, idempotency_key, runner, queued_ms)
SELECT $1, $2, next.last_seq, CASE WHEN next.last_seq = 1 THEN 'initial' ELSE 'follow_up' END, $3, $4, $5, $6, 1, $7, $8, CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT) + $9, $10, $11, $12, $13, $14, CASE WHEN $8 IS NULL THEN CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT) END
FROM next
RETURNING seq, COALESCE((SELECT o.expires_ms FROM owners AS o WHERE o.id = sessions.owner AND o.expires_ms > sessions.lease_expires_ms AND sessions.detached = FALSE), lease_expires_ms) AS lease_expires_ms;

-- REOPEN (built from the dialect)
UPDATE sessions
SET status = $2, ended_at = NULL, exit_reason = NULL, revision = revision + 1, fence = fence + 1, started_at = NULL, attempt = 1, owner = $3, lease_expires_ms = CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT) + $4, detached = FALSE, queued_ms = CASE WHEN $3 IS NULL THEN CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT) END
WHERE id = $1 AND status IN ($5, $6, $7)
RETURNING id, incident_id, seq, kind, status, prompt, workspace_repo, workspace_commit, exit_reason, turns, tool_calls, input_tokens, output_tokens, revision, fence, cancel_fence, owner, COALESCE((SELECT o.expires_ms FROM owners AS o WHERE o.id = sessions.owner AND o.expires_ms > sessions.lease_expires_ms AND sessions.detached = FALSE), lease_expires_ms) AS lease_expires_ms, created_at, ended_at, started_at, pool, priority, queue_key, idempotency_key, attempt, resume_pending, resume_after_ms, runner;

-- RESUME_IDLE (built from the dialect)
UPDATE sessions
SET exit_reason = NULL, revision = revision + 1, fence = fence + 1, started_at = NULL, attempt = 1, owner = $3, lease_expires_ms = CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT) + $4, detached = FALSE, queued_ms = CASE WHEN $3 IS NULL THEN CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT) END
WHERE id = $1 AND status = $2 AND exit_reason IN ('awaiting_user', 'budget_reached')
RETURNING id, incident_id, seq, kind, status, prompt, workspace_repo, workspace_commit, exit_reason, turns, tool_calls, input_tokens, output_tokens, revision, fence, cancel_fence, owner, COALESCE((SELECT o.expires_ms FROM owners AS o WHERE o.id = sessions.owner AND o.expires_ms > sessions.lease_expires_ms AND sessions.detached = FALSE), lease_expires_ms) AS lease_expires_ms, created_at, ended_at, started_at, pool, priority, queue_key, idempotency_key, attempt, resume_pending, resume_after_ms, runner;

-- HEARTBEAT_OWNER (built from the dialect)
INSERT INTO owners (id, expires_ms)
VALUES ($1, CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT) + $2)
ON CONFLICT (id) DO
UPDATE
SET expires_ms = excluded.expires_ms;

-- HEARTBEAT_FORGET (built from the dialect)
DELETE
FROM owners
WHERE expires_ms < CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT) - 86400000 AND id <> $1;

-- HEARTBEAT_RELEASE (built from the dialect)
UPDATE sessions
SET detached = NOT detached
WHERE owner = $1 AND status = $3 AND (exit_reason IS NULL OR exit_reason NOT IN ('awaiting_user', 'budget_reached')) AND ((detached = TRUE AND replace(CAST(id AS text), '-', '') || ':' || CAST(fence AS text) IN (SELECT json_array_elements_text(CAST($4 AS json)))) OR (detached = FALSE AND NOT replace(CAST(id AS text), '-', '') || ':' || CAST(fence AS text) IN (SELECT json_array_elements_text(CAST($4 AS json))) AND lease_expires_ms <= CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT)));

-- HEARTBEAT_HELD (built from the dialect)
SELECT id, fence
FROM sessions
WHERE owner = $1 AND status = $3 AND replace(CAST(id AS text), '-', '') || ':' || CAST(fence AS text) IN (SELECT json_array_elements_text(CAST($4 AS json)));

-- EXPIRED_LEASES (built from the dialect)
SELECT id, fence
FROM sessions
WHERE status = 'running' AND (exit_reason IS NULL OR exit_reason NOT IN ('awaiting_user', 'budget_reached')) AND (owner IS NOT NULL OR started_at IS NOT NULL) AND NOT (resume_pending = TRUE AND lease_expires_ms = 253402300799999) AND (lease_expires_ms IS NULL OR lease_expires_ms <= CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT)) AND (owner IS NULL OR detached = TRUE OR NOT EXISTS (SELECT 1 FROM owners AS o WHERE o.id = sessions.owner AND o.expires_ms > CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT)));

-- TAKE_OVER (built from the dialect)
UPDATE sessions
SET fence = fence + 1, owner = $3, lease_expires_ms = CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT) + $4, detached = FALSE, cancel_fence = CASE WHEN cancel_fence = fence THEN fence + 1 ELSE cancel_fence END
WHERE id = $1 AND fence = $2 AND status = 'running' AND (exit_reason IS NULL OR exit_reason NOT IN ('awaiting_user', 'budget_reached')) AND (owner IS NOT NULL OR started_at IS NOT NULL) AND NOT (resume_pending = TRUE AND lease_expires_ms = 253402300799999) AND (lease_expires_ms IS NULL OR lease_expires_ms <= CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT)) AND (owner IS NULL OR detached = TRUE OR NOT EXISTS (SELECT 1 FROM owners AS o WHERE o.id = sessions.owner AND o.expires_ms > CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT)))
RETURNING id, incident_id, seq, kind, status, prompt, workspace_repo, workspace_commit, exit_reason, turns, tool_calls, input_tokens, output_tokens, revision, fence, cancel_fence, owner, COALESCE((SELECT o.expires_ms FROM owners AS o WHERE o.id = sessions.owner AND o.expires_ms > sessions.lease_expires_ms AND sessions.detached = FALSE), lease_expires_ms) AS lease_expires_ms, created_at, ended_at, started_at, pool, priority, queue_key, idempotency_key, attempt, resume_pending, resume_after_ms, runner;

-- INSERT_REPORT (built from the dialect)
INSERT INTO reports (session_id, incident_id, revision, markdown_key, markdown_bytes, exit_reason, turns, tool_calls, input_tokens, output_tokens, detail, fence, created_at, manifest_key, salvaged_from)
SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15
WHERE EXISTS (SELECT 1 FROM sessions WHERE id = $1 AND incident_id = $2 AND fence = $12 AND status = 'running' AND (exit_reason IS NULL OR exit_reason NOT IN ('awaiting_user', 'budget_reached')) FOR SHARE);

-- CLAIM_NEXT (built from the dialect)
UPDATE sessions
SET owner = $2, lease_expires_ms = CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT) + $3, detached = FALSE, fence = fence + 1, resume_pending = FALSE, resume_after_ms = NULL
WHERE id = (SELECT s.id FROM sessions AS s LEFT JOIN (SELECT COALESCE(o.queue_key, CAST(o.incident_id AS text)) AS k, count(*) AS n FROM sessions AS o WHERE o.pool = $1 AND o.owner IS NOT NULL AND NOT (o.resume_pending = TRUE AND o.lease_expires_ms = 253402300799999) AND o.status = 'running' AND (o.exit_reason IS NULL OR o.exit_reason NOT IN ('awaiting_user', 'budget_reached')) GROUP BY COALESCE(o.queue_key, CAST(o.incident_id AS text))) AS b ON b.k = COALESCE(s.queue_key, CAST(s.incident_id AS text)) LEFT JOIN queue_keys AS q ON q.pool = s.pool AND q.queue_key = COALESCE(s.queue_key, CAST(s.incident_id AS text)) WHERE s.pool = $1 AND (s.status = 'running' AND (s.exit_reason IS NULL OR s.exit_reason NOT IN ('awaiting_user', 'budget_reached')) AND s.owner IS NULL AND s.started_at IS NULL OR ((s.resume_pending = TRUE AND s.lease_expires_ms = 253402300799999) AND s.status = 'running' AND (s.exit_reason IS NULL OR s.exit_reason NOT IN ('awaiting_user', 'budget_reached')) AND (s.resume_after_ms IS NULL OR s.resume_after_ms <= CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT)))) ORDER BY s.priority DESC, COALESCE(b.n, 0), COALESCE(q.last_claimed_ms, 0), s.queued_ms, s.id LIMIT 1 FOR UPDATE OF s SKIP LOCKED) AND (owner IS NULL AND started_at IS NULL OR (resume_pending = TRUE AND lease_expires_ms = 253402300799999)) AND status = 'running' AND (exit_reason IS NULL OR exit_reason NOT IN ('awaiting_user', 'budget_reached'))
RETURNING id, incident_id, seq, kind, status, prompt, workspace_repo, workspace_commit, exit_reason, turns, tool_calls, input_tokens, output_tokens, revision, fence, cancel_fence, owner, COALESCE((SELECT o.expires_ms FROM owners AS o WHERE o.id = sessions.owner AND o.expires_ms > sessions.lease_expires_ms AND sessions.detached = FALSE), lease_expires_ms) AS lease_expires_ms, created_at, ended_at, started_at, pool, priority, queue_key, idempotency_key, attempt, resume_pending, resume_after_ms, runner;

-- CLAIM_CAPPED (built from the dialect)
UPDATE sessions
SET owner = $2, lease_expires_ms = CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT) + $3, detached = FALSE, fence = fence + 1, resume_pending = FALSE, resume_after_ms = NULL
WHERE id = (SELECT s.id FROM sessions AS s LEFT JOIN (SELECT COALESCE(o.queue_key, CAST(o.incident_id AS text)) AS k, count(*) AS n FROM sessions AS o WHERE o.pool = $1 AND o.owner IS NOT NULL AND NOT (o.resume_pending = TRUE AND o.lease_expires_ms = 253402300799999) AND o.status = 'running' AND (o.exit_reason IS NULL OR o.exit_reason NOT IN ('awaiting_user', 'budget_reached')) GROUP BY COALESCE(o.queue_key, CAST(o.incident_id AS text))) AS b ON b.k = COALESCE(s.queue_key, CAST(s.incident_id AS text)) LEFT JOIN queue_keys AS q ON q.pool = s.pool AND q.queue_key = COALESCE(s.queue_key, CAST(s.incident_id AS text)) WHERE s.pool = $1 AND (s.status = 'running' AND (s.exit_reason IS NULL OR s.exit_reason NOT IN ('awaiting_user', 'budget_reached')) AND s.owner IS NULL AND s.started_at IS NULL OR ((s.resume_pending = TRUE AND s.lease_expires_ms = 253402300799999) AND s.status = 'running' AND (s.exit_reason IS NULL OR s.exit_reason NOT IN ('awaiting_user', 'budget_reached')) AND (s.resume_after_ms IS NULL OR s.resume_after_ms <= CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT)))) AND COALESCE(b.n, 0) < $4 ORDER BY s.priority DESC, COALESCE(b.n, 0), COALESCE(q.last_claimed_ms, 0), s.queued_ms, s.id LIMIT 1 FOR UPDATE OF s SKIP LOCKED) AND (owner IS NULL AND started_at IS NULL OR (resume_pending = TRUE AND lease_expires_ms = 253402300799999)) AND status = 'running' AND (exit_reason IS NULL OR exit_reason NOT IN ('awaiting_user', 'budget_reached'))
RETURNING id, incident_id, seq, kind, status, prompt, workspace_repo, workspace_commit, exit_reason, turns, tool_calls, input_tokens, output_tokens, revision, fence, cancel_fence, owner, COALESCE((SELECT o.expires_ms FROM owners AS o WHERE o.id = sessions.owner AND o.expires_ms > sessions.lease_expires_ms AND sessions.detached = FALSE), lease_expires_ms) AS lease_expires_ms, created_at, ended_at, started_at, pool, priority, queue_key, idempotency_key, attempt, resume_pending, resume_after_ms, runner;

-- PICK_CAPPED (built from the dialect)
SELECT s.id, COALESCE(s.queue_key, CAST(s.incident_id AS text))
FROM sessions AS s LEFT JOIN (SELECT COALESCE(o.queue_key, CAST(o.incident_id AS text)) AS k, count(*) AS n FROM sessions AS o WHERE o.pool = $1 AND o.owner IS NOT NULL AND NOT (o.resume_pending = TRUE AND o.lease_expires_ms = 253402300799999) AND o.status = 'running' AND (o.exit_reason IS NULL OR o.exit_reason NOT IN ('awaiting_user', 'budget_reached')) GROUP BY COALESCE(o.queue_key, CAST(o.incident_id AS text))) AS b ON b.k = COALESCE(s.queue_key, CAST(s.incident_id AS text)) LEFT JOIN queue_keys AS q ON q.pool = s.pool AND q.queue_key = COALESCE(s.queue_key, CAST(s.incident_id AS text))
WHERE s.pool = $1 AND (s.status = 'running' AND (s.exit_reason IS NULL OR s.exit_reason NOT IN ('awaiting_user', 'budget_reached')) AND s.owner IS NULL AND s.started_at IS NULL OR ((s.resume_pending = TRUE AND s.lease_expires_ms = 253402300799999) AND s.status = 'running' AND (s.exit_reason IS NULL OR s.exit_reason NOT IN ('awaiting_user', 'budget_reached')) AND (s.resume_after_ms IS NULL OR s.resume_after_ms <= CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT)))) AND COALESCE(b.n, 0) < $2
ORDER BY s.priority DESC, COALESCE(b.n, 0), COALESCE(q.last_claimed_ms, 0), s.queued_ms, s.id
LIMIT 1 FOR
UPDATE OF s SKIP LOCKED;

-- KEY_BUSY (built from the dialect)
SELECT count(*)
FROM sessions AS o
WHERE o.pool = $1 AND COALESCE(o.queue_key, CAST(o.incident_id AS text)) = $2 AND o.owner IS NOT NULL AND NOT (o.resume_pending = TRUE AND o.lease_expires_ms = 253402300799999) AND o.status = 'running' AND (o.exit_reason IS NULL OR o.exit_reason NOT IN ('awaiting_user', 'budget_reached'));

-- CLAIM_ROW (built from the dialect)
UPDATE sessions
SET owner = $2, lease_expires_ms = CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT) + $3, detached = FALSE, fence = fence + 1, resume_pending = FALSE, resume_after_ms = NULL
WHERE id = $1 AND (owner IS NULL AND started_at IS NULL OR (resume_pending = TRUE AND lease_expires_ms = 253402300799999)) AND status = 'running' AND (exit_reason IS NULL OR exit_reason NOT IN ('awaiting_user', 'budget_reached'))
RETURNING id, incident_id, seq, kind, status, prompt, workspace_repo, workspace_commit, exit_reason, turns, tool_calls, input_tokens, output_tokens, revision, fence, cancel_fence, owner, COALESCE((SELECT o.expires_ms FROM owners AS o WHERE o.id = sessions.owner AND o.expires_ms > sessions.lease_expires_ms AND sessions.detached = FALSE), lease_expires_ms) AS lease_expires_ms, created_at, ended_at, started_at, pool, priority, queue_key, idempotency_key, attempt, resume_pending, resume_after_ms, runner;

-- RELEASE (built from the dialect)
UPDATE sessions
SET owner = NULL, lease_expires_ms = NULL, fence = fence + 1, queued_ms = COALESCE(queued_ms, CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT))
WHERE id = $1 AND fence = $2 AND started_at IS NULL AND status = 'running' AND (exit_reason IS NULL OR exit_reason NOT IN ('awaiting_user', 'budget_reached'))
RETURNING id, incident_id, seq, kind, status, prompt, workspace_repo, workspace_commit, exit_reason, turns, tool_calls, input_tokens, output_tokens, revision, fence, cancel_fence, owner, COALESCE((SELECT o.expires_ms FROM owners AS o WHERE o.id = sessions.owner AND o.expires_ms > sessions.lease_expires_ms AND sessions.detached = FALSE), lease_expires_ms) AS lease_expires_ms, created_at, ended_at, started_at, pool, priority, queue_key, idempotency_key, attempt, resume_pending, resume_after_ms, runner;

-- RELEASE_FOR_RESUME (built from the dialect)
UPDATE sessions
SET owner = $3, lease_expires_ms = $4, detached = FALSE, fence = fence + 1, attempt = attempt + 1, resume_pending = TRUE, resume_after_ms = CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT) + $5, queued_ms = COALESCE(queued_ms, CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT))
WHERE id = $1 AND fence = $2 AND (cancel_fence IS NULL OR cancel_fence <> $2) AND status = 'running' AND (exit_reason IS NULL OR exit_reason NOT IN ('awaiting_user', 'budget_reached'))
RETURNING id, incident_id, seq, kind, status, prompt, workspace_repo, workspace_commit, exit_reason, turns, tool_calls, input_tokens, output_tokens, revision, fence, cancel_fence, owner, COALESCE((SELECT o.expires_ms FROM owners AS o WHERE o.id = sessions.owner AND o.expires_ms > sessions.lease_expires_ms AND sessions.detached = FALSE), lease_expires_ms) AS lease_expires_ms, created_at, ended_at, started_at, pool, priority, queue_key, idempotency_key, attempt, resume_pending, resume_after_ms, runner;

-- QUEUE_DEPTH (built from the dialect)
SELECT COUNT(*), COALESCE(SUM(CASE WHEN COALESCE(s.queue_key, CAST(s.incident_id AS text)) = $2 THEN 1 ELSE 0 END), 0)
FROM sessions AS s
WHERE s.pool = $1 AND s.status = 'running' AND (s.exit_reason IS NULL OR s.exit_reason NOT IN ('awaiting_user', 'budget_reached')) AND s.owner IS NULL AND s.started_at IS NULL;

-- QUEUE_POSITION (built from the dialect)
SELECT (SELECT COUNT(*) FROM sessions AS s WHERE s.pool = me.pool AND (s.status = 'running' AND (s.exit_reason IS NULL OR s.exit_reason NOT IN ('awaiting_user', 'budget_reached')) AND s.owner IS NULL AND s.started_at IS NULL OR ((s.resume_pending = TRUE AND s.lease_expires_ms = 253402300799999) AND s.status = 'running' AND (s.exit_reason IS NULL OR s.exit_reason NOT IN ('awaiting_user', 'budget_reached')))) AND (s.priority > me.priority OR s.priority = me.priority AND (COALESCE(s.queued_ms, 0) < COALESCE(me.queued_ms, 0) OR COALESCE(s.queued_ms, 0) = COALESCE(me.queued_ms, 0) AND s.id < me.id)))
FROM sessions AS me
WHERE me.id = $1 AND (me.status = 'running' AND (me.exit_reason IS NULL OR me.exit_reason NOT IN ('awaiting_user', 'budget_reached')) AND me.owner IS NULL AND me.started_at IS NULL OR ((me.resume_pending = TRUE AND me.lease_expires_ms = 253402300799999) AND me.status = 'running' AND (me.exit_reason IS NULL OR me.exit_reason NOT IN ('awaiting_user', 'budget_reached'))));

-- STAMP_KEY (built from the dialect)
INSERT INTO queue_keys (pool, queue_key, last_claimed_ms)
VALUES ($1, $2, CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT))
ON CONFLICT (pool, queue_key) DO
UPDATE
SET last_claimed_ms = EXCLUDED.last_claimed_ms;

-- HEARTBEAT (built from the dialect)
WITH beat AS (INSERT INTO owners (id, expires_ms) VALUES ($1, CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT) + $2) ON CONFLICT (id) DO UPDATE SET expires_ms = excluded.expires_ms RETURNING id), forgot AS (DELETE FROM owners WHERE expires_ms < CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT) - 86400000 AND id <> $1 RETURNING id), moved AS (UPDATE sessions SET detached = NOT detached WHERE owner = $1 AND status = $3 AND (exit_reason IS NULL OR exit_reason NOT IN ('awaiting_user', 'budget_reached')) AND ((detached = TRUE AND replace(CAST(id AS text), '-', '') || ':' || CAST(fence AS text) IN (SELECT json_array_elements_text(CAST($4 AS json)))) OR (detached = FALSE AND NOT replace(CAST(id AS text), '-', '') || ':' || CAST(fence AS text) IN (SELECT json_array_elements_text(CAST($4 AS json))) AND lease_expires_ms <= CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT))) RETURNING id)
SELECT id, fence
FROM sessions
WHERE owner = $1 AND status = $3 AND replace(CAST(id AS text), '-', '') || ':' || CAST(fence AS text) IN (SELECT json_array_elements_text(CAST($4 AS json)));

-- CLAIM_EVENTS (built from the dialect)
UPDATE webhook_outbox
SET attempts = attempts + 1, claimed_by = $1, claim_until_ms = CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT) + $2
WHERE (session_id, revision, fence, kind) IN (SELECT s.session_id, s.revision, s.fence, s.kind FROM webhook_outbox s WHERE s.delivered_ms IS NULL AND s.due_ms <= CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT) AND (s.claim_until_ms IS NULL OR s.claim_until_ms <= CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT)) ORDER BY s.created_ms LIMIT $3 FOR UPDATE OF s SKIP LOCKED)
RETURNING session_id, incident_id, revision, fence, kind, status, exit_reason, created_ms, attempts;

-- EVENT_DELIVERED (built from the dialect)
UPDATE webhook_outbox
SET delivered_ms = CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT), claim_until_ms = NULL
WHERE session_id = $1 AND revision = $2 AND fence = $3 AND kind = $4 AND delivered_ms IS NULL;

-- EVENT_FAILED (built from the dialect)
UPDATE webhook_outbox
SET due_ms = CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT) + $6, claimed_by = NULL, claim_until_ms = NULL, last_error = $7
WHERE session_id = $1 AND revision = $2 AND fence = $3 AND kind = $4 AND claimed_by = $5 AND delivered_ms IS NULL;

-- SET_SESSION_BUDGET (budgets)
INSERT INTO budgets (scope, scope_id, max_input_tokens, max_output_tokens, max_tokens, max_cost_micros, max_wall_ms)
SELECT $1, $2, $3, $4, $5, $6, $7
WHERE EXISTS (SELECT 1 FROM sessions WHERE id = $2)
ON CONFLICT (scope, scope_id) DO
UPDATE
SET max_input_tokens = excluded.max_input_tokens, max_output_tokens = excluded.max_output_tokens, max_tokens = excluded.max_tokens, max_cost_micros = excluded.max_cost_micros, max_wall_ms = excluded.max_wall_ms
RETURNING scope, scope_id, max_input_tokens, max_output_tokens, max_tokens, max_cost_micros, max_wall_ms, spent_input_tokens, spent_output_tokens, spent_cost_micros, spent_wall_ms;

-- SET_INCIDENT_BUDGET (budgets)
INSERT INTO budgets (scope, scope_id, max_input_tokens, max_output_tokens, max_tokens, max_cost_micros, max_wall_ms)
SELECT $1, $2, $3, $4, $5, $6, $7
WHERE EXISTS (SELECT 1 FROM incidents WHERE id = $2)
ON CONFLICT (scope, scope_id) DO
UPDATE
SET max_input_tokens = excluded.max_input_tokens, max_output_tokens = excluded.max_output_tokens, max_tokens = excluded.max_tokens, max_cost_micros = excluded.max_cost_micros, max_wall_ms = excluded.max_wall_ms
RETURNING scope, scope_id, max_input_tokens, max_output_tokens, max_tokens, max_cost_micros, max_wall_ms, spent_input_tokens, spent_output_tokens, spent_cost_micros, spent_wall_ms;

-- GET_BUDGET (budgets)
SELECT scope, scope_id, max_input_tokens, max_output_tokens, max_tokens, max_cost_micros, max_wall_ms, spent_input_tokens, spent_output_tokens, spent_cost_micros, spent_wall_ms
FROM budgets
WHERE scope = $1 AND scope_id = $2;

-- SPEND (budgets)
UPDATE budgets
SET spent_input_tokens = spent_input_tokens + $3, spent_output_tokens = spent_output_tokens + $4, spent_cost_micros = spent_cost_micros + $5, spent_wall_ms = spent_wall_ms + $6
WHERE (scope = 'session' AND scope_id = $1) OR (scope = 'incident' AND scope_id = $2)
RETURNING scope, scope_id, max_input_tokens, max_output_tokens, max_tokens, max_cost_micros, max_wall_ms, spent_input_tokens, spent_output_tokens, spent_cost_micros, spent_wall_ms;
