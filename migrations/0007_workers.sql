-- Many workers on one job (issue 13; docs/scale-out.md "Many workers").
-- The workers that joined a job: who they are and when each last said it
-- is alive. Keyed by job id without a reference to jobs: a worker
-- registers before the job is planned.
CREATE TABLE workers (
    job_id       TEXT NOT NULL,
    id           TEXT NOT NULL,
    host         TEXT NOT NULL,
    pid          INTEGER NOT NULL,
    started_at   INTEGER NOT NULL, -- unix ns
    heartbeat_at INTEGER NOT NULL, -- unix ns
    PRIMARY KEY (job_id, id)
);
-- A chunk's next step is leased to one worker at a time, until expires_at
-- (unix ns), which the holder's heartbeat pushes forward. A lease past its
-- expiry is free for any worker to take.
CREATE TABLE chunk_leases (
    job_id     TEXT NOT NULL,
    chunk_id   INTEGER NOT NULL,
    worker_id  TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (job_id, chunk_id)
);
CREATE INDEX chunk_leases_worker ON chunk_leases (job_id, worker_id);
-- Roles one worker of a job holds at a time ('plan', 'merge'), leased the
-- same way. Keyed by job id without a reference to jobs: the plan role is
-- taken before the job row exists.
CREATE TABLE job_roles (
    job_id     TEXT NOT NULL,
    role       TEXT NOT NULL,
    worker_id  TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (job_id, role)
);
