-- F26: a session outlives its replica. A takeover (or a hand-off) may send
-- an interrupted run back to its pool to be resumed instead of settling it
-- `owner_lost`: the row stays running, keeps `started_at`, counts the next
-- `attempt` and waits (`resume_pending`) until `resume_after_ms` for any
-- manager of its pool to claim it like a queued row.
--
-- Replicas of an earlier release must never take such a row over (they
-- would settle it `owner_lost`) nor claim it (they would start the revision
-- afresh): while a resume is pending the row is owned by a reserved owner
-- whose `owners` row never expires and its claim expires in 9999, so to
-- them it is a live run of someone else's. They count it as a run in
-- progress of its key (a per-key cap may hold one more claim back).
--
-- Upgrade note: replicas of this release and of the previous one may share
-- the database; only this release resumes. A continue starts the new
-- revision at attempt 1.

ALTER TABLE sessions ADD COLUMN attempt INTEGER NOT NULL DEFAULT 1;
ALTER TABLE sessions ADD COLUMN resume_pending BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE sessions ADD COLUMN resume_after_ms BIGINT;
ALTER TABLE sessions ADD CONSTRAINT sessions_attempt_check CHECK (attempt >= 1);

INSERT INTO owners (id, expires_ms)
VALUES ('00000000-0000-0000-0000-00000000f026', 253402300799999)
ON CONFLICT (id) DO UPDATE SET expires_ms = EXCLUDED.expires_ms;

CREATE INDEX sessions_resume_pending ON sessions (pool) WHERE resume_pending;
