-- korvus schema, SQLite (ARCHITECTURE §7). Same tables, columns and
-- constraint names as migrations/postgres; the differences:
--
-- * UUIDs are 16-byte BLOBs and timestamps RFC 3339 TEXT (sqlx's encodings).
-- * Tables are STRICT, so a column holds only its declared type.
-- * No last_seq / context_ref_count counters: SQLite has one writer at a
--   time and a write statement holds the write lock from its first read, so
--   `MAX(...) + 1` inside the inserting statement is race-free.
-- * SQLite does not report which foreign key failed; the store knows from
--   the statement (see src/error.rs).
--
-- Connections must run with PRAGMA foreign_keys = ON (korvus_store_sql::migrate
-- checks it).

CREATE TABLE incidents (
    id               BLOB NOT NULL,
    title            TEXT NOT NULL,
    status           TEXT NOT NULL,
    workspace_repo   TEXT,
    workspace_commit TEXT,
    created_at       TEXT NOT NULL,
    CONSTRAINT incidents_pkey PRIMARY KEY (id),
    CONSTRAINT incidents_id_check CHECK (length(id) = 16),
    CONSTRAINT incidents_status_check CHECK (status IN ('open', 'closed')),
    CONSTRAINT incidents_workspace_check
        CHECK ((workspace_repo IS NULL) = (workspace_commit IS NULL))
) STRICT;

CREATE TABLE sessions (
    id               BLOB    NOT NULL,
    incident_id      BLOB    NOT NULL,
    seq              INTEGER NOT NULL,
    kind             TEXT    NOT NULL,
    status           TEXT    NOT NULL,
    prompt           TEXT    NOT NULL,
    workspace_repo   TEXT,
    workspace_commit TEXT,
    -- Free text: the session layer owns the vocabulary.
    exit_reason      TEXT,
    turns            INTEGER NOT NULL DEFAULT 0,
    tool_calls       INTEGER NOT NULL DEFAULT 0,
    input_tokens     INTEGER NOT NULL DEFAULT 0,
    output_tokens    INTEGER NOT NULL DEFAULT 0,
    revision         INTEGER NOT NULL DEFAULT 1,
    created_at       TEXT    NOT NULL,
    ended_at         TEXT,
    CONSTRAINT sessions_pkey PRIMARY KEY (id),
    CONSTRAINT sessions_id_check CHECK (length(id) = 16),
    -- The target of the composite foreign keys below.
    CONSTRAINT sessions_incident_id_key UNIQUE (incident_id, id),
    CONSTRAINT sessions_incident_seq_key UNIQUE (incident_id, seq),
    CONSTRAINT sessions_incident_fk FOREIGN KEY (incident_id) REFERENCES incidents (id),
    CONSTRAINT sessions_seq_check CHECK (seq >= 1),
    CONSTRAINT sessions_kind_check CHECK (kind IN ('initial', 'follow_up')),
    CONSTRAINT sessions_status_check
        CHECK (status IN ('running', 'completed', 'failed', 'cancelled')),
    CONSTRAINT sessions_ended_at_check CHECK ((ended_at IS NULL) = (status = 'running')),
    CONSTRAINT sessions_workspace_check
        CHECK ((workspace_repo IS NULL) = (workspace_commit IS NULL)),
    CONSTRAINT sessions_counters_check
        CHECK (turns >= 0 AND tool_calls >= 0 AND input_tokens >= 0 AND output_tokens >= 0),
    CONSTRAINT sessions_revision_check CHECK (revision BETWEEN 1 AND 2147483647)
) STRICT;

CREATE TABLE reports (
    session_id     BLOB    NOT NULL,
    incident_id    BLOB    NOT NULL,
    revision       INTEGER NOT NULL,
    markdown_key   TEXT,
    markdown_bytes INTEGER NOT NULL,
    exit_reason    TEXT    NOT NULL,
    turns          INTEGER NOT NULL,
    tool_calls     INTEGER NOT NULL,
    input_tokens   INTEGER NOT NULL,
    output_tokens  INTEGER NOT NULL,
    created_at     TEXT    NOT NULL,
    CONSTRAINT reports_pkey PRIMARY KEY (session_id, revision),
    CONSTRAINT reports_session_fk FOREIGN KEY (incident_id, session_id)
        REFERENCES sessions (incident_id, id),
    CONSTRAINT reports_revision_check CHECK (revision BETWEEN 1 AND 2147483647),
    CONSTRAINT reports_markdown_bytes_check CHECK (markdown_bytes >= 0),
    CONSTRAINT reports_counters_check
        CHECK (turns >= 0 AND tool_calls >= 0 AND input_tokens >= 0 AND output_tokens >= 0)
) STRICT;

CREATE TABLE artifacts (
    id           BLOB    NOT NULL,
    incident_id  BLOB    NOT NULL,
    session_id   BLOB    NOT NULL,
    kind         TEXT    NOT NULL,
    path         TEXT    NOT NULL,
    blob_key     TEXT    NOT NULL,
    content_type TEXT    NOT NULL,
    size_bytes   INTEGER NOT NULL,
    sha256       TEXT    NOT NULL,
    revision     INTEGER NOT NULL,
    created_at   TEXT    NOT NULL,
    CONSTRAINT artifacts_pkey PRIMARY KEY (id),
    CONSTRAINT artifacts_id_check CHECK (length(id) = 16),
    -- The target of session_context_refs_artifact_fk.
    CONSTRAINT artifacts_incident_id_key UNIQUE (incident_id, id),
    CONSTRAINT artifacts_session_fk FOREIGN KEY (incident_id, session_id)
        REFERENCES sessions (incident_id, id),
    CONSTRAINT artifacts_kind_check
        CHECK (kind IN ('report', 'agent_output', 'workspace_archive', 'upload')),
    CONSTRAINT artifacts_size_bytes_check CHECK (size_bytes >= 0),
    CONSTRAINT artifacts_sha256_check
        CHECK (length(sha256) = 64 AND sha256 NOT GLOB '*[^0-9a-f]*'),
    CONSTRAINT artifacts_revision_check CHECK (revision BETWEEN 1 AND 2147483647)
) STRICT;

CREATE INDEX artifacts_session_idx ON artifacts (session_id, id);

CREATE TABLE session_context_refs (
    session_id  BLOB    NOT NULL,
    incident_id BLOB    NOT NULL,
    artifact_id BLOB    NOT NULL,
    role        TEXT    NOT NULL,
    -- 0-based request order; listing sorts by it.
    position    INTEGER NOT NULL,
    CONSTRAINT session_context_refs_pkey PRIMARY KEY (session_id, position),
    CONSTRAINT session_context_refs_artifact_key UNIQUE (session_id, artifact_id),
    -- Both keys carry incident_id: a ref can only join a session and an
    -- artifact of one incident. The database refuses anything else.
    CONSTRAINT session_context_refs_session_fk FOREIGN KEY (incident_id, session_id)
        REFERENCES sessions (incident_id, id),
    CONSTRAINT session_context_refs_artifact_fk FOREIGN KEY (incident_id, artifact_id)
        REFERENCES artifacts (incident_id, id),
    CONSTRAINT session_context_refs_position_check CHECK (position BETWEEN 0 AND 2147483647)
) STRICT;

CREATE INDEX session_context_refs_artifact_idx ON session_context_refs (incident_id, artifact_id);

-- Turn logs (korvus_log::TurnLog): header and events as the exact JSON text
-- serde_json wrote, so export is byte-identical to the other backends.
CREATE TABLE turn_logs (
    id          BLOB    NOT NULL,
    header      TEXT    NOT NULL,
    -- Events stored; also the revision token (it changes on append only).
    event_count INTEGER NOT NULL DEFAULT 0,
    -- Length of the exported JSONL (header line plus event lines).
    size_bytes  INTEGER NOT NULL,
    CONSTRAINT turn_logs_pkey PRIMARY KEY (id),
    CONSTRAINT turn_logs_id_check CHECK (length(id) = 16),
    CONSTRAINT turn_logs_event_count_check CHECK (event_count >= 0),
    CONSTRAINT turn_logs_size_bytes_check CHECK (size_bytes >= 0)
) STRICT;

CREATE TABLE turn_events (
    log_id BLOB    NOT NULL,
    -- 0-based, contiguous per log.
    seq    INTEGER NOT NULL,
    body   TEXT    NOT NULL,
    CONSTRAINT turn_events_pkey PRIMARY KEY (log_id, seq),
    CONSTRAINT turn_events_log_fk FOREIGN KEY (log_id) REFERENCES turn_logs (id),
    CONSTRAINT turn_events_seq_check CHECK (seq >= 0)
) STRICT;
