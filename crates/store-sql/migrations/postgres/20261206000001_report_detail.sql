-- F10: what went wrong while landing an iteration (e.g. the cause-first text
-- of a degraded persist), kept with its report row for the operator.
-- Nullable: NULL means nothing to report, and rows written before this
-- migration stay valid. Length (at most 4 KiB) and NUL bytes are checked by
-- korvus_store::validate before any write, like every other text column.

ALTER TABLE reports ADD COLUMN detail text;
