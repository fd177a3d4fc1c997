-- F11: the owner of a session's current run and its lease. `owner` is the
-- manager incarnation that runs it (minted at every build, never reused);
-- `lease_expires_ms` is when its lease lapses unless renewed, in
-- milliseconds since the Unix epoch by the database's clock
-- (unixepoch('subsec'), read by the statements themselves). Both are NULL
-- while the session is terminal or idle; a running row without them is an
-- orphan (rows of a process that predates leases count as orphans too).
-- Same columns as migrations/postgres (BLOB and INTEGER: the table is
-- STRICT).

ALTER TABLE sessions ADD COLUMN owner BLOB;
ALTER TABLE sessions ADD COLUMN lease_expires_ms INTEGER;
CREATE INDEX sessions_owner ON sessions (owner) WHERE owner IS NOT NULL;
CREATE INDEX sessions_running_lease ON sessions (lease_expires_ms) WHERE status = 'running';
