-- The input journal (SPEC G3, `docs/replay.md`): one row per step of an instance whose
-- deployment journals, appended by the step's commit in its transaction and only when
-- its compare-and-swap won. A row holds what the step was given (its instant and input)
-- and a record of what it wrote (the snapshot as a delta against the one before, the
-- hashes of the snapshot and the effects, and the hash of the row itself), enough to run
-- the step again and compare bytes. Append-only; deleted only with its instance, by the
-- purge.
--
-- Rows are kept in append order (the rowid `id`), not by instance: a batch's rows land
-- on the last page or two instead of one page per instance it stepped, which is what a
-- table or an index keyed by instance costs (measured: +32 KiB written per instance of
-- the 10-step benchmark model keyed by (instance, seq), +5 KiB in append order). An
-- instance finds its rows through a chain: `instances.journal_last` names its newest
-- row, and each row its instance's row before it (`prev`, always an older id). The
-- commit sets both in the statements it runs anyway (the instance row's update, the
-- insert), so journaling adds no index and no page per instance.
CREATE TABLE journal (
    id            INTEGER PRIMARY KEY,
    prev          INTEGER CHECK (prev IS NULL OR prev < id),
    -- The fence the step's commit wrote (1: the creation).
    seq           INTEGER NOT NULL CHECK (seq >= 1),
    -- The deployment the step ran on (a migration's step: the target).
    deployment    INTEGER NOT NULL,
    at_ms         INTEGER NOT NULL,
    -- The step's input, as the engine's `Input` type serializes it to JSON.
    input         TEXT    NOT NULL,
    delta         BLOB    NOT NULL,
    snapshot_hash BLOB    NOT NULL,
    effects_hash  BLOB    NOT NULL,
    row_hash      BLOB    NOT NULL
);

-- The newest journal row of the instance, and (set by the same update, for the insert
-- that follows it in the commit) the one before it. Neither is indexed.
ALTER TABLE instances ADD COLUMN journal_last INTEGER;
ALTER TABLE instances ADD COLUMN journal_prev INTEGER;
