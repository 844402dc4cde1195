-- Timer start schedules (SPEC L2): when a deployment's timer start event next starts an
-- instance. Written by `deploy` (a new deployment replaces the schedules of the
-- process's other deployments), deleted by `retire`, leased by the poller
-- (`claim_due_schedules`, as timers are), and moved on only by the commit that creates
-- the instance of the occurrence, under a compare-and-swap on `due_at_ms`: one
-- occurrence starts one instance, whichever replicas claim it.
CREATE TABLE schedules (
    deployment      BIGINT NOT NULL REFERENCES deployments (id),
    node            TEXT    NOT NULL,
    due_at_ms       BIGINT NOT NULL,
    -- Starts left, the due one included; NULL: unbounded (a cycle without a count).
    remaining       BIGINT CHECK (remaining IS NULL OR remaining >= 1),
    lease_owner     TEXT,
    leased_until_ms BIGINT,
    PRIMARY KEY (deployment, node)
);

-- A claim walks this index from the earliest due and stops at the first row not yet due.
CREATE INDEX schedules_due ON schedules (due_at_ms);
