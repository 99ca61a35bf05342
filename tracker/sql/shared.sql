-- The tracker's statements that SQLite and PostgreSQL read the same way
-- (driver.go): one named statement each, with ? placeholders, which the
-- PostgreSQL driver numbers. A statement of the same name in sqlite.sql or
-- postgres.sql replaces the one here for that database.

-- Jobs (jobs.go).

-- name: job_get
SELECT id, provider, input, input_size, input_mtime, input_hash, model, limits, dir, output,
	state, requests, rejected, max_attempts, cancel_requested_at, created_at, updated_at, reused, endpoint, provider_files,
	model_map, default_max_tokens, store_key, bucket
FROM jobs WHERE id = ?;

-- name: jobs_all
SELECT id, provider, input, input_size, input_mtime, input_hash, model, limits, dir, output,
	state, requests, rejected, max_attempts, cancel_requested_at, created_at, updated_at, reused, endpoint, provider_files,
	model_map, default_max_tokens, store_key, bucket
FROM jobs ORDER BY created_at DESC, id;

-- name: job_set_state
UPDATE jobs SET state = ?, updated_at = ? WHERE id = ? AND state = ?;

-- name: job_cancel
UPDATE jobs SET state = ?, cancel_requested_at = ?, updated_at = ? WHERE id = ? AND state = ?;

-- name: job_set_output
UPDATE jobs SET output = ?, updated_at = ? WHERE id = ?;

-- name: job_set_fingerprint
UPDATE jobs SET input_size = ?, input_mtime = ?, input_hash = ? WHERE id = ?;

-- name: job_set_settings
UPDATE jobs SET limits = ?, max_attempts = ?, updated_at = ? WHERE id = ?;

-- name: job_set_bucket
UPDATE jobs SET bucket = ?, updated_at = ? WHERE id = ?;

-- name: job_set_provider_files
UPDATE jobs SET provider_files = ?, updated_at = ? WHERE id = ?;

-- name: job_delete
DELETE FROM jobs WHERE id = ?;

-- name: job_set_max_cost
UPDATE jobs SET max_cost = ? WHERE id = ?;

-- name: job_max_cost
SELECT max_cost FROM jobs WHERE id = ?;

-- Chunks (chunks.go).

-- name: chunks_of_job
SELECT job_id, id, attempt, url, model, path, requests, bytes, est_tokens, bound, state, file_id,
	batch_id, batch_status, intent_at, next_poll_at, polls, submitted_at, ended_at, last_error,
	input_tokens, output_tokens, results_path, fetch_failures, error_code, stuck, max_output_tokens, no_max_requests,
	usage_est_tokens, queue_refusals, digest, splits, results_expire_at, file_digest
FROM chunks WHERE job_id = ? ORDER BY id;

-- name: chunk_get
SELECT job_id, id, attempt, url, model, path, requests, bytes, est_tokens, bound, state, file_id,
	batch_id, batch_status, intent_at, next_poll_at, polls, submitted_at, ended_at, last_error,
	input_tokens, output_tokens, results_path, fetch_failures, error_code, stuck, max_output_tokens, no_max_requests,
	usage_est_tokens, queue_refusals, digest, splits, results_expire_at, file_digest
FROM chunks WHERE job_id = ? AND id = ?;

-- name: chunk_record_error
-- A last error other than the one the row holds becomes an attempt_errors
-- row (updateChunk).
INSERT INTO attempt_errors (job_id, chunk_id, attempt, code, message, at)
SELECT job_id, id, ?, ?, ?, ? FROM chunks WHERE job_id = ? AND id = ? AND state = ?
	AND (error_code != ? OR last_error != ?);

-- name: chunk_update
UPDATE chunks SET state = ?, file_id = ?, batch_id = ?, batch_status = ?,
	intent_at = ?, next_poll_at = ?, polls = ?, submitted_at = ?, ended_at = ?, last_error = ?,
	input_tokens = ?, output_tokens = ?, results_path = ?, fetch_failures = ?, error_code = ?, stuck = ?,
	usage_est_tokens = ?, queue_refusals = ?, digest = ?, results_expire_at = ?
WHERE job_id = ? AND id = ? AND state = ?;

-- name: chunk_insert
INSERT INTO chunks (job_id, id, attempt, url, model, path, requests,
	bytes, est_tokens, bound, state, max_output_tokens, no_max_requests, splits, file_digest)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: chunk_next_id
SELECT COALESCE(MAX(id), 0) + 1 FROM chunks WHERE job_id = ?;

-- name: batch_known
SELECT 1 FROM chunks WHERE batch_id = ? LIMIT 1;

-- name: attempt_errors_count
SELECT COUNT(*) FROM attempt_errors WHERE job_id = ?;

-- name: attempt_errors_last
SELECT job_id, chunk_id, attempt, code, message, at FROM
	(SELECT * FROM attempt_errors WHERE job_id = ? ORDER BY seq DESC LIMIT ?) e ORDER BY seq;

-- A plan (plan.go, postgres_plan.go).

-- name: plan_set_reused
UPDATE jobs SET reused = ? WHERE id = ?;

-- name: plan_reuse_source
INSERT INTO reuse_sources (job_id, source_job, requests) VALUES (?, ?, ?);

-- name: plan_chunk_insert
INSERT INTO chunks (job_id, id, attempt, url, model, path, requests,
	bytes, est_tokens, bound, state, max_output_tokens, no_max_requests, file_digest) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: plan_commit
UPDATE jobs SET input_size = ?, input_mtime = ?, input_hash = ?,
	requests = ?, rejected = ?, state = ?, updated_at = ? WHERE id = ? AND state = ?;

-- Summaries and money (summary.go, money.go).

-- name: summary_set
INSERT INTO job_summaries (job_id, output, errors, merge_order,
	output_bytes, output_mtime, errors_bytes, lines, succeeded, failed, retried, batches, retry_batches,
	input_tokens, output_tokens, cancelled, started_at, finished_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (job_id) DO UPDATE SET output = excluded.output, errors = excluded.errors,
	merge_order = excluded.merge_order, output_bytes = excluded.output_bytes,
	output_mtime = excluded.output_mtime, errors_bytes = excluded.errors_bytes, lines = excluded.lines,
	succeeded = excluded.succeeded, failed = excluded.failed, retried = excluded.retried,
	batches = excluded.batches, retry_batches = excluded.retry_batches,
	input_tokens = excluded.input_tokens, output_tokens = excluded.output_tokens,
	cancelled = excluded.cancelled, started_at = excluded.started_at, finished_at = excluded.finished_at;

-- name: summary_get
SELECT output, errors, merge_order, output_bytes, output_mtime, errors_bytes,
	lines, succeeded, failed, retried, batches, retry_batches, input_tokens, output_tokens, cancelled,
	started_at, finished_at
FROM job_summaries WHERE job_id = ?;

-- name: reuse_sources
SELECT source_job, requests FROM reuse_sources WHERE job_id = ? ORDER BY source_job;

-- name: learned
SELECT model, CAST(SUM(usage_est_tokens) AS BIGINT), CAST(SUM(input_tokens) AS BIGINT), CAST(SUM(output_tokens) AS BIGINT)
FROM chunks WHERE usage_est_tokens > 0 GROUP BY model;

-- Workers and leases (leases.go).

-- name: worker_register
INSERT INTO workers (job_id, id, host, pid, started_at, heartbeat_at)
VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (job_id, id) DO UPDATE SET host = excluded.host, pid = excluded.pid,
	started_at = excluded.started_at, heartbeat_at = excluded.heartbeat_at;

-- name: worker_drop_leases
DELETE FROM chunk_leases WHERE job_id = ? AND worker_id = ?;

-- name: worker_drop_roles
DELETE FROM job_roles WHERE job_id = ? AND worker_id = ?;

-- name: worker_drop
DELETE FROM workers WHERE job_id = ? AND id = ?;

-- name: job_drop_leases
DELETE FROM chunk_leases WHERE job_id = ?;

-- name: job_drop_roles
DELETE FROM job_roles WHERE job_id = ?;

-- name: job_drop_workers
DELETE FROM workers WHERE job_id = ?;

-- name: workers_prune
DELETE FROM workers WHERE job_id = ? AND heartbeat_at < ?
	AND NOT EXISTS (SELECT 1 FROM chunk_leases l WHERE l.job_id = workers.job_id AND l.worker_id = workers.id AND l.expires_at > ?)
	AND NOT EXISTS (SELECT 1 FROM job_roles r WHERE r.job_id = workers.job_id AND r.worker_id = workers.id AND r.expires_at > ?);

-- name: worker_heartbeat
UPDATE workers SET heartbeat_at = ? WHERE job_id = ? AND id = ?;

-- name: worker_extend_leases
UPDATE chunk_leases SET expires_at = ? WHERE job_id = ? AND worker_id = ?;

-- name: worker_extend_roles
UPDATE job_roles SET expires_at = ? WHERE job_id = ? AND worker_id = ?;

-- name: chunk_release
DELETE FROM chunk_leases WHERE job_id = ? AND chunk_id = ? AND worker_id = ?;

-- name: role_release
DELETE FROM job_roles WHERE job_id = ? AND role = ? AND worker_id = ?;

-- name: workers_of_job
SELECT w.id, w.host, w.pid, w.started_at, w.heartbeat_at,
	(SELECT COUNT(*) FROM chunk_leases l WHERE l.job_id = w.job_id AND l.worker_id = w.id AND l.expires_at > ?)
FROM workers w WHERE w.job_id = ? ORDER BY w.started_at, w.id;

-- The notification outbox (outbox.go). (:dests) is a list of as many
-- placeholders as destinations.

-- name: note_insert
INSERT INTO notifications (id, dest, job_id, type, body, state, next_at, created_at)
VALUES (?, ?, ?, ?, ?, 'pending', ?, ?) ON CONFLICT (id, dest) DO NOTHING;

-- name: note_candidates
SELECT id, dest FROM notifications WHERE dest IN (:dests)
	AND ((state = 'pending' AND next_at <= ?) OR (state = 'sending' AND lease_until <= ?))
ORDER BY created_at, id LIMIT 4;

-- name: note_claim
UPDATE notifications SET state = 'sending', lease_owner = ?, lease_until = ?, attempts = attempts + 1
WHERE id = ? AND dest = ? AND ((state = 'pending' AND next_at <= ?) OR (state = 'sending' AND lease_until <= ?));

-- name: note_settle
UPDATE notifications SET state = ?, next_at = ?, last_error = ?, delivered_at = ?,
	lease_owner = '', lease_until = 0 WHERE id = ? AND dest = ? AND lease_owner = ? AND state = 'sending';

-- name: note_due
SELECT COUNT(*), MIN(CASE WHEN state = 'pending' THEN next_at ELSE lease_until END)
FROM notifications WHERE dest IN (:dests) AND state IN ('pending', 'sending');

-- name: note_get
SELECT id, dest, job_id, type, body, state, attempts, next_at, created_at, delivered_at, last_error
FROM notifications WHERE id = ? AND dest = ?;

-- name: notes_all
SELECT id, dest, job_id, type, body, state, attempts, next_at, created_at, delivered_at, last_error
FROM notifications ORDER BY created_at, id, dest;

-- name: notes_of_job
SELECT id, dest, job_id, type, body, state, attempts, next_at, created_at, delivered_at, last_error
FROM notifications WHERE job_id = ? ORDER BY created_at, id, dest;

-- The realtime fallback's calls (realtime.go).

-- name: realtime_chunks
SELECT DISTINCT chunk_id FROM realtime_calls WHERE job_id = ? ORDER BY chunk_id;

-- name: realtime_calls
SELECT idx, state, kind, line, input_tokens, output_tokens FROM realtime_calls
WHERE job_id = ? AND chunk_id = ? ORDER BY idx;

-- name: realtime_intent
INSERT INTO realtime_calls (job_id, chunk_id, idx, state, sent_at)
VALUES (?, ?, ?, 'realtime_sending', ?) ON CONFLICT (job_id, chunk_id, idx) DO NOTHING;

-- name: realtime_answer
UPDATE realtime_calls SET state = 'answered', kind = ?, line = ?, input_tokens = ?,
	output_tokens = ?, answered_at = ? WHERE job_id = ? AND chunk_id = ? AND idx = ? AND state = 'realtime_sending';
