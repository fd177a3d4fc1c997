-- F19: a claim counts the runs in progress of its pool per key. They are
-- few (at most the running slots of the pool's managers) among all the
-- pool's sessions, which grow with history: index only them.
CREATE INDEX sessions_in_progress ON sessions (pool)
    WHERE status = 'running' AND owner IS NOT NULL;
