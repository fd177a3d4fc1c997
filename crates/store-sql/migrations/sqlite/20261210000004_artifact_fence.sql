-- F11: the fence of the run that wrote an artifact row. A batch is written
-- only while every row's session is at its fence (checked in the insert's
-- transaction), so a superseded run cannot add rows after a newer run took
-- the session over; recorded so stale writes could be counted afterwards.
-- Rows written before this migration: 1.

ALTER TABLE artifacts ADD COLUMN fence INTEGER NOT NULL DEFAULT 1;
