-- F22: sessions can be deleted (retention), so an incident's next `seq`
-- can no longer be read off its sessions (`MAX(seq) + 1` would hand out
-- a pruned session's number again). Like PostgreSQL, SQLite now keeps the
-- highest seq handed out on the incident; a trigger raises it with every
-- insert, and the insert numbers from it.

ALTER TABLE incidents ADD COLUMN last_seq INTEGER NOT NULL DEFAULT 0;

UPDATE incidents
SET last_seq = (SELECT COALESCE(MAX(seq), 0) FROM sessions WHERE incident_id = incidents.id);

CREATE TRIGGER sessions_last_seq
    AFTER INSERT ON sessions
    FOR EACH ROW
BEGIN
    UPDATE incidents SET last_seq = NEW.seq WHERE id = NEW.incident_id AND last_seq < NEW.seq;
END;
