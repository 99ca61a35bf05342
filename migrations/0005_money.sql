-- Money (docs/money.md): what a cost estimate, a spend cap and the reuse
-- of earlier results need.
--
-- Per chunk: the sum of its requests' max output tokens (max_tokens,
-- max_completion_tokens or max_output_tokens) and how many requests set
-- none, the upper bound of its output; and, once it ended, sluice's input
-- estimate of exactly the requests whose results reported usage, so that
-- input_tokens / usage_est_tokens is the estimate's learned error.
ALTER TABLE chunks ADD COLUMN max_output_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE chunks ADD COLUMN no_max_requests INTEGER NOT NULL DEFAULT 0;
ALTER TABLE chunks ADD COLUMN usage_est_tokens INTEGER NOT NULL DEFAULT 0;

-- Per request: its key in the ledger, a hash of (provider, base URL,
-- model, url, canonical body); NULL for requests planned before.
ALTER TABLE requests ADD COLUMN body_key BLOB;

-- Per job: how many requests were answered from earlier jobs' results at
-- planning, and the last spend cap a run was given (NULL: none).
ALTER TABLE jobs ADD COLUMN reused INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN max_cost REAL;

-- The ledger of bought answers: for a body key, the request whose
-- succeeded result answers it, and where that result's record sits in the
-- results file of the chunk that finished it. The first success of a key
-- wins. A job's rows go with the job (DeleteJob); a row whose request or
-- results file is gone is not used.
CREATE TABLE ledger (
    key     BLOB PRIMARY KEY,
    request INTEGER NOT NULL, -- requests.id of the answered request
    offset  INTEGER NOT NULL, -- of its record in the chunk's results file
    length  INTEGER NOT NULL
) WITHOUT ROWID;

-- Which earlier jobs a job's reused results came from.
CREATE TABLE reuse_sources (
    job_id     TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    source_job TEXT NOT NULL,
    requests   INTEGER NOT NULL,
    PRIMARY KEY (job_id, source_job)
);
