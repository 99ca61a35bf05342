-- PostgreSQL's own statements (driver.go): where its dialect or its
-- locking differs from SQLite's.

-- A claim reads the lease row FOR UPDATE SKIP LOCKED, so a row another
-- transaction is claiming right now counts as taken and no claim waits for
-- another in flight; a missing row is inserted, and an insert that loses a
-- race to another's (ON CONFLICT DO NOTHING) is a lost claim.

-- name: claim_read_chunk_leases
SELECT worker_id, expires_at FROM chunk_leases WHERE job_id = ? AND chunk_id = ? FOR UPDATE SKIP LOCKED;

-- name: claim_insert_chunk_leases
INSERT INTO chunk_leases (job_id, chunk_id, worker_id, expires_at) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING;

-- name: claim_take_chunk_leases
UPDATE chunk_leases SET worker_id = ?, expires_at = ? WHERE job_id = ? AND chunk_id = ?;

-- name: claim_read_job_roles
SELECT worker_id, expires_at FROM job_roles WHERE job_id = ? AND role = ? FOR UPDATE SKIP LOCKED;

-- name: claim_insert_job_roles
INSERT INTO job_roles (job_id, role, worker_id, expires_at) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING;

-- name: claim_take_job_roles
UPDATE job_roles SET worker_id = ?, expires_at = ? WHERE job_id = ? AND role = ?;
