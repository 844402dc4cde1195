-- Listings in creation order (the console and `GET /v1/instances`, issue 12): a filter by
-- deployment and/or state pages through its rows oldest first, 50 or 100 at a time. With
-- the indexes of 0001 the store found every matching row and sorted them all for each
-- page (a deployment with 90,000 completed instances: 80 ms and more a page). Each
-- index below ends in `(created_at_ms, id)`, the listing's order and keyset, so a page
-- reads its rows in order and stops at the limit.
--
-- The two indexes of 0001 are replaced by their wider versions, which serve every query
-- the narrow ones did (the retirement check, the counts by state, failure-code filters);
-- two more serve a state alone and a deployment alone. Every column here but `status`
-- and `failure_code` is fixed at creation, and those change at most twice in an
-- instance's life, so the steps of a running instance do not write these indexes.
DROP INDEX instances_deployment_status;
DROP INDEX instances_status;
CREATE INDEX instances_deployment_status ON instances (deployment, status, created_at_ms, id);
CREATE INDEX instances_status ON instances (status, failure_code, created_at_ms, id);
CREATE INDEX instances_status_created ON instances (status, created_at_ms, id);
CREATE INDEX instances_deployment_created ON instances (deployment, created_at_ms, id);
