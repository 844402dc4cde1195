-- A step's finished attempts go on the end of its instance row (issue 26, as SQLite's
-- 0019_attempts_in_row.sql): `history` holds the attempts not yet in `attempts`, packed
-- (`qflow_store::history`), oldest first; NULL is none, and `history_n` counts them. The
-- commit appends in the UPDATE it makes of the row anyway, where it inserted a row of
-- `attempts` (a heap tuple and two index entries) per attempt. Past 2 KiB the commit moves
-- the row's records to `attempts` in one insert and empties the column, so a row stays
-- small however long an instance retries; reads take the table's rows first, then the
-- row's, in one snapshot. Measured before this migration with the runtime bench
-- (`--stores=postgres --no-timers`): leaving the attempt rows out altogether gave +29 %
-- with four lanes (docs/performance.md, "PostgreSQL: attempt history in the instance row").
--
-- Adding a nullable column and one with a constant default rewrites no row.
ALTER TABLE instances
    ADD COLUMN history bytea,
    ADD COLUMN history_n integer NOT NULL DEFAULT 0;
