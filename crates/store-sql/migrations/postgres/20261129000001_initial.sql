-- korvus schema, PostgreSQL (ARCHITECTURE §7).
--
-- Constraint names are part of the contract: the store reports a refused
-- foreign key by its name (korvus_store::constraint), so do not rename them.
-- Text columns are `text`: lengths and NUL bytes are checked by
-- korvus_store::validate before any write, identically on every backend.

CREATE TABLE incidents (
    id               uuid        NOT NULL,
    title            text        NOT NULL,
    status           text        NOT NULL,
    workspace_repo   text,
    workspace_commit text,
    -- Highest session seq handed out: create_session bumps it under the row
    -- lock, which makes seq allocation race-free and gap-free.
    last_seq         bigint      NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL,
    CONSTRAINT incidents_pkey PRIMARY KEY (id),
    CONSTRAINT incidents_status_check CHECK (status IN ('open', 'closed')),
    CONSTRAINT incidents_workspace_check
        CHECK ((workspace_repo IS NULL) = (workspace_commit IS NULL)),
    CONSTRAINT incidents_last_seq_check CHECK (last_seq >= 0)
);

CREATE TABLE sessions (
    id                uuid        NOT NULL,
    incident_id       uuid        NOT NULL,
    seq               bigint      NOT NULL,
    kind              text        NOT NULL,
    status            text        NOT NULL,
    prompt            text        NOT NULL,
    workspace_repo    text,
    workspace_commit  text,
    -- Free text: the session layer owns the vocabulary.
    exit_reason       text,
    turns             bigint      NOT NULL DEFAULT 0,
    tool_calls        bigint      NOT NULL DEFAULT 0,
    input_tokens      bigint      NOT NULL DEFAULT 0,
    output_tokens     bigint      NOT NULL DEFAULT 0,
    revision          integer     NOT NULL DEFAULT 1,
    -- Number of context refs: insert_context_refs bumps it under the row lock
    -- and numbers the new refs after the old ones.
    context_ref_count integer     NOT NULL DEFAULT 0,
    created_at        timestamptz NOT NULL,
    ended_at          timestamptz,
    CONSTRAINT sessions_pkey PRIMARY KEY (id),
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
    CONSTRAINT sessions_revision_check CHECK (revision >= 1),
    CONSTRAINT sessions_context_ref_count_check CHECK (context_ref_count >= 0)
);

CREATE TABLE reports (
    session_id     uuid        NOT NULL,
    incident_id    uuid        NOT NULL,
    revision       integer     NOT NULL,
    markdown_key   text,
    markdown_bytes bigint      NOT NULL,
    exit_reason    text        NOT NULL,
    turns          bigint      NOT NULL,
    tool_calls     bigint      NOT NULL,
    input_tokens   bigint      NOT NULL,
    output_tokens  bigint      NOT NULL,
    created_at     timestamptz NOT NULL,
    CONSTRAINT reports_pkey PRIMARY KEY (session_id, revision),
    CONSTRAINT reports_session_fk FOREIGN KEY (incident_id, session_id)
        REFERENCES sessions (incident_id, id),
    CONSTRAINT reports_revision_check CHECK (revision >= 1),
    CONSTRAINT reports_markdown_bytes_check CHECK (markdown_bytes >= 0),
    CONSTRAINT reports_counters_check
        CHECK (turns >= 0 AND tool_calls >= 0 AND input_tokens >= 0 AND output_tokens >= 0)
);

CREATE TABLE artifacts (
    id           uuid        NOT NULL,
    incident_id  uuid        NOT NULL,
    session_id   uuid        NOT NULL,
    kind         text        NOT NULL,
    path         text        NOT NULL,
    blob_key     text        NOT NULL,
    content_type text        NOT NULL,
    size_bytes   bigint      NOT NULL,
    sha256       text        NOT NULL,
    revision     integer     NOT NULL,
    created_at   timestamptz NOT NULL,
    CONSTRAINT artifacts_pkey PRIMARY KEY (id),
    -- The target of session_context_refs_artifact_fk.
    CONSTRAINT artifacts_incident_id_key UNIQUE (incident_id, id),
    CONSTRAINT artifacts_session_fk FOREIGN KEY (incident_id, session_id)
        REFERENCES sessions (incident_id, id),
    CONSTRAINT artifacts_kind_check
        CHECK (kind IN ('report', 'agent_output', 'workspace_archive', 'upload')),
    CONSTRAINT artifacts_size_bytes_check CHECK (size_bytes >= 0),
    CONSTRAINT artifacts_sha256_check CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    CONSTRAINT artifacts_revision_check CHECK (revision >= 1)
);

CREATE INDEX artifacts_session_idx ON artifacts (session_id, id);

CREATE TABLE session_context_refs (
    session_id  uuid    NOT NULL,
    incident_id uuid    NOT NULL,
    artifact_id uuid    NOT NULL,
    role        text    NOT NULL,
    -- 0-based request order; listing sorts by it.
    position    integer NOT NULL,
    CONSTRAINT session_context_refs_pkey PRIMARY KEY (session_id, position),
    CONSTRAINT session_context_refs_artifact_key UNIQUE (session_id, artifact_id),
    -- Both keys carry incident_id: a ref can only join a session and an
    -- artifact of one incident. The database refuses anything else.
    CONSTRAINT session_context_refs_session_fk FOREIGN KEY (incident_id, session_id)
        REFERENCES sessions (incident_id, id),
    CONSTRAINT session_context_refs_artifact_fk FOREIGN KEY (incident_id, artifact_id)
        REFERENCES artifacts (incident_id, id),
    CONSTRAINT session_context_refs_position_check CHECK (position >= 0)
);

CREATE INDEX session_context_refs_artifact_idx ON session_context_refs (incident_id, artifact_id);

-- Turn logs (korvus_log::TurnLog). Header and events are kept as the exact
-- JSON text serde_json wrote (not jsonb, which would reorder keys and refuse
-- \u0000), so export is byte-identical to the other backends.
CREATE TABLE turn_logs (
    id          uuid   NOT NULL,
    header      text   NOT NULL,
    -- Events stored; also the revision token (it changes on append only).
    event_count bigint NOT NULL DEFAULT 0,
    -- Length of the exported JSONL (header line plus event lines).
    size_bytes  bigint NOT NULL,
    CONSTRAINT turn_logs_pkey PRIMARY KEY (id),
    CONSTRAINT turn_logs_event_count_check CHECK (event_count >= 0),
    CONSTRAINT turn_logs_size_bytes_check CHECK (size_bytes >= 0)
);

CREATE TABLE turn_events (
    log_id uuid   NOT NULL,
    -- 0-based, contiguous per log.
    seq    bigint NOT NULL,
    body   text   NOT NULL,
    CONSTRAINT turn_events_pkey PRIMARY KEY (log_id, seq),
    CONSTRAINT turn_events_log_fk FOREIGN KEY (log_id) REFERENCES turn_logs (id),
    CONSTRAINT turn_events_seq_check CHECK (seq >= 0)
);
