-- The PostgreSQL tracker's schema (docs/scale-out.md, "PostgreSQL"): the
-- SQLite schema as it stands after migrations/0006_edges.sql, in one step.
-- Times are unix nanoseconds (BIGINT), as in SQLite, so both backends hand
-- the same values to the same code. Two names differ: OFFSET is reserved
-- in PostgreSQL, so the byte offsets are byte_offset.

-- Jobs: one input file driven through one provider. key is the job's
-- small integer, the high bits of its request rows' ids; a sequence hands
-- keys out, so a new job never inherits an old job's rows.
CREATE SEQUENCE job_keys;
CREATE TABLE jobs (
    id                  TEXT PRIMARY KEY,
    key                 BIGINT NOT NULL UNIQUE DEFAULT nextval('job_keys'),
    provider            TEXT NOT NULL,
    input               TEXT NOT NULL,
    input_size          BIGINT NOT NULL DEFAULT 0,
    input_mtime         BIGINT NOT NULL DEFAULT 0,
    input_hash          TEXT NOT NULL DEFAULT '',
    model               TEXT NOT NULL DEFAULT '',
    limits              TEXT NOT NULL DEFAULT '{}', -- JSON of sluice.Limits
    dir                 TEXT NOT NULL,
    output              TEXT NOT NULL DEFAULT '',
    state               TEXT NOT NULL CHECK (state IN ('planning','planned','running','merging','done','cancelled')),
    requests            BIGINT NOT NULL DEFAULT 0,
    rejected            BIGINT NOT NULL DEFAULT 0,
    max_attempts        INTEGER NOT NULL DEFAULT 3,
    cancel_requested_at BIGINT NOT NULL DEFAULT 0,
    reused              BIGINT NOT NULL DEFAULT 0,
    max_cost            DOUBLE PRECISION,
    endpoint            TEXT NOT NULL DEFAULT '',
    provider_files      TEXT NOT NULL DEFAULT 'live' CHECK (provider_files IN ('live', 'deleted', 'kept')),
    created_at          BIGINT NOT NULL,
    updated_at          BIGINT NOT NULL
);
ALTER SEQUENCE job_keys OWNED BY jobs.key;

-- Chunks: one per provider batch attempt.
CREATE TABLE chunks (
    job_id            TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    id                BIGINT NOT NULL,
    attempt           INTEGER NOT NULL CHECK (attempt >= 1),
    url               TEXT NOT NULL,
    model             TEXT NOT NULL,
    path              TEXT NOT NULL,
    requests          INTEGER NOT NULL,
    bytes             BIGINT NOT NULL,
    est_tokens        BIGINT NOT NULL DEFAULT 0,
    bound             TEXT NOT NULL DEFAULT '',
    state             TEXT NOT NULL CHECK (state IN ('pending','uploading','uploaded','creating','submitted','done','failed')),
    file_id           TEXT NOT NULL DEFAULT '',
    batch_id          TEXT NOT NULL DEFAULT '',
    batch_status      TEXT NOT NULL DEFAULT '',
    intent_at         BIGINT NOT NULL DEFAULT 0,
    next_poll_at      BIGINT NOT NULL DEFAULT 0,
    polls             INTEGER NOT NULL DEFAULT 0,
    submitted_at      BIGINT NOT NULL DEFAULT 0,
    ended_at          BIGINT NOT NULL DEFAULT 0,
    last_error        TEXT NOT NULL DEFAULT '',
    error_code        TEXT NOT NULL DEFAULT '',
    stuck             TEXT NOT NULL DEFAULT '',
    input_tokens      BIGINT NOT NULL DEFAULT 0,
    output_tokens     BIGINT NOT NULL DEFAULT 0,
    results_path      TEXT NOT NULL DEFAULT '', -- final results file, relative to the job dir
    fetch_failures    INTEGER NOT NULL DEFAULT 0,
    max_output_tokens BIGINT NOT NULL DEFAULT 0,
    no_max_requests   BIGINT NOT NULL DEFAULT 0,
    usage_est_tokens  BIGINT NOT NULL DEFAULT 0,
    queue_refusals    INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (job_id, id)
);
CREATE INDEX chunks_state ON chunks (job_id, state);
CREATE INDEX chunks_batch ON chunks (batch_id);

-- Requests: one row per valid input line, keyed by (job key << 40) |
-- ordinal as in SQLite (migrations/0003_lean_requests.sql), partitioned by
-- job: each job's rows are a partition of their own, requests_j<key>,
-- covering its key's range of ids (tracker/postgres_plan.go). A plan
-- writes its partition with COPY with only the primary key to maintain,
-- and builds the partition's other indexes when it commits: a unique index
-- on custom_id and one on (chunk_id, idx). Maintaining the custom_id index
-- row by row (random inserts) cost three times the COPY itself. Deleting a
-- job drops its partition.
CREATE TABLE requests (
    id          BIGINT NOT NULL,
    line        BIGINT NOT NULL,
    custom_id   TEXT COLLATE "C" NOT NULL,
    chunk_id    BIGINT NOT NULL,
    idx         INTEGER NOT NULL,
    byte_offset BIGINT NOT NULL,
    length      INTEGER NOT NULL,
    tokens      BIGINT NOT NULL DEFAULT 0,
    attempt     INTEGER NOT NULL DEFAULT 1,
    state       TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending','succeeded','failed')),
    body_key    BYTEA,
    PRIMARY KEY (id)
) PARTITION BY RANGE (id);

-- Every error recorded for a chunk's attempt, oldest first.
CREATE TABLE attempt_errors (
    seq      BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id   TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    chunk_id BIGINT NOT NULL,
    attempt  INTEGER NOT NULL,
    code     TEXT NOT NULL,
    message  TEXT NOT NULL,
    at       BIGINT NOT NULL
);
CREATE INDEX attempt_errors_job ON attempt_errors (job_id, chunk_id);

-- What the last merge of a job produced.
CREATE TABLE job_summaries (
    job_id        TEXT PRIMARY KEY REFERENCES jobs(id) ON DELETE CASCADE,
    output        TEXT NOT NULL,
    errors        TEXT NOT NULL,
    merge_order   TEXT NOT NULL,
    output_bytes  BIGINT NOT NULL,
    output_mtime  BIGINT NOT NULL,
    errors_bytes  BIGINT NOT NULL,
    lines         BIGINT NOT NULL,
    succeeded     BIGINT NOT NULL,
    failed        BIGINT NOT NULL,
    retried       BIGINT NOT NULL,
    batches       INTEGER NOT NULL,
    retry_batches INTEGER NOT NULL,
    input_tokens  BIGINT NOT NULL,
    output_tokens BIGINT NOT NULL,
    cancelled     BOOLEAN NOT NULL DEFAULT false,
    started_at    BIGINT NOT NULL,
    finished_at   BIGINT NOT NULL
);

-- The ledger of bought answers (docs/money.md).
CREATE TABLE ledger (
    key         BYTEA PRIMARY KEY,
    request     BIGINT NOT NULL, -- requests.id of the answered request
    byte_offset BIGINT NOT NULL, -- of its record in the chunk's results file
    length      BIGINT NOT NULL
);

-- Which earlier jobs a job's reused results came from.
CREATE TABLE reuse_sources (
    job_id     TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    source_job TEXT NOT NULL,
    requests   BIGINT NOT NULL,
    PRIMARY KEY (job_id, source_job)
);
