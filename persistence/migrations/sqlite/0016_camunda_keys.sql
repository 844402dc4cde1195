-- Camunda 8 keys (issue 28, `docs/workers.md` "Keys"): the 64-bit integer that Camunda's
-- API names a process instance, an element instance, a job, a user task, an incident or
-- a variable by, given to a qflow name (instance UUID, kind, activity-instance key or
-- other name, attempt) the first time the `/v2` surface hands it out, and read back by
-- key in one primary-key lookup. Given only by that surface; a commit that withdraws a
-- pull task or a user task deletes that task's job or user-task keys (the next offer
-- there gets its own).
--
-- AUTOINCREMENT, so a key is never handed out twice, not even after retention purged the
-- highest row (a client may still hold it); the sequence starts at Zeebe's first key of
-- partition 1, (1 << 51) | 1 = 2251799813685249, as qflow_store::CAMUNDA_KEY_FIRST.
CREATE TABLE camunda_keys (
    key      INTEGER PRIMARY KEY AUTOINCREMENT,
    instance TEXT    NOT NULL,
    kind     TEXT    NOT NULL CHECK (kind IN ('instance', 'element', 'job', 'user_task', 'incident', 'variable')),
    node     TEXT    NOT NULL,
    attempt  INTEGER NOT NULL CHECK (attempt >= 0)
);

-- One key per name, and a purge's deletes by instance.
CREATE UNIQUE INDEX camunda_keys_name ON camunda_keys (instance, kind, node, attempt);

INSERT INTO sqlite_sequence (name, seq) VALUES ('camunda_keys', 2251799813685248);
