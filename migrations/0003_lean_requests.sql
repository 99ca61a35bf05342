-- Leaner request rows. Recording one row per request is the critical path
-- of planning a big file (BENCHMARKS.md), so a row is keyed by one integer,
-- the job's key and the request's ordinal packed as (job key << 40) |
-- ordinal, instead of the job's text id in every row and index, and the
-- attempt and state of a new row come from their defaults. A request's
-- custom_id stays unique within its job, and a chunk's requests are found
-- in order through an index. The tracker deletes a job's requests itself
-- (a range of ids), as it always did.
ALTER TABLE jobs ADD COLUMN key INTEGER NOT NULL DEFAULT 0;
UPDATE jobs SET key = rowid;
CREATE UNIQUE INDEX jobs_key ON jobs (key);

CREATE TABLE requests_v3 (
    id        INTEGER PRIMARY KEY, -- (job key << 40) | ordinal
    line      INTEGER NOT NULL,
    custom_id TEXT NOT NULL,
    chunk_id  INTEGER NOT NULL,
    idx       INTEGER NOT NULL, -- position in the chunk
    offset    INTEGER NOT NULL, -- item bytes in the chunk file
    length    INTEGER NOT NULL,
    tokens    INTEGER NOT NULL DEFAULT 0,
    attempt   INTEGER NOT NULL DEFAULT 1,
    state     TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending','succeeded','failed'))
);
INSERT INTO requests_v3 (id, line, custom_id, chunk_id, idx, offset, length, tokens, attempt, state)
    SELECT (j.key << 40) | r.ordinal, r.line, r.custom_id, r.chunk_id, r.idx, r.offset, r.length, r.tokens, r.attempt, r.state
    FROM requests r JOIN jobs j ON j.id = r.job_id;
DROP TABLE requests;
ALTER TABLE requests_v3 RENAME TO requests;
CREATE UNIQUE INDEX requests_custom_id ON requests (id >> 40, custom_id);
CREATE INDEX requests_chunk ON requests (id >> 40, chunk_id, idx);
