-- F24: checkpoints while a run goes. A file of the running revision stored
-- mid-run is an artifact of a kind of its own, `checkpoint`: superseded by
-- the next checkpoint of its path, promoted to `agent_output` or `report`
-- when the run lands, never served to users, never restored by a reopen.

ALTER TABLE artifacts DROP CONSTRAINT artifacts_kind_check;
ALTER TABLE artifacts ADD CONSTRAINT artifacts_kind_check
    CHECK (kind IN ('report', 'agent_output', 'workspace_archive', 'upload', 'agent_state',
                    'checkpoint'));
