-- qflow core schema for the embedded SQLite store (SPEC R1, R4, R5, O1a, O4).
-- Outbox, correlation and pull-task tables come with their own issues, as later
-- numbered migrations; nothing here is created before it is used.

CREATE TABLE deployments (
    -- The deployment version: assigned here, increasing, never reused.
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    process_id     TEXT    NOT NULL,
    content_hash   TEXT    NOT NULL UNIQUE,
    source         TEXT    NOT NULL,
    deployed_at_ms INTEGER NOT NULL,
    retired        INTEGER NOT NULL DEFAULT 0 CHECK (retired IN (0, 1))
);

CREATE TABLE instances (
    -- Lowercase hyphenated UUID text, so operators can read it with the sqlite3 shell.
    id            TEXT    PRIMARY KEY NOT NULL,
    deployment    INTEGER NOT NULL REFERENCES deployments (id),
    -- The fencing token: every applied commit moves it by one (compare-and-swap).
    fence         INTEGER NOT NULL CHECK (fence >= 1),
    status        TEXT    NOT NULL CHECK (status IN ('running', 'completed', 'failed', 'cancelled')),
    failure_code  TEXT,
    snapshot      BLOB    NOT NULL,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL
) WITHOUT ROWID;

-- Retirement checks and operator filters go by deployment and status.
CREATE INDEX instances_deployment_status ON instances (deployment, status);
CREATE INDEX instances_status ON instances (status, failure_code);
CREATE INDEX instances_created ON instances (created_at_ms, id);

CREATE TABLE timers (
    instance        TEXT    NOT NULL REFERENCES instances (id),
    name            TEXT    NOT NULL,
    due_at_ms       INTEGER NOT NULL,
    incarnation     INTEGER NOT NULL,
    lease_owner     TEXT,
    leased_until_ms INTEGER,
    PRIMARY KEY (instance, name)
);

-- The poller walks this index from the start and stops at the first timer not yet due:
-- its cost grows with due timers, never with parked ones (SPEC R3).
CREATE INDEX timers_due ON timers (due_at_ms);

CREATE TABLE incidents (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    instance       TEXT    NOT NULL REFERENCES instances (id),
    node           TEXT    NOT NULL,
    code           TEXT    NOT NULL,
    message        TEXT    NOT NULL,
    opened_at_ms   INTEGER NOT NULL,
    resolved_at_ms INTEGER
);

CREATE INDEX incidents_instance_node ON incidents (instance, node);

-- Attempt history (O1a): beside the instance, never in the snapshot. No uniqueness on
-- (instance, node, attempt): an operator's resume with a reset budget counts from 1 again.
CREATE TABLE attempts (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    instance       TEXT    NOT NULL REFERENCES instances (id),
    node           TEXT    NOT NULL,
    attempt        INTEGER NOT NULL CHECK (attempt >= 0),
    started_at_ms  INTEGER NOT NULL,
    finished_at_ms INTEGER NOT NULL,
    outcome        TEXT    NOT NULL,
    code           TEXT,
    message        TEXT
);

CREATE INDEX attempts_instance ON attempts (instance, id);
