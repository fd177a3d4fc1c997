-- F13: the report row references its iteration's harvest manifest (what
-- the persist phase stored, left out and failed, and whether the rows were
-- written), so `korvus show` and the orphan-blob sweeper find it. Nullable:
-- no phase ran, the manifest could not be stored, or the row predates this
-- migration. Length and NUL bytes are checked by korvus_store::validate.

ALTER TABLE reports ADD COLUMN manifest_key TEXT;
