-- F19: per-key caps. A claim with a per-key cap takes its key's row here
-- (made on first use) with a row lock until it commits, so the claims of
-- one key run one at a time and the count of the key's runs it makes
-- under the lock is exact across replicas. SQLite needs none: its writes
-- run one at a time. One row per pool and key ever capped.
CREATE TABLE queue_keys (
    pool text NOT NULL,
    queue_key text NOT NULL,
    PRIMARY KEY (pool, queue_key)
);
