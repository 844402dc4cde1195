-- The in-flight lease (`~run`, C7a) moves from a row of `timers` into its instance's row
-- (issue 26: write less per instance; SQLite's `0023_lease_in_row.sql` does the same).
-- Every instance with a task attempt in flight kept a `~run` timer row: an insert when its
-- first attempt started and a delete when nothing was in flight any more, each with its
-- primary key and `timers_due` entries, and two statements in those commits. Here the
-- lease is four columns of the row the same commits update anyway: a creation writes it
-- with the row, the update that resolves it clears it (nearly always the update that ends
-- the instance, which is not a HOT update in any case), and one partial index holds the
-- armed leases for the poller's claim.
--
-- The store contract does not change: `~run` is still a timer name that commits arm and
-- resolve, that `claim_due_timers` leases and `timers` lists. `lease_owner` and
-- `lease_until_ms` are the claim's, as `timers.lease_owner` and `timers.leased_until_ms`.
ALTER TABLE instances ADD COLUMN lease_due_ms BIGINT;
ALTER TABLE instances ADD COLUMN lease_incarnation BIGINT;
ALTER TABLE instances ADD COLUMN lease_owner TEXT;
ALTER TABLE instances ADD COLUMN lease_until_ms BIGINT;

UPDATE instances AS i
SET lease_due_ms = t.due_at_ms, lease_incarnation = t.incarnation,
    lease_owner = t.lease_owner, lease_until_ms = t.leased_until_ms
FROM timers AS t
WHERE t.instance = i.id AND t.name = '~run';

DELETE FROM timers WHERE name = '~run';

CREATE INDEX instances_lease_due ON instances (lease_due_ms) WHERE lease_due_ms IS NOT NULL;
