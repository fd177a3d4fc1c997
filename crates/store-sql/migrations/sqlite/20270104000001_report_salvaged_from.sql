-- F24: where a revision's output was salvaged from when the run that made
-- it did not land it itself (its manager died and another one landed the
-- dead run's scratch dir): "the scratch dir … of manager …". Kept apart
-- from `detail`, which keeps the cause. Nullable: NULL is a revision its
-- own run landed, and rows written before this migration stay valid; a
-- replica of the previous release neither reads nor writes it. Length and
-- NUL bytes are checked by korvus_store::validate, like `detail`.

ALTER TABLE reports ADD COLUMN salvaged_from TEXT;
