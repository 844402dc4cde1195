-- The two status indexes of `instances` without the id (issue 26, point 1: write less per
-- instance). Each entry named the instance's id as 36 characters of text after its
-- status and start instant, although a rowid table's index entry ends with the row's
-- rowid anyway: two thirds of every entry was the id, and these two indexes take an
-- entry when an instance starts and move it when the instance ends. Without it an entry
-- is a third the size, and a commit rewrites a third of the leaf pages it did.
--
-- A listing still returns instances in the contract's order, start instant then id: the
-- indexes give the start instant in order, and SQLite sorts only the instances that
-- share one millisecond by id (plan: `USE TEMP B-TREE FOR LAST TERM OF ORDER BY`, a sort
-- per millisecond that still stops at the page's limit).
DROP INDEX instances_status_created;
DROP INDEX instances_deployment_status;
CREATE INDEX instances_status_created ON instances (status, created_at_ms);
CREATE INDEX instances_deployment_status ON instances (deployment, status, created_at_ms);

-- The partial index of failure codes holds every instance that has one, not only the
-- FAILED ones (0021): a filter by code without a status read the other states' arms by
-- status alone, every RUNNING and COMPLETED instance of the file, to find none or the
-- few a cancelled failure left. Instances without a code (nearly all) still never
-- write it; a listing by code is one read of it, whatever the status filter.
DROP INDEX instances_failed;
CREATE INDEX instances_coded ON instances (failure_code, created_at_ms, id)
    WHERE failure_code IS NOT NULL;
