-- The input journal (SPEC G3, `docs/replay.md`): one row per step of an instance whose
-- deployment journals, appended by the step's commit in its transaction and only when
-- its compare-and-swap won, keyed by `seq`, the fence that commit wrote (1: the
-- creation). A row holds what the step was given (its instant and input) and a record of
-- what it wrote (the snapshot as a delta against the one before, the hashes of the
-- snapshot and the effects, and the hash of the row itself), enough to run the step again
-- and compare bytes. Append-only; deleted only with its instance, by the purge. Read by
-- instance in `seq` order, a page at a time: the primary key is the only index.
CREATE TABLE journal (
    instance      UUID   NOT NULL REFERENCES instances (id),
    seq           BIGINT NOT NULL CHECK (seq >= 1),
    -- The deployment the step ran on (a migration's step: the target).
    deployment    BIGINT NOT NULL REFERENCES deployments (id),
    at_ms         BIGINT NOT NULL,
    -- The step's input, as the engine's `Input` type serializes it to JSON.
    input         TEXT   NOT NULL,
    delta         BYTEA  NOT NULL,
    snapshot_hash BYTEA  NOT NULL,
    effects_hash  BYTEA  NOT NULL,
    row_hash      BYTEA  NOT NULL,
    PRIMARY KEY (instance, seq)
);
