-- F19: one row per pool and queue key that ever had a session claimed.
-- `last_claimed_ms` (the database clock) makes keys take turns: of keys
-- with as few runs in progress, the one claimed longest ago goes first,
-- even when runs do not overlap. A claim with a per-key cap also takes its
-- key's row with a row lock until it commits, so the claims of one key run
-- one at a time and the count of the key's runs it makes under the lock is
-- exact across replicas.
CREATE TABLE queue_keys (
    pool text NOT NULL,
    queue_key text NOT NULL,
    last_claimed_ms bigint,
    PRIMARY KEY (pool, queue_key)
);
