-- The input journal's row packed into one value (SPEC G3, issue 29, SQLite only): a row
-- written from this migration on keeps `id`, `prev` and `seq` as columns (the chain and
-- a page read's stop need them) and every other field in `body`, one blob in the
-- store's own layout (`persistence/src/journal_body.rs`). The fields are the same bytes
-- as before; what changes is their cost to the one writer: four bound values a row
-- instead of ten, and one cell instead of seven (measured with a probe of this layout:
-- 1 lane at 0.87 of the journal-off throughput against 0.82 unpacked,
-- docs/performance.md "The input journal").
--
-- The rows written before it keep their fields in the columns of `0012_journal.sql`,
-- now nullable, and read as they are: a row has either a `body` or all of them. SQLite
-- cannot loosen a column's NOT NULL in place, so the table is rebuilt: the copy keeps
-- every row's id, so the chains from `instances.journal_last` stay as they were.
CREATE TABLE journal_packed (
    id            INTEGER PRIMARY KEY,
    prev          INTEGER CHECK (prev IS NULL OR prev < id),
    seq           INTEGER NOT NULL CHECK (seq >= 1),
    -- Every field but id, prev and seq (journal_body.rs); NULL in a row of 0012's layout.
    body          BLOB,
    -- 0012's layout: the fields of the rows written before this migration.
    deployment    INTEGER,
    at_ms         INTEGER,
    input         TEXT,
    delta         BLOB,
    snapshot_hash BLOB,
    effects_hash  BLOB,
    row_hash      BLOB,
    CHECK (body IS NOT NULL OR (deployment IS NOT NULL AND at_ms IS NOT NULL
        AND input IS NOT NULL AND delta IS NOT NULL AND snapshot_hash IS NOT NULL
        AND effects_hash IS NOT NULL AND row_hash IS NOT NULL))
);

INSERT INTO journal_packed (id, prev, seq, deployment, at_ms, input, delta, snapshot_hash,
                            effects_hash, row_hash)
    SELECT id, prev, seq, deployment, at_ms, input, delta, snapshot_hash, effects_hash,
           row_hash
    FROM journal;

DROP TABLE journal;
ALTER TABLE journal_packed RENAME TO journal;
