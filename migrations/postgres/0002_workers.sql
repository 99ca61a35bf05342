-- Many workers on one job (docs/scale-out.md): migrations/0007_workers.sql
-- for PostgreSQL. Workers and roles are keyed by job id without a
-- reference to jobs: a worker registers, and the plan role is taken,
-- before the job row exists.
CREATE TABLE workers (
    job_id       TEXT NOT NULL,
    id           TEXT NOT NULL,
    host         TEXT NOT NULL,
    pid          INTEGER NOT NULL,
    started_at   BIGINT NOT NULL, -- unix ns
    heartbeat_at BIGINT NOT NULL, -- unix ns
    PRIMARY KEY (job_id, id)
);
-- A chunk's next step is leased to one worker at a time, until expires_at
-- (unix ns), which the holder's heartbeat pushes forward.
CREATE TABLE chunk_leases (
    job_id     TEXT NOT NULL,
    chunk_id   BIGINT NOT NULL,
    worker_id  TEXT NOT NULL,
    expires_at BIGINT NOT NULL,
    PRIMARY KEY (job_id, chunk_id)
);
CREATE INDEX chunk_leases_worker ON chunk_leases (job_id, worker_id);
-- Roles one worker of a job holds at a time ('plan', 'merge').
CREATE TABLE job_roles (
    job_id     TEXT NOT NULL,
    role       TEXT NOT NULL,
    worker_id  TEXT NOT NULL,
    expires_at BIGINT NOT NULL,
    PRIMARY KEY (job_id, role)
);
