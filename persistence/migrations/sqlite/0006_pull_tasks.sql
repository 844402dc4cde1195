-- Pull tasks (issue 11, SPEC P1): one row per pull task offered to external workers,
-- written by the step that offers, locks or withdraws it, in the step's transaction.
-- The snapshot holds the lock; the row mirrors it so that a fetch finds offered work by
-- topic without reading snapshots. A row exists while a token waits at the task outside
-- a backoff window; `worker` is NULL while it is offered to anyone.
CREATE TABLE pull_tasks (
    instance      TEXT    NOT NULL REFERENCES instances (id),
    node          TEXT    NOT NULL,
    topic         TEXT    NOT NULL,
    attempt       INTEGER NOT NULL CHECK (attempt >= 1),
    worker        TEXT,
    lock_until_ms INTEGER,
    offered_at_ms INTEGER NOT NULL,
    PRIMARY KEY (instance, node)
) WITHOUT ROWID;

-- A fetch walks the offered rows of its topics oldest first and stops at its limit: its
-- cost grows with offered rows of those topics, never with locked ones (partial index).
CREATE INDEX pull_tasks_offered ON pull_tasks (topic, offered_at_ms, instance, node)
    WHERE worker IS NULL;

-- The worker that held a pull task's attempt, in the attempt history (O1a); NULL for
-- every other task.
ALTER TABLE attempts ADD COLUMN worker TEXT;
