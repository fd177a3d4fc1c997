-- F11: the owner of a session's current run and its lease. `owner` is the
-- manager incarnation that runs it (minted at every build, never reused);
-- `lease_expires_ms` is when its lease lapses unless renewed, in
-- milliseconds since the Unix epoch by the DATABASE's clock (both are
-- written and compared only by statements that read now() on the server,
-- so replicas' clocks never matter). Both are NULL while the session is
-- terminal or idle; a running row without them is an orphan (rows of a
-- process that predates leases count as orphans too). The partial index
-- keeps the heartbeat (by owner) and the reaper (by expiry) cheap.

ALTER TABLE sessions ADD COLUMN owner UUID;
ALTER TABLE sessions ADD COLUMN lease_expires_ms BIGINT;
CREATE INDEX sessions_owner ON sessions (owner) WHERE owner IS NOT NULL;
CREATE INDEX sessions_running_lease ON sessions (lease_expires_ms) WHERE status = 'running';
