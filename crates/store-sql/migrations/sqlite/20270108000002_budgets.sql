-- F29: budgets. A cap on what one session (all its revisions) or all
-- sessions of an incident may spend — input, output and total tokens, a
-- cost in millionths of the embedder's currency, wall time of the runs —
-- and what was spent against it. One row per scope; a metered model call
-- adds to the rows of its session and incident in one UPDATE, so replicas
-- spending at once are all counted. No foreign key: prune deletes
-- sessions without knowing of budgets; a row left behind is never read.

CREATE TABLE budgets (
    scope               TEXT   NOT NULL,
    scope_id            BLOB   NOT NULL,
    max_input_tokens    INTEGER,
    max_output_tokens   INTEGER,
    max_tokens          INTEGER,
    max_cost_micros     INTEGER,
    max_wall_ms         INTEGER,
    spent_input_tokens  INTEGER NOT NULL DEFAULT 0,
    spent_output_tokens INTEGER NOT NULL DEFAULT 0,
    spent_cost_micros   INTEGER NOT NULL DEFAULT 0,
    spent_wall_ms       INTEGER NOT NULL DEFAULT 0,
    CONSTRAINT budgets_pkey PRIMARY KEY (scope, scope_id),
    CONSTRAINT budgets_scope_check CHECK (scope IN ('session', 'incident'))
);
