-- F11: the fence of the run that wrote a report row. The row is written
-- only while that fence is the session's, so a superseded run cannot land a
-- report after a newer run took the session over; recorded so stale writes
-- could be counted afterwards. Rows written before this migration: 1.

ALTER TABLE reports ADD COLUMN fence BIGINT NOT NULL DEFAULT 1;
