-- The message buffer (issue 28, `docs/messages.md` "Time to live"): a message published
-- with a time to live is kept until it expires, so that a wait opening later under its
-- name and correlation key still receives it, oldest first. Each BPMN process takes a
-- buffered message at most once (Zeebe's rule): `message_takers` records who did, written
-- by the commit of the step that delivered it, which locks the message's row first so
-- that two replicas' takes for one process are serialized.
CREATE TABLE buffered_messages (
    id              BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key             BIGINT  NOT NULL,
    name            TEXT    NOT NULL,
    correlation_key TEXT    NOT NULL,
    message_id      TEXT,
    variables       TEXT    NOT NULL,
    published_at_ms BIGINT  NOT NULL,
    expires_at_ms   BIGINT  NOT NULL
);

-- Correlation (a wait's name and key, oldest first) and the message-id duplicate check.
CREATE INDEX buffered_messages_correlation ON buffered_messages (name, correlation_key, id);
-- Expiry, earliest first.
CREATE INDEX buffered_messages_expiry ON buffered_messages (expires_at_ms);
-- At most one message per id, name and key (NULL ids are distinct); an expired holder
-- is deleted before a new publication with its id.
CREATE UNIQUE INDEX buffered_messages_id ON buffered_messages (name, correlation_key, message_id);

CREATE TABLE message_takers (
    message BIGINT NOT NULL REFERENCES buffered_messages (id) ON DELETE CASCADE,
    process TEXT   NOT NULL,
    PRIMARY KEY (message, process)
);
