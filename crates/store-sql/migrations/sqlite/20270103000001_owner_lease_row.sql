-- F23: the owner-level lease. A manager incarnation's lease is one row of
-- `owners`, renewed by its heartbeat, instead of one renewal per session
-- row: at 10,000 runs a beat writes one row, not 10,000.
--
-- `sessions.lease_expires_ms` keeps the claim's own expiry (written when a
-- run is claimed: create, continue, queue claim, takeover) and is no longer
-- renewed. A session is held while its claim has not expired, or while its
-- owner's row is live and the owner has not released it (`detached`): a
-- heartbeat releases the rows its owner holds but no longer lists once
-- their claim expired, and takes back a listed one. A running, owned
-- session that is neither is an orphan.
--
-- Upgrade note: replicas of an earlier release renew session rows and judge
-- orphans by `lease_expires_ms` alone, so they would take over the runs of
-- a replica of this release. Stop every replica of an earlier release
-- before starting one of this release on the same database.

CREATE TABLE owners (
    id BLOB PRIMARY KEY NOT NULL,
    expires_ms INTEGER NOT NULL
) STRICT;

ALTER TABLE sessions ADD COLUMN detached INTEGER NOT NULL DEFAULT 0;
