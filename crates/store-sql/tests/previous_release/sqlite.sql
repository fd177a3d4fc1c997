-- The statements korvus-store-sql ran on SQLite in the release before
-- resumes (F26), as its snapshot rendered them: `previous_release.rs` runs
-- that release's orphan and claim statements against today's schema. Never
-- regenerated.
-- Only the two statements the test runs are kept.

-- EXPIRED_LEASES (built from the dialect)
SELECT id, fence
FROM sessions
WHERE status = 'running' AND (exit_reason IS NULL OR exit_reason <> 'awaiting_user') AND (owner IS NOT NULL OR started_at IS NOT NULL) AND (lease_expires_ms IS NULL OR lease_expires_ms <= CAST(unixepoch('subsec') * 1000 AS INTEGER)) AND (owner IS NULL OR detached = TRUE OR NOT EXISTS (SELECT 1 FROM owners AS o WHERE o.id = sessions.owner AND o.expires_ms > CAST(unixepoch('subsec') * 1000 AS INTEGER)));

-- CLAIM_NEXT (built from the dialect)
UPDATE sessions
SET owner = $2, lease_expires_ms = CAST(unixepoch('subsec') * 1000 AS INTEGER) + $3, detached = FALSE, fence = fence + 1
WHERE id = (SELECT s.id FROM sessions AS s LEFT JOIN (SELECT COALESCE(o.queue_key, hex(o.incident_id)) AS k, count(*) AS n FROM sessions AS o WHERE o.pool = $1 AND o.owner IS NOT NULL AND o.status = 'running' AND (o.exit_reason IS NULL OR o.exit_reason <> 'awaiting_user') GROUP BY COALESCE(o.queue_key, hex(o.incident_id))) AS b ON b.k = COALESCE(s.queue_key, hex(s.incident_id)) LEFT JOIN queue_keys AS q ON q.pool = s.pool AND q.queue_key = COALESCE(s.queue_key, hex(s.incident_id)) WHERE s.pool = $1 AND s.status = 'running' AND (s.exit_reason IS NULL OR s.exit_reason <> 'awaiting_user') AND s.owner IS NULL AND s.started_at IS NULL ORDER BY s.priority DESC, COALESCE(b.n, 0), COALESCE(q.last_claimed_ms, 0), s.queued_ms, s.id LIMIT 1) AND owner IS NULL AND started_at IS NULL AND status = 'running' AND (exit_reason IS NULL OR exit_reason <> 'awaiting_user')
RETURNING id, incident_id, seq, kind, status, prompt, workspace_repo, workspace_commit, exit_reason, turns, tool_calls, input_tokens, output_tokens, revision, fence, cancel_fence, owner, COALESCE((SELECT o.expires_ms FROM owners AS o WHERE o.id = sessions.owner AND o.expires_ms > sessions.lease_expires_ms AND sessions.detached = FALSE), lease_expires_ms) AS lease_expires_ms, created_at, ended_at, started_at, pool, priority, queue_key, idempotency_key;
