-- The operator's incident list (Store::latest_incidents with open_only) walks the newest
-- open incidents; without this partial index it would step over every resolved one.
-- Written once per incident (at its opening) and left at its resolution.
CREATE INDEX incidents_open ON incidents (id) WHERE resolved_at_ms IS NULL;
