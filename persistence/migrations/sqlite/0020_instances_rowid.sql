-- `instances` becomes an ordinary rowid table (issue 26, SQLite only). It was a WITHOUT
-- ROWID table keyed by its id text, which stores each whole row in a B-tree ordered by
-- id: the ~1,000 instances in flight sat wherever their ids fell, and a commit of a few
-- hundred steps rewrote a leaf page per few instances. A rowid table stores rows in
-- insertion order, so the instances in flight sit together at the end of the table and a
-- commit rewrites fewer, fuller pages; the id stays the key every statement uses, through
-- the unique index its PRIMARY KEY now makes. Measured before this migration with the
-- runtime bench (`cli/benches/runtime.rs --stores=sqlite --no-timers`, interleaved):
-- KiB written per instance 9.3 -> 7.1, instances per second +10 % with one lane and +12 %
-- with four (docs/performance.md, "The instance table in insertion order").
--
-- The rebuild runs inside the transaction sqlx gives every migration, with foreign keys
-- on (they cannot be switched off inside a transaction) but deferred to its commit: the
-- rows are copied aside, the old table is dropped (which leaves the rows of other tables
-- that reference an instance without their parent for a moment), the new table is made
-- under the same name (those tables name it by name), and the rows go back into it in
-- creation order, which gives every reference its parent again before the commit checks
-- them. No table renames: with foreign keys on, SQLite would rewrite the references of
-- the other tables to follow a renamed table. A failure anywhere rolls the whole of it
-- back, and a reference left without its parent fails the commit.
PRAGMA defer_foreign_keys = ON;

CREATE TABLE instances_before_0020 AS SELECT * FROM instances;

DROP TABLE instances;

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
    updated_at_ms INTEGER NOT NULL,
    business_key  TEXT,
    ended_at_ms   INTEGER,
    journal_last  INTEGER,
    journal_prev  INTEGER,
    history       BLOB,
    history_n     INTEGER NOT NULL DEFAULT 0
);

INSERT INTO instances (id, deployment, fence, status, failure_code, snapshot,
    created_at_ms, updated_at_ms, business_key, ended_at_ms, journal_last, journal_prev,
    history, history_n)
SELECT id, deployment, fence, status, failure_code, snapshot, created_at_ms,
    updated_at_ms, business_key, ended_at_ms, journal_last, journal_prev, history, history_n
FROM instances_before_0020 ORDER BY created_at_ms, id;

DROP TABLE instances_before_0020;

CREATE INDEX instances_created ON instances (created_at_ms, id);
CREATE UNIQUE INDEX instances_business_key ON instances (business_key, deployment)
    WHERE business_key IS NOT NULL;
CREATE INDEX instances_ended ON instances (ended_at_ms) WHERE ended_at_ms IS NOT NULL;
CREATE INDEX instances_deployment_ended ON instances (deployment, ended_at_ms)
    WHERE ended_at_ms IS NOT NULL;
CREATE INDEX instances_deployment_status ON instances (deployment, status, created_at_ms, id);
CREATE INDEX instances_status ON instances (status, failure_code, created_at_ms, id);
CREATE INDEX instances_status_created ON instances (status, created_at_ms, id);
CREATE INDEX instances_deployment_created ON instances (deployment, created_at_ms, id);
