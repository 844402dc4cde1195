-- The input journal (SPEC G3, `docs/replay.md`): one row per step of an instance whose
-- deployment journals, appended by the step's commit in its transaction and only when
-- its compare-and-swap won, keyed by `seq`, the fence that commit wrote (1: the
-- creation). A row holds what the step was given (its instant and input) and a record of
-- what it wrote (the snapshot as a delta against the one before, the hashes of the
-- snapshot and the effects, and the hash of the row itself), enough to run the step again
-- and compare bytes. Append-only; deleted only with its instance, by the purge. Read by
-- instance in `seq` order, a page at a time: the primary key is the only index, and
-- `WITHOUT ROWID` keeps the rows in it (one b-tree, not a second one per row).
CREATE TABLE journal (
    instance      TEXT    NOT NULL REFERENCES instances (id),
    seq           INTEGER NOT NULL CHECK (seq >= 1),
    -- The deployment the step ran on (a migration's step: the target).
    deployment    INTEGER NOT NULL REFERENCES deployments (id),
    at_ms         INTEGER NOT NULL,
    -- The step's input, as the engine's `Input` type serializes it to JSON.
    input         TEXT    NOT NULL,
    delta         BLOB    NOT NULL,
    snapshot_hash BLOB    NOT NULL,
    effects_hash  BLOB    NOT NULL,
    row_hash      BLOB    NOT NULL,
    PRIMARY KEY (instance, seq)
) WITHOUT ROWID;
