-- Three fewer indexes on `instances` (issue 26, point 1: write less per instance). Every
-- index of the table takes an entry when an instance starts, and those that name the
-- status move it when the instance ends, so each one rewrites a leaf page or two in
-- nearly every commit: with one lane the eight of them wrote ~45 % of a commit's WAL
-- (scripts/write-breakdown, docs/performance.md "Fewer indexes on the instance table").
--
-- * `instances_created (created_at_ms, id)` and `instances_deployment_created
--   (deployment, created_at_ms, id)` served a listing with no status filter. SQLite now
--   reads such a page as four ordered arms, one per status, from `instances_status_created`
--   or `instances_deployment_status`, merged in order (`UNION ALL … ORDER BY`, plan
--   `MERGE (UNION ALL)`: no sort, and the page still stops at its limit).
-- * `instances_status (status, failure_code, created_at_ms, id)` served a filter by
--   failure code. Only FAILED instances are looked up by their code, and they are few:
--   a partial index holds just them, so a running or completed instance never writes it.
--   Its `WHERE` matches only a listing that names the status as a literal, which the
--   SQLite listing does (`common::StatusArms::PerStatus`).
--
-- PostgreSQL keeps its indexes: PostgreSQL 15 sorts every row such a UNION ALL matches
-- rather than merging its ordered arms (docs/performance.md).
DROP INDEX instances_created;
DROP INDEX instances_deployment_created;
DROP INDEX instances_status;
CREATE INDEX instances_failed ON instances (failure_code, created_at_ms, id)
    WHERE status = 'failed';
