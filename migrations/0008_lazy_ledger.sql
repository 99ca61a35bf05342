-- The ledger of bought answers is filled lazily (docs/money.md, "The
-- ledger"): finishing a chunk records each success's place in the chunk's
-- results file on the request's own row, a write it makes anyway, and the
-- answers are folded into the ledger, sorted by key, when a job is next
-- planned in the state directory. A ledger row per success written as the
-- chunk finished was one random insert into a B-tree keyed by hash: at a
-- million requests, 6 to 15 CPU seconds of a run that never reuses them.
ALTER TABLE requests ADD COLUMN res_offset INTEGER NOT NULL DEFAULT 0;
ALTER TABLE requests ADD COLUMN res_length INTEGER NOT NULL DEFAULT 0;
-- 1 once the chunk's successes are in the ledger. Chunks finished before
-- this migration wrote their ledger rows then.
ALTER TABLE chunks ADD COLUMN ledger_folded INTEGER NOT NULL DEFAULT 0;
UPDATE chunks SET ledger_folded = 1;
