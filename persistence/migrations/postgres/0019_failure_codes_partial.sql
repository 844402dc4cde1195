-- Failure codes in a partial index of the instances that have one (issue 26: write less
-- per instance; SQLite's `0022_status_indexes_without_id.sql` made the same index).
-- `instances_status (status, failure_code, created_at_ms, id)` took an entry for every
-- instance when it started and a new one when it ended (the status changes: not a HOT
-- update), one of the six indexes every instance writes, to serve only the filter by
-- failure code, which few instances have. And a filter by code without a status could
-- not use it in the listing's order (PostgreSQL 15 has no skip scan across the statuses).
-- `instances_coded` holds only the instances that have a code, in creation order: a
-- listing by code, with a status or without, reads it and stops at the page's limit, and
-- every other instance never writes it. Status-only listings keep
-- `instances_status_created`.
--
-- Built in the migration's transaction (not CONCURRENTLY): writes to `instances` wait
-- while it reads the table once (docs/operations.md, "Upgrading a store").
DROP INDEX instances_status;
CREATE INDEX instances_coded ON instances (failure_code, created_at_ms, id)
    WHERE failure_code IS NOT NULL;
