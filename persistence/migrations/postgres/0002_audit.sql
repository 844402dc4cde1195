-- The audit log of operator actions (SPEC O3, O4a, O5): one row per action that changed
-- an instance, written in the same transaction as the step that carried it out.
CREATE TABLE audit (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    instance     UUID   NOT NULL REFERENCES instances (id),
    at_ms        BIGINT NOT NULL,
    actor        TEXT   NOT NULL,
    action       TEXT   NOT NULL,
    detail       TEXT   NOT NULL,
    fence_before BIGINT,
    fence_after  BIGINT NOT NULL
);

CREATE INDEX audit_instance ON audit (instance, id);
