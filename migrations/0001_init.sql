-- Jobs: one input file driven through one provider.
CREATE TABLE jobs (
    id           TEXT PRIMARY KEY,
    provider     TEXT NOT NULL,
    input        TEXT NOT NULL,
    input_size   INTEGER NOT NULL DEFAULT 0,
    input_mtime  INTEGER NOT NULL DEFAULT 0, -- unix nanoseconds
    input_hash   TEXT NOT NULL DEFAULT '',
    model        TEXT NOT NULL DEFAULT '',
    limits       TEXT NOT NULL DEFAULT '{}', -- JSON of sluice.Limits
    dir          TEXT NOT NULL,
    output       TEXT NOT NULL DEFAULT '',
    state        TEXT NOT NULL CHECK (state IN ('planning','planned','running','merging','done','cancelled')),
    requests     INTEGER NOT NULL DEFAULT 0,
    rejected     INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL DEFAULT 3,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL
);

-- Chunks: one per provider batch attempt.
CREATE TABLE chunks (
    job_id        TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    id            INTEGER NOT NULL,
    attempt       INTEGER NOT NULL CHECK (attempt >= 1),
    url           TEXT NOT NULL,
    model         TEXT NOT NULL,
    path          TEXT NOT NULL,
    requests      INTEGER NOT NULL,
    bytes         INTEGER NOT NULL,
    est_tokens    INTEGER NOT NULL DEFAULT 0,
    bound         TEXT NOT NULL DEFAULT '',
    state         TEXT NOT NULL CHECK (state IN ('pending','uploading','uploaded','creating','submitted','done','failed')),
    file_id       TEXT NOT NULL DEFAULT '',
    batch_id      TEXT NOT NULL DEFAULT '',
    batch_status  TEXT NOT NULL DEFAULT '',
    intent_at     INTEGER NOT NULL DEFAULT 0, -- unix ns when the last intent was committed
    next_poll_at  INTEGER NOT NULL DEFAULT 0, -- unix ns
    polls         INTEGER NOT NULL DEFAULT 0,
    submitted_at  INTEGER NOT NULL DEFAULT 0,
    ended_at      INTEGER NOT NULL DEFAULT 0,
    last_error    TEXT NOT NULL DEFAULT '',
    input_tokens  INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    results_path  TEXT NOT NULL DEFAULT '', -- final results file, relative to the job dir
    PRIMARY KEY (job_id, id)
);
CREATE INDEX chunks_state ON chunks (job_id, state);

-- Requests: one row per valid input line.
CREATE TABLE requests (
    job_id    TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    ordinal   INTEGER NOT NULL,
    line      INTEGER NOT NULL,
    custom_id TEXT NOT NULL,
    chunk_id  INTEGER NOT NULL,
    idx       INTEGER NOT NULL, -- position in the chunk
    offset    INTEGER NOT NULL, -- item bytes in the chunk file
    length    INTEGER NOT NULL,
    tokens    INTEGER NOT NULL DEFAULT 0,
    attempt   INTEGER NOT NULL DEFAULT 1,
    state     TEXT NOT NULL CHECK (state IN ('pending','succeeded','failed')),
    PRIMARY KEY (job_id, ordinal)
) WITHOUT ROWID;
CREATE UNIQUE INDEX requests_custom_id ON requests (job_id, custom_id);
CREATE INDEX requests_chunk ON requests (job_id, chunk_id, idx);
