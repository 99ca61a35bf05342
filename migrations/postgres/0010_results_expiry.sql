-- Mirrors SQLite's 0015_results_expiry.sql (TestPostgresSchemaMirrorsSQLite):
-- when the results of a chunk's batch may expire at the provider, in Unix
-- nanoseconds, 0 when unknown.
ALTER TABLE chunks ADD COLUMN results_expire_at bigint NOT NULL DEFAULT 0;
