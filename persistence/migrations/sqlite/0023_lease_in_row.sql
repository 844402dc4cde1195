-- The in-flight lease (`~run`, C7a) moves from a row of `timers` into its instance's row
-- (issue 26, point 1: write less per instance). Every instance with a task attempt in
-- flight kept a `~run` timer row: one insert when its first attempt started and one
-- delete when nothing was in flight any more, each writing the `timers` table, its
-- primary-key index and `timers_due` — about a tenth of the bytes a 10-task instance
-- wrote, and a tenth of the committer's time (docs/performance.md, "The lease in the
-- instance's row"). Here the lease is four columns of a row the same commits write
-- anyway, and one partial index holds the instances whose lease is armed, so a
-- commit that arms or resolves one writes that index's entry and nothing else new.
--
-- The store contract does not change: `~run` is still a timer name that commits arm and
-- resolve, that `claim_due_timers` leases and `timers` lists; the SQLite store keeps
-- that one name here. `lease_owner` and `lease_until_ms` are the claim's, as
-- `timers.lease_owner` and `timers.leased_until_ms`.
ALTER TABLE instances ADD COLUMN lease_due_ms INTEGER;
ALTER TABLE instances ADD COLUMN lease_incarnation INTEGER;
ALTER TABLE instances ADD COLUMN lease_owner TEXT;
ALTER TABLE instances ADD COLUMN lease_until_ms INTEGER;

UPDATE instances
SET (lease_due_ms, lease_incarnation, lease_owner, lease_until_ms) = (
    SELECT t.due_at_ms, t.incarnation, t.lease_owner, t.leased_until_ms
    FROM timers AS t
    WHERE t.instance = instances.id AND t.name = '~run'
)
WHERE id IN (SELECT instance FROM timers WHERE name = '~run');

DELETE FROM timers WHERE name = '~run';

-- The poller's claim walks the armed leases by due instant, as `timers_due` serves the
-- timers; an instance without a lease (nearly every finished one) has no entry.
CREATE INDEX instances_lease_due ON instances (lease_due_ms) WHERE lease_due_ms IS NOT NULL;
