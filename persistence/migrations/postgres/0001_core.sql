-- qflow core schema for the PostgreSQL store (SPEC R1, R4, R5, O1a, O4).
-- Outbox, correlation and pull-task tables come with their own issues, as later
-- numbered migrations; nothing here is created before it is used.

CREATE TABLE deployments (
    -- The deployment version: assigned here, increasing, never reused (gaps are possible).
    id             BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    process_id     TEXT    NOT NULL,
    content_hash   TEXT    NOT NULL UNIQUE,
    source         TEXT    NOT NULL,
    deployed_at_ms BIGINT  NOT NULL,
    retired        BOOLEAN NOT NULL DEFAULT FALSE
);

CREATE TABLE instances (
    id            UUID    PRIMARY KEY,
    deployment    BIGINT  NOT NULL REFERENCES deployments (id),
    -- The fencing token: every applied commit moves it by one (compare-and-swap).
    fence         BIGINT  NOT NULL CHECK (fence >= 1),
    status        TEXT    NOT NULL CHECK (status IN ('running', 'completed', 'failed', 'cancelled')),
    failure_code  TEXT,
    snapshot      BYTEA   NOT NULL,
    created_at_ms BIGINT  NOT NULL,
    updated_at_ms BIGINT  NOT NULL
);

-- Retirement checks and operator filters go by deployment and status.
CREATE INDEX instances_deployment_status ON instances (deployment, status);
CREATE INDEX instances_status ON instances (status, failure_code);
CREATE INDEX instances_created ON instances (created_at_ms, id);

CREATE TABLE timers (
    instance        UUID    NOT NULL REFERENCES instances (id),
    name            TEXT    NOT NULL,
    due_at_ms       BIGINT  NOT NULL,
    incarnation     BIGINT  NOT NULL,
    lease_owner     TEXT,
    leased_until_ms BIGINT,
    PRIMARY KEY (instance, name)
);

-- The poller walks this index from the start and stops at the first timer not yet due:
-- its cost grows with due timers, never with parked ones (SPEC R3).
CREATE INDEX timers_due ON timers (due_at_ms);

CREATE TABLE incidents (
    id             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    instance       UUID   NOT NULL REFERENCES instances (id),
    node           TEXT   NOT NULL,
    code           TEXT   NOT NULL,
    message        TEXT   NOT NULL,
    opened_at_ms   BIGINT NOT NULL,
    resolved_at_ms BIGINT
);

CREATE INDEX incidents_instance_node ON incidents (instance, node);

-- Attempt history (O1a): beside the instance, never in the snapshot. No uniqueness on
-- (instance, node, attempt): an operator's resume with a reset budget counts from 1 again.
CREATE TABLE attempts (
    id             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    instance       UUID   NOT NULL REFERENCES instances (id),
    node           TEXT   NOT NULL,
    attempt        BIGINT NOT NULL CHECK (attempt >= 0),
    started_at_ms  BIGINT NOT NULL,
    finished_at_ms BIGINT NOT NULL,
    outcome        TEXT   NOT NULL,
    code           TEXT,
    message        TEXT
);

CREATE INDEX attempts_instance ON attempts (instance, id);
