-- Message subscriptions (issue 10, O1: correlation by message name and key). One row per
-- node where a running instance waits for a message whose declaration has a correlation
-- key, opened and closed by the commits of the steps that begin and end the wait, so a
-- published message finds its instances by index, without reading snapshots.
CREATE TABLE subscriptions (
    instance        TEXT    NOT NULL REFERENCES instances (id),
    node            TEXT    NOT NULL,
    message         TEXT    NOT NULL,
    correlation_key TEXT    NOT NULL,
    opened_at_ms    INTEGER NOT NULL,
    PRIMARY KEY (instance, node)
) WITHOUT ROWID;

-- The correlation lookup, oldest subscription first.
CREATE INDEX subscriptions_key ON subscriptions (message, correlation_key, opened_at_ms);
