-- F11: the fence of a session's current run. 1 at create; every transition
-- that starts a new run (reopen, resume of an idle session) increments it,
-- and a settlement writes only when it presents the current fence, so a
-- superseded run's late write changes nothing. Existing rows start at 1.
-- Same column as migrations/postgres (INTEGER: the table is STRICT).

ALTER TABLE sessions ADD COLUMN fence INTEGER NOT NULL DEFAULT 1;
