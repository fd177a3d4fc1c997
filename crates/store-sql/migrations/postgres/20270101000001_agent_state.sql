-- F20: an agent's own state kept with a revision (the thread a real agent
-- resumes from), a kind of artifact of its own: harvested, restored and
-- swept like any artifact, never served by the HTTP artifact routes.

ALTER TABLE artifacts DROP CONSTRAINT artifacts_kind_check;
ALTER TABLE artifacts ADD CONSTRAINT artifacts_kind_check
    CHECK (kind IN ('report', 'agent_output', 'workspace_archive', 'upload', 'agent_state'));
