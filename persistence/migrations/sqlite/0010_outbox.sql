-- The outbox (SPEC C1-C3, C6): one row per channel-call attempt's request, keyed by the
-- attempt's idempotency key, written by the step that emits it in the step's
-- transaction, and delivered by the dispatcher, which leases due rows (`lease_*`, as the
-- timer poller leases timers) and records every delivery try on the row. A row that was
-- not delivered is deleted only by the withdrawal of its node's dead attempt (C6) and by
-- the purge of its instance. (0009 is another family's; the two are independent, and
-- sqlx applies whichever of them a database lacks, in any order.)
CREATE TABLE outbox (
    key            TEXT    PRIMARY KEY NOT NULL,
    instance       TEXT    NOT NULL REFERENCES instances (id),
    node           TEXT    NOT NULL,
    channel        TEXT    NOT NULL,
    attempt        INTEGER NOT NULL CHECK (attempt >= 1),
    -- Stable across the attempts of one logical call (C9).
    call_id        TEXT    NOT NULL,
    -- The request body, a JSON object as text.
    body           TEXT    NOT NULL,
    created_at_ms  INTEGER NOT NULL,
    state          TEXT    NOT NULL CHECK (state IN ('pending', 'delivered', 'poisoned')),
    deliveries     INTEGER NOT NULL DEFAULT 0 CHECK (deliveries >= 0),
    -- While pending: when the next delivery try is due.
    due_at_ms      INTEGER NOT NULL,
    last_error     TEXT,
    lease_owner    TEXT,
    lease_until_ms INTEGER
);

-- A claim walks the pending rows from the earliest due and stops at the first one not
-- yet due: its cost grows with due rows, never with delivered or parked ones.
CREATE INDEX outbox_due ON outbox (due_at_ms, key) WHERE state = 'pending';

-- Withdrawal by (instance, node), an instance's listing, and the purge by instance.
CREATE INDEX outbox_instance_node ON outbox (instance, node);
