-- The journal's rows check no foreign key (measured: issue 29, docs/performance.md "The
-- input journal"). Every row is written by the commit whose compare-and-swap on its
-- instance's row won, in that transaction, naming the deployment that step ran on, so
-- both rows it referred to exist when it is written; they are deleted only by the purge,
-- which deletes the instance's journal rows in the same statement, and deployments are
-- never deleted. The two checks cost each journaled step two index probes and a
-- KEY SHARE lock on the deployment's row, which every lane's transaction takes at once
-- (a multixact per batch), for nothing the commit path does not already guarantee.
-- SQLite's journal never had them (`0012_journal.sql` there).
ALTER TABLE journal DROP CONSTRAINT journal_instance_fkey;
ALTER TABLE journal DROP CONSTRAINT journal_deployment_fkey;
