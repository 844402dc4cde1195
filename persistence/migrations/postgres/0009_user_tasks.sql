-- User tasks in the task list (issue 11, item 5): one row per user task a token of a
-- running instance waits at, written by the step that offers, assigns or withdraws it,
-- in the step's transaction. The snapshot holds the assignee (`h/<node>`); the row
-- mirrors it and holds the candidates the offer evaluated, so a task list finds work by
-- assignee or candidate without reading snapshots. `candidate_groups` and
-- `candidate_users` are JSON arrays of names, read back whole; lookups by a candidate go
-- through `user_task_candidates` (a side table rather than a GIN index on an array, so a
-- page by candidate is an ordered index walk that stops at its limit instead of a bitmap
-- of every task of the group, sorted). Names and node ids compare bytewise (`"C"`), as
-- the store contract orders them.
CREATE TABLE user_tasks (
    instance         UUID   NOT NULL REFERENCES instances (id),
    node             TEXT   COLLATE "C" NOT NULL,
    deployment       BIGINT NOT NULL REFERENCES deployments (id),
    assignee         TEXT   COLLATE "C",
    candidate_groups TEXT   NOT NULL,
    candidate_users  TEXT   NOT NULL,
    created_at_ms    BIGINT NOT NULL,
    PRIMARY KEY (instance, node)
);

-- The task list's pages, oldest offer first, keyset by (created_at_ms, instance, node):
-- every index ends in the listing order, so a page is one range walk that stops at its
-- limit, by assignee (held rows only), by deployment, or over everything.
CREATE INDEX user_tasks_created ON user_tasks (created_at_ms, instance, node);
CREATE INDEX user_tasks_assignee ON user_tasks (assignee, created_at_ms, instance, node)
    WHERE assignee IS NOT NULL;
CREATE INDEX user_tasks_deployment ON user_tasks (deployment, created_at_ms, instance, node);

-- One row per candidate of a task (`kind` 'group' or 'user'), with the task's instant
-- copied, so a query by candidate walks its primary key in the listing order and joins
-- the task by its key: the cost of a page grows with that candidate's tasks, never with
-- the instances. Rewritten with every offer of its task, deleted before it.
CREATE TABLE user_task_candidates (
    kind          TEXT   NOT NULL CHECK (kind IN ('group', 'user')),
    name          TEXT   COLLATE "C" NOT NULL,
    created_at_ms BIGINT NOT NULL,
    instance      UUID   NOT NULL,
    node          TEXT   COLLATE "C" NOT NULL,
    PRIMARY KEY (kind, name, created_at_ms, instance, node),
    FOREIGN KEY (instance, node) REFERENCES user_tasks (instance, node)
);

-- A task's candidates, for deleting them with it (and for the EXISTS filters).
CREATE INDEX user_task_candidates_task ON user_task_candidates (instance, node);
