-- Retention (issue 10, O7): when an instance ended, and the index the purge walks.
-- `ended_at_ms` is set by the commit that makes an instance completed or cancelled and
-- kept by every later one; it stays NULL while the instance runs or is FAILED (a FAILED
-- instance has not ended: it is kept until an operator resolves it). A column of its
-- own rather than an index on `updated_at_ms`: every step moves `updated_at_ms`, and an
-- index on it would make every step's update of a live instance a non-HOT update that
-- writes every index of the table. This column changes once per instance, in the
-- commit that also changes `status` (already indexed), so live steps stay HOT-eligible.
ALTER TABLE instances ADD COLUMN ended_at_ms BIGINT;

-- Instances that ended before this migration: their last commit is the best end known
-- (nothing commits an ended instance except to delete stale timer residue). This
-- rewrites the ended rows once, inside the migration's transaction.
UPDATE instances SET ended_at_ms = updated_at_ms WHERE status IN ('completed', 'cancelled');

-- The purge: ended instances oldest end first, of all deployments or of one. Partial:
-- live and FAILED instances are not in them. Built inside the migration's transaction,
-- so it holds writes on `instances` while it builds.
CREATE INDEX instances_ended ON instances (ended_at_ms) WHERE ended_at_ms IS NOT NULL;
CREATE INDEX instances_deployment_ended ON instances (deployment, ended_at_ms)
    WHERE ended_at_ms IS NOT NULL;
