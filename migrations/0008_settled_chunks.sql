-- How a finished chunk's outcomes are recorded (tracker/chunks.go,
-- finishOutcomes; docs/money.md, "Never buying the same answer twice").
--
-- requests_settled: 0 the chunk has not finished its requests; 1 finished,
-- each request's state is on its row; 2 finished, and a request still
-- pending on its row in this chunk is succeeded. A chunk whose successes
-- are exactly the requests left in it (nearly every chunk) is marked 2 and
-- no request row is written: rewriting a million rows' state cost 3 to 7
-- CPU seconds of a 1,000,000-request run.
ALTER TABLE chunks ADD COLUMN requests_settled INTEGER NOT NULL DEFAULT 0
    CHECK (requests_settled IN (0, 1, 2));
-- The chunks finished before this migration have their states on the rows.
UPDATE chunks SET requests_settled = 1 WHERE state IN ('done', 'failed');
-- answers: the JSON array [[request id, offset, length], ...] of the
-- chunk's successes and their records in its results file, until the next
-- plan folds them into the ledger, sorted by key, and clears it. A ledger
-- row written as each chunk finished was an insert at a random place of a
-- B-tree keyed by hash: 6 to 15 CPU seconds per million requests, in a run
-- that may never be reused from. Chunks finished before this migration
-- wrote their ledger rows then.
ALTER TABLE chunks ADD COLUMN answers TEXT;
