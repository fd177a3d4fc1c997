-- F11: the newest writer epoch a turn log has seen. A writer claims an
-- epoch (the session layer uses the fence of the run that writes) when it
-- opens the log; a claim older than this is refused, and so is every
-- append of a writer whose epoch is older — checked inside the append's
-- write transaction. Existing logs start at 0 (no epoch). Same column as
-- migrations/postgres (INTEGER: the table is STRICT).

ALTER TABLE turn_logs ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0;
