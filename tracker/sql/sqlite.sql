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

-- A job's request rows and pages (migration 0003): a request row's id is
-- key << 40 | ordinal, so a job's rows are one range of ids, bound by the
-- job's id twice (none when there is no such job: a job deleted between
-- two statements shows as empty). keys.go: jobRange.

-- name: job_delete_ledger
-- The job's answers leave the ledger with it (a later job buys them again
-- rather than pointing at results that are gone).
DELETE FROM ledger WHERE request BETWEEN (SELECT key << 40 FROM jobs WHERE jobs.id = ?)
	AND (SELECT key << 40 | 1099511627775 FROM jobs WHERE jobs.id = ?);

-- name: job_delete_requests
DELETE FROM requests WHERE requests.id BETWEEN (SELECT key << 40 FROM jobs WHERE jobs.id = ?)
	AND (SELECT key << 40 | 1099511627775 FROM jobs WHERE jobs.id = ?);

-- name: job_delete_request_pages
DELETE FROM request_pages WHERE id BETWEEN (SELECT key << 40 FROM jobs WHERE jobs.id = ?)
	AND (SELECT key << 40 | 1099511627775 FROM jobs WHERE jobs.id = ?);

-- name: job_delete_attempt_errors
DELETE FROM attempt_errors WHERE job_id = ?;

-- name: job_delete_summary
DELETE FROM job_summaries WHERE job_id = ?;

-- name: job_delete_chunks
DELETE FROM chunks WHERE job_id = ?;

-- name: job_delete_realtime_calls
DELETE FROM realtime_calls WHERE job_id = ?;

-- name: chunk_requests
-- A chunk's requests in order, through the requests_chunk index: the job's
-- key is bound (TestChunkRequestsUsesTheIndex).
SELECT id & ?, line, custom_id, chunk_id, idx, offset, length, tokens,
	attempt, state FROM requests WHERE id >> 40 = ? AND chunk_id = ? ORDER BY idx;

-- name: request_move
UPDATE requests SET chunk_id = ?, idx = ?, offset = ?, length = ?, attempt = ?
WHERE id = ? AND chunk_id = ? AND state = 'pending';

-- name: requests_set_state
-- The rows whose ids are in a JSON array, still pending in the chunk.
UPDATE requests SET state = ? WHERE id IN (SELECT value FROM json_each(?))
	AND chunk_id = ? AND state = 'pending';

-- name: request_set_state
UPDATE requests SET state = ? WHERE id = ? AND chunk_id = ? AND state = 'pending';

-- name: settle_check
-- A chunk's rows summed over the requests_chunk index alone
-- (TestSettleCheckReadsOnlyTheIndex).
SELECT COUNT(*), COALESCE(SUM(id & ?), 0), COALESCE(SUM((id % 65521) * (id % 65519)), 0)
FROM requests WHERE id >> 40 = ? AND chunk_id = ?;

-- name: chunk_settle
UPDATE chunks SET requests_settled = ?, answers = ? WHERE job_id = ? AND id = ?;

-- name: chunk_settle_paged
UPDATE chunks SET requests_settled = ?, answers = ?, overlaid = overlaid + ? WHERE job_id = ? AND id = ?;

-- name: request_states
-- Counted in one pass over the job's rowid range (a GROUP BY would sort
-- every row of the job first). A request still pending in a chunk settled
-- on the chunk (requests_settled 2) is succeeded.
SELECT COUNT(*) FILTER (WHERE state = 'pending'),
	COUNT(*) FILTER (WHERE state = 'pending' AND chunk_id IN
		(SELECT id FROM chunks WHERE job_id = ? AND requests_settled = 2)),
	COUNT(*) FILTER (WHERE state = 'succeeded'), COUNT(*) FILTER (WHERE state = 'failed')
FROM requests WHERE requests.id BETWEEN (SELECT key << 40 FROM jobs WHERE jobs.id = ?)
	AND (SELECT key << 40 | 1099511627775 FROM jobs WHERE jobs.id = ?);

-- name: request_states_paged
-- A paged plan's page entries, those of its chunks settled on the chunk
-- that no row overlays, and those of chunk 0 answered from earlier jobs.
SELECT
	(SELECT COALESCE(SUM(n), 0) FROM request_pages WHERE request_pages.id BETWEEN (SELECT key << 40 FROM jobs WHERE jobs.id = ?)
		AND (SELECT key << 40 | 1099511627775 FROM jobs WHERE jobs.id = ?)),
	(SELECT COALESCE(SUM(c.paged - c.overlaid), 0) FROM chunks c WHERE c.job_id = ? AND c.paged > 0
		AND c.requests_settled = 2)
	+ COALESCE((SELECT CASE WHEN paged = 1 THEN reused ELSE 0 END FROM jobs WHERE id = ?), 0);

-- name: requests_expected
SELECT id & ?, custom_id FROM requests WHERE requests.id BETWEEN (SELECT key << 40 FROM jobs WHERE jobs.id = ?)
	AND (SELECT key << 40 | 1099511627775 FROM jobs WHERE jobs.id = ?) ORDER BY id;

-- name: requests_retried
-- A split spends no attempt: its chunk's splits are not counted.
SELECT COUNT(*) FROM requests JOIN chunks ON chunks.job_id = ? AND chunks.id = requests.chunk_id
WHERE requests.id BETWEEN (SELECT key << 40 FROM jobs WHERE jobs.id = ?)
	AND (SELECT key << 40 | 1099511627775 FROM jobs WHERE jobs.id = ?) AND requests.attempt - chunks.splits > 1;

-- The ledger fold and lookups, and a plan of SQLite (money.go, plan.go,
-- pages.go).

-- name: ledger_fold_waiting
SELECT EXISTS (SELECT 1 FROM chunks WHERE answers IS NOT NULL);

-- name: ledger_fold_create
CREATE TEMP TABLE IF NOT EXISTS fold
	(key BLOB NOT NULL, request INTEGER NOT NULL, offset INTEGER NOT NULL, length INTEGER NOT NULL,
	 chunk INTEGER, custom_id TEXT);

-- name: ledger_fold_drop
DROP TABLE IF EXISTS temp.fold;

-- name: ledger_fold_rows
INSERT INTO temp.fold (key, request, offset, length, chunk, custom_id)
	SELECT r.body_key, r.id, a.value ->> 1, a.value ->> 2, NULL, NULL
	FROM chunks c CROSS JOIN json_each(c.answers) AS a CROSS JOIN requests r ON r.id = a.value ->> 0
	WHERE c.answers IS NOT NULL AND json_array_length(a.value) = 3 AND r.body_key IS NOT NULL;

-- name: ledger_fold_paged
INSERT INTO temp.fold (key, request, offset, length, chunk, custom_id)
	SELECT unhex(a.value ->> 3), a.value ->> 0, a.value ->> 1, a.value ->> 2, c.id, a.value ->> 4
	FROM chunks c CROSS JOIN json_each(c.answers) AS a
	WHERE c.answers IS NOT NULL AND json_array_length(a.value) = 5;

-- name: ledger_fold_insert
INSERT OR IGNORE INTO ledger (key, request, offset, length, chunk, custom_id)
	SELECT key, request, offset, length, chunk, custom_id FROM temp.fold ORDER BY key, request;

-- name: ledger_fold_clear
UPDATE chunks SET answers = NULL WHERE answers IS NOT NULL;

-- name: conn_small_cache
PRAGMA cache_size = -4096;

-- name: ledger_any
SELECT EXISTS (SELECT 1 FROM ledger), EXISTS (SELECT 1 FROM jobs WHERE canonical_keys = 0);

-- name: plan_job_insert
INSERT INTO jobs (id, provider, input, model, limits, dir, output, state,
	max_attempts, created_at, updated_at, endpoint, provider_files, model_map, default_max_tokens, canonical_keys, store_key, bucket, paged, key)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1,
	MAX((SELECT COALESCE(MAX(key), 0) FROM jobs), (SELECT COALESCE(MAX(id), 0) >> 40 FROM requests),
	(SELECT COALESCE(MAX(id), 0) >> 40 FROM request_pages)) + 1) RETURNING key;

-- name: conn_cache
PRAGMA cache_size = -32768;

-- name: plan_ids_drop
DROP TABLE IF EXISTS temp.plan_ids;

-- name: plan_page_insert
INSERT INTO request_pages (id, n, data) VALUES (?, ?, ?);

-- name: plan_id_line
SELECT line FROM temp.plan_ids WHERE custom_id = ?;

-- name: plan_id_insert
INSERT INTO temp.plan_ids (custom_id, line) VALUES (?, ?);

-- name: plan_ids_create
CREATE TEMP TABLE plan_ids (custom_id TEXT PRIMARY KEY, line INTEGER NOT NULL) WITHOUT ROWID;

-- name: plan_id_insert_first
INSERT OR IGNORE INTO temp.plan_ids (custom_id, line) VALUES (?, ?);

-- name: plan_chunk_span
UPDATE chunks SET first_ordinal = ?, last_ordinal = ?, paged = ?, id_sum = ?, id_mix = ?
	WHERE job_id = ? AND id = ?;

-- name: ledger_lookup
-- The answers to the keys (:keys), a placeholder each, then the plan's
-- job key. A ledger row folded from a paged chunk names its chunk and
-- custom_id (its request succeeded there, and stays so); an older one
-- joins its request's row, succeeded, or pending in a chunk settled on the
-- chunk (requests_settled 2).
SELECT l.key, j.id, j.dir, c.results_path, COALESCE(l.custom_id, r.custom_id), l.offset, l.length
FROM ledger l
LEFT JOIN requests r ON l.chunk IS NULL AND r.id = l.request
JOIN jobs j ON j.key = l.request >> 40
JOIN chunks c ON c.job_id = j.id AND c.id = COALESCE(l.chunk, r.chunk_id)
WHERE l.key IN (:keys) AND j.key != ? AND c.results_path != ''
	AND (l.chunk IS NOT NULL OR r.state = 'succeeded' OR (r.state = 'pending' AND c.requests_settled = 2));

-- name: overlays
-- The overlay rows of a paged plan's requests with ids in a range
-- (scanOverlay).
SELECT id & 1099511627775, line, custom_id, chunk_id, idx, offset, length, tokens, attempt, state, body_key
FROM requests WHERE id BETWEEN ? AND ?;

-- name: overlays_in_order
SELECT id & 1099511627775, line, custom_id, chunk_id, idx, offset, length, tokens, attempt, state, body_key
FROM requests WHERE id BETWEEN ? AND ? ORDER BY id;

-- name: overlay_insert
INSERT INTO requests (id, line, custom_id, chunk_id, idx, offset, length, tokens, attempt, state, body_key)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: page_first
SELECT COALESCE(MAX(id), ?) FROM request_pages WHERE id BETWEEN ? AND ?;

-- name: pages_of_range
SELECT id & ?, n, data FROM request_pages WHERE id BETWEEN ? AND ? ORDER BY id;

-- name: paged_chunk
SELECT j.key, j.paged, c.attempt, c.first_ordinal, c.last_ordinal, c.requests_settled, c.paged,
	c.overlaid, c.id_sum, c.id_mix
	FROM jobs j JOIN chunks c ON c.job_id = j.id WHERE j.id = ? AND c.id = ?;

-- name: job_layout
SELECT key, paged FROM jobs WHERE id = ?;

-- name: chunks_settled
SELECT id, requests_settled FROM chunks WHERE job_id = ?;

-- Migration 0004's Go step (summary.go: importJobFiles).

-- name: import_jobs
SELECT id, dir FROM jobs;

-- name: import_cancel_at
UPDATE jobs SET cancel_requested_at = ? WHERE id = ?;

-- The migrations' own bookkeeping (tracker.go: apply).

-- name: migrate_table
CREATE TABLE IF NOT EXISTS schema_version (
	version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL);

-- name: migrate_versions
SELECT version FROM schema_version;

-- name: migrate_applied
SELECT COUNT(*) FROM schema_version WHERE version = ?;

-- name: migrate_record
INSERT INTO schema_version (version, name, applied_at) VALUES (?, ?, ?);

-- name: integrity_check
PRAGMA integrity_check;
