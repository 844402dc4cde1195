-- The journal in append order, as on SQLite (`0012_journal.sql` there; measured: issue
-- 29, docs/performance.md "The input journal"). Keyed by `(instance, seq)`, every
-- journaled step inserted an index entry at the page of its instance, a random page of a
-- large index, and that insert was nearly all the journal cost on PostgreSQL (throughput
-- 0.74-0.79 of the journal off; without the key, 0.96-1.0). Now rows are keyed by `id`,
-- taken from a sequence in commit order, so a batch's rows and index entries land on the
-- last pages; an instance finds its rows through a chain: `instances.journal_last` names
-- its newest row, each row the one before it (`prev`, always an older id). The commit
-- reads `journal_last` with the instance row it locks anyway and sets it in the update it
-- runs anyway.
-- (The foreign keys went in `0013_journal_without_foreign_keys.sql`.)
--
-- `prev < id` holds because ids come from one sequence that never caches ahead and never
-- cycles, and a step's id is taken after the lock on its instance's row, which the step
-- before it held until it committed. A database moved by logical replication, which
-- does not copy sequence values, must have `journal_id_seq` set past `MAX(journal.id)`
-- before qflow writes to it (docs/replay.md).
--
-- `id` has no default: every replica must run a build that knows the chain before this
-- migration runs. A build from before it would insert rows outside every chain (never
-- read, never purged); without a default its inserts fail loudly instead.
ALTER TABLE journal DROP CONSTRAINT journal_pkey;

CREATE SEQUENCE journal_id_seq AS BIGINT CACHE 1 NO CYCLE;
ALTER TABLE journal ADD COLUMN id BIGINT;
ALTER TABLE journal ADD COLUMN prev BIGINT;

-- Rows written before this migration: numbered in (instance, seq) order, so each
-- instance's rows ascend with its seq, and chained.
UPDATE journal AS j SET id = n.id
    FROM (SELECT instance, seq, row_number() OVER (ORDER BY instance, seq) AS id
          FROM journal) AS n
    WHERE j.instance = n.instance AND j.seq = n.seq;
UPDATE journal AS j SET prev = p.prev
    FROM (SELECT id, lag(id) OVER (PARTITION BY instance ORDER BY seq) AS prev
          FROM journal) AS p
    WHERE j.id = p.id AND p.prev IS NOT NULL;
SELECT setval('journal_id_seq', (SELECT COALESCE(MAX(id), 0) + 1 FROM journal), false);

ALTER TABLE journal ALTER COLUMN id SET NOT NULL;
ALTER SEQUENCE journal_id_seq OWNED BY journal.id;
ALTER TABLE journal ADD PRIMARY KEY (id);
ALTER TABLE journal ADD CONSTRAINT journal_prev_older CHECK (prev IS NULL OR prev < id);

-- The newest journal row of the instance; not indexed.
ALTER TABLE instances ADD COLUMN journal_last BIGINT;
UPDATE instances AS i SET journal_last = l.id
    FROM (SELECT instance, MAX(id) AS id FROM journal GROUP BY instance) AS l
    WHERE i.id = l.instance;
