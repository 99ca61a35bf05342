-- SQLite's own statements (driver.go): where its dialect or its locking
-- differs from PostgreSQL's.

-- A claim is one guarded statement: an insert that, when the row is
-- there, updates it only if its lease expired or is the claimer's own
-- (SQLite runs one writer at a time: nothing to skip).

-- name: claim_chunk_leases
INSERT INTO chunk_leases (job_id, chunk_id, worker_id, expires_at) VALUES (?, ?, ?, ?)
ON CONFLICT (job_id, chunk_id) DO UPDATE SET worker_id = excluded.worker_id, expires_at = excluded.expires_at
WHERE chunk_leases.expires_at <= ? OR chunk_leases.worker_id = excluded.worker_id;

-- name: claim_job_roles
INSERT INTO job_roles (job_id, role, worker_id, expires_at) VALUES (?, ?, ?, ?)
ON CONFLICT (job_id, role) DO UPDATE SET worker_id = excluded.worker_id, expires_at = excluded.expires_at
WHERE job_roles.expires_at <= ? OR job_roles.worker_id = excluded.worker_id;
