-- F24: checkpoints while a run goes. A file of the running revision stored
-- mid-run is an artifact of a kind of its own, `checkpoint`: superseded by
-- the next checkpoint of its path, promoted to `agent_output` or `report`
-- when the run lands, never served to users, never restored by a reopen.
--
-- SQLite keeps a CHECK in the table's definition, so the table is rebuilt
-- as 20270101000001_agent_state.sql rebuilt it (new table, copy, drop,
-- rename, inside the migration's transaction with foreign keys on), the
-- context refs set aside first and put back after.

CREATE TEMP TABLE context_refs_kept AS SELECT * FROM session_context_refs;
DELETE FROM session_context_refs;

CREATE TABLE artifacts_new (
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
    fence        INTEGER NOT NULL DEFAULT 1,
    CONSTRAINT artifacts_pkey PRIMARY KEY (id),
    CONSTRAINT artifacts_id_check CHECK (length(id) = 16),
    -- The target of session_context_refs_artifact_fk.
    CONSTRAINT artifacts_incident_id_key UNIQUE (incident_id, id),
    CONSTRAINT artifacts_session_fk FOREIGN KEY (incident_id, session_id)
        REFERENCES sessions (incident_id, id),
    CONSTRAINT artifacts_kind_check
        CHECK (kind IN ('report', 'agent_output', 'workspace_archive', 'upload', 'agent_state',
                        'checkpoint')),
    CONSTRAINT artifacts_size_bytes_check CHECK (size_bytes >= 0),
    CONSTRAINT artifacts_sha256_check
        CHECK (length(sha256) = 64 AND sha256 NOT GLOB '*[^0-9a-f]*'),
    CONSTRAINT artifacts_revision_check CHECK (revision BETWEEN 1 AND 2147483647)
) STRICT;

INSERT INTO artifacts_new
    (id, incident_id, session_id, kind, path, blob_key, content_type,
     size_bytes, sha256, revision, created_at, fence)
SELECT id, incident_id, session_id, kind, path, blob_key, content_type,
       size_bytes, sha256, revision, created_at, fence
FROM artifacts;

DROP TABLE artifacts;
ALTER TABLE artifacts_new RENAME TO artifacts;
CREATE INDEX artifacts_session_idx ON artifacts (session_id, id);

INSERT INTO session_context_refs SELECT * FROM context_refs_kept;
DROP TABLE context_refs_kept;
