-- Attempt history in the instance row (issue 26 point 1, SQLite only): a step's finished
-- attempts (O1a) are appended to `instances.history` by the UPDATE the commit makes of
-- the row anyway, instead of each being a row of `attempts` with an entry of the
-- `attempts_instance` index. Those index entries were half of the bytes a commit wrote:
-- the ~1,000 instances in flight each appended beside their earlier attempts, so a
-- commit rewrote a leaf page per few instances (docs/performance.md, "What a SQLite
-- instance writes" and "Attempt history in the instance row").
--
-- `history` holds the records not yet moved to `attempts`, oldest first
-- (`persistence/src/history.rs`); NULL is none. `history_n` counts them. Past 2 KiB a
-- commit moves them to `attempts` in one insert and empties the column, so a row stays
-- small however long an instance retries; reads put `attempts` rows first, then the
-- row's. Rows written before this migration stay in `attempts`: they are older than any
-- record a row will hold, so the order holds across the change.
--
-- An older build would open this file and miss the rows' histories: sqlx refuses it (an
-- applied migration it does not know), as for 0018.
ALTER TABLE instances ADD COLUMN history BLOB;
ALTER TABLE instances ADD COLUMN history_n INTEGER NOT NULL DEFAULT 0;
