-- Mirrors SQLite's 0017_store_key.sql: where a --store keeps a job's
-- files, "jobs/ID/PLAN" (PLAN random per plan); empty for a job planned
-- before, whose files are under "jobs/ID".
ALTER TABLE jobs ADD COLUMN store_key TEXT NOT NULL DEFAULT '';
