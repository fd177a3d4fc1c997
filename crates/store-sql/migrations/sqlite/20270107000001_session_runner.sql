-- F27: what runs a session, as its creator described it (the CLI records
-- its agent options, so `korvus reopen` and `reply` need no `--agent`).
-- Opaque to korvus, at most 4 KiB, never a secret; NULL for older rows.

ALTER TABLE sessions ADD COLUMN runner TEXT;
