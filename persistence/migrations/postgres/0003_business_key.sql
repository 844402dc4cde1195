-- Business keys (issue 10): an optional key an instance is created with, never changed,
-- unique per deployment when given. NULL for every instance created before this
-- migration and for those started without a key (adding a nullable column without a
-- default rewrites no rows).
ALTER TABLE instances ADD COLUMN business_key TEXT;

-- The uniqueness guard, and the index a lookup by key uses. The key leads, so a lookup
-- by key alone (across deployments) uses it as well as one by deployment and key; the
-- pair is unique whichever column comes first. Partial: instances without a key are not
-- in it and never collide. Two transactions creating the same key concurrently meet
-- here: the second waits for the first and then sees the conflict (the store's
-- `ON CONFLICT DO NOTHING` turns it into a refusal, not an error). Built inside the
-- migration's transaction, so it holds writes on `instances` while it builds.
CREATE UNIQUE INDEX instances_business_key ON instances (business_key, deployment)
    WHERE business_key IS NOT NULL;
