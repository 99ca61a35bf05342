-- Mirrors SQLite's 0017_plan_identity.sql: where a --store keeps a job's
-- files, "jobs/ID/PLAN" (PLAN random per plan; empty for a job planned
-- before, whose files are under "jobs/ID"), and each chunk file's XXH3-128
-- recorded as it is written (empty for chunks of earlier versions).
ALTER TABLE jobs ADD COLUMN store_key TEXT NOT NULL DEFAULT '';
ALTER TABLE chunks ADD COLUMN file_digest TEXT NOT NULL DEFAULT '';
