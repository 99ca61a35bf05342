-- The fencing token of each job's lock (tracker/postgres_lock.go,
-- docs/scale-out.md "The job lock"). The job lock is a session advisory
-- lock, lost silently when its connection drops; epoch says which taking
-- of the lock is the current one. Every exclusive taking (a run without
-- --join, cancel) adds one; a taking shared by --join workers reads it.
-- Every chunk write of a run checks, in its own transaction and under a
-- share lock of this row, that the epoch is still the one its lock read:
-- a run whose lock another run took since can write nothing more. No
-- SQLite counterpart: flock cannot be lost while its process lives.
-- (Numbered 0009 rather than 0004: versions may have gaps, and numbers
-- near the end are being handed to other branches of work.)
CREATE TABLE job_locks (
    job_id text PRIMARY KEY,
    epoch bigint NOT NULL
);
