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

-- The request records (postgres_chunks.go): a job's request rows are its
-- partition of requests, {part} (requests_j<key>, migrations/postgres/0001_init.sql).
-- These statements are PostgreSQL's alone and run as written, numbered.

-- name: job_key
SELECT key FROM jobs WHERE id = $1;

-- name: job_key_locked
-- A finish that gives new chunks their ids holds the job's row: one such
-- finish of the job at a time.
SELECT key FROM jobs WHERE id = $1 FOR UPDATE;

-- name: job_delete_ledger
DELETE FROM ledger WHERE request BETWEEN $1 AND $2;

-- name: job_drop_partition
DROP TABLE IF EXISTS {part};

-- name: chunk_requests
SELECT id & 1099511627775, line, custom_id, chunk_id, idx, byte_offset, length,
	tokens, attempt, state FROM {part} WHERE chunk_id = $1 ORDER BY idx;

-- name: chunk_settled_on_rows
-- Every outcome goes on its row (requests_settled 1,
-- migrations/postgres/0003_settled_chunks.sql).
UPDATE chunks SET requests_settled = 1 WHERE job_id = $1 AND id = $2;

-- name: finish_outcomes
-- The outcomes, as arrays: ids $1, states $3, each row pending in chunk
-- $2; the count of rows updated.
WITH u AS (SELECT * FROM unnest($1::bigint[], $3::text[]) AS u(id, state)),
upd AS (UPDATE {part} r SET state = u.state FROM u
	WHERE r.id = u.id AND r.chunk_id = $2 AND r.state = 'pending' RETURNING 1)
SELECT count(*) FROM upd;

-- name: finish_moves
-- The moves, as arrays: ids $1, new chunks $3, places $4 to $6, attempts
-- $7, each row pending in chunk $2; the count of rows updated.
WITH u AS (SELECT * FROM unnest($1::bigint[], $3::bigint[], $4::int[], $5::bigint[], $6::int[], $7::int[])
	AS u(id, chunk, idx, off, len, att)),
upd AS (UPDATE {part} r SET chunk_id = u.chunk, idx = u.idx, byte_offset = u.off, length = u.len, attempt = u.att FROM u
	WHERE r.id = u.id AND r.chunk_id = $2 AND r.state = 'pending' RETURNING 1)
SELECT count(*) FROM upd;

-- name: finish_conflict
-- The first of ids $1 not pending in chunk $2.
SELECT min(u.id) FROM unnest($1::bigint[]) AS u(id) WHERE NOT EXISTS (SELECT 1 FROM {part} r
	WHERE r.id = u.id AND r.chunk_id = $2 AND r.state = 'pending');

-- name: ledger_record
-- The first success of a body key stays its answer (in outcome order
-- within one finish).
INSERT INTO ledger (key, request, byte_offset, length)
SELECT r.body_key, r.id, u.off, u.len
FROM unnest($1::bigint[], $2::bigint[], $3::bigint[]) WITH ORDINALITY AS u(id, off, len, n)
JOIN {part} r ON r.id = u.id WHERE r.body_key IS NOT NULL ORDER BY u.n
ON CONFLICT (key) DO NOTHING;

-- name: request_states
SELECT COUNT(*) FILTER (WHERE state = 'pending'),
	COUNT(*) FILTER (WHERE state = 'succeeded'), COUNT(*) FILTER (WHERE state = 'failed')
FROM {part};

-- name: requests_expected
SELECT id & 1099511627775, custom_id FROM {part} ORDER BY id;

-- name: requests_retried
-- A split spends no attempt: its chunk's splits are not counted.
SELECT COUNT(*) FROM {part} r JOIN chunks c ON c.job_id = $1 AND c.id = r.chunk_id
WHERE r.attempt - c.splits > 1;

-- A plan (postgres_plan.go): the job's partition, {part}, written with
-- COPY; its custom_ids checked unique at the commit, or by a unique index
-- once FindCustomID needs one.

-- name: plan_id_line
SELECT line FROM {part} WHERE custom_id = $1;

-- name: plan_unique_index
CREATE UNIQUE INDEX {part}_custom_id ON {part} (custom_id);

-- name: plan_unique_index_drop
DROP INDEX {part}_custom_id;

-- name: plan_duplicate
SELECT custom_id FROM {part} GROUP BY custom_id HAVING COUNT(*) > 1 LIMIT 1;

-- name: plan_duplicate_lines
SELECT MIN(line), MAX(line) FROM (SELECT line FROM {part} WHERE custom_id = $1 ORDER BY line LIMIT 2) d;

-- name: plan_reused_succeeded
-- Chunk 0 holds the requests answered from earlier jobs.
UPDATE {part} SET state = 'succeeded' WHERE chunk_id = 0;

-- name: plan_chunk_index
CREATE INDEX {part}_chunk ON {part} (chunk_id, idx);

-- name: plan_analyze
ANALYZE {part};

-- name: ledger_legacy
SELECT EXISTS (SELECT 1 FROM jobs WHERE canonical_keys = 0);

-- name: plan_job_insert
INSERT INTO jobs (id, provider, input, model, limits, dir, output, state,
	max_attempts, created_at, updated_at, endpoint, provider_files, model_map, default_max_tokens, canonical_keys, store_key, bucket)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18) RETURNING key;

-- name: ledger_lookup
SELECT l.key, j.id, j.dir, c.results_path, r.custom_id, l.byte_offset, l.length
	FROM ledger l
	JOIN requests r ON r.id = l.request
	JOIN jobs j ON j.key = (l.request >> 40)
	JOIN chunks c ON c.job_id = j.id AND c.id = r.chunk_id
	WHERE l.key = ANY($1::bytea[]) AND r.state = 'succeeded' AND j.key != $2 AND c.results_path != '';

-- name: lock_epoch_init
INSERT INTO job_locks (job_id, epoch) VALUES ($1, 1) ON CONFLICT (job_id) DO NOTHING;

-- name: lock_epoch
SELECT epoch FROM job_locks WHERE job_id = $1;

-- name: lock_epoch_next
INSERT INTO job_locks (job_id, epoch) VALUES ($1, 1)
	ON CONFLICT (job_id) DO UPDATE SET epoch = job_locks.epoch + 1 RETURNING epoch;

-- name: lock_try
SELECT pg_try_advisory_lock($1);

-- name: lock_try_shared
SELECT pg_try_advisory_lock_shared($1);

-- name: lock_unlock
SELECT pg_advisory_unlock($1);

-- name: lock_unlock_shared
SELECT pg_advisory_unlock_shared($1);

-- name: lock_holder
SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
	WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
		AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND l.classid::bigint = $1 AND l.objid::bigint = $2 LIMIT 1;

-- name: lock_held
-- Whether this session holds the job's advisory lock (the key's halves).
SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory'
	AND granted AND objsubid = 1 AND classid::bigint = $1 AND objid::bigint = $2);

-- name: lock_fence
-- A chunk write's fence: read FOR SHARE, so an exclusive taking waits for
-- the write, and once it committed its epoch this read sees it.
SELECT epoch FROM job_locks WHERE job_id = $1 FOR SHARE;

-- The migrations' own bookkeeping (postgres.go: migrate), under an
-- advisory lock so that processes opening a new database at once apply
-- each version once.

-- name: migrate_lock
SELECT pg_advisory_xact_lock($1);

-- name: migrate_table
CREATE TABLE IF NOT EXISTS schema_migrations (
	version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL);

-- name: migrate_versions
SELECT version FROM schema_migrations;

-- name: migrate_record
INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3);
