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
