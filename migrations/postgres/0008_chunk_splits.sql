-- Mirrors SQLite's 0013_chunk_splits.sql (TestPostgresSchemaMirrorsSQLite):
-- how many of a chunk's attempts were splits for the provider's
-- enqueued-token limit, which spend none of the job's attempts.
ALTER TABLE chunks ADD COLUMN splits integer NOT NULL DEFAULT 0;
