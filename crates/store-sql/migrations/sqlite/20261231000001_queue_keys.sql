-- F19: one row per pool and queue key that ever had a session claimed.
-- `last_claimed_ms` (the database clock) makes keys take turns: of keys
-- with as few runs in progress, the one claimed longest ago goes first,
-- even when runs do not overlap. (SQLite's claims need no lock row: its
-- writes run one at a time.)
CREATE TABLE queue_keys (
    pool TEXT NOT NULL,
    queue_key TEXT NOT NULL,
    last_claimed_ms INTEGER,
    PRIMARY KEY (pool, queue_key)
);
