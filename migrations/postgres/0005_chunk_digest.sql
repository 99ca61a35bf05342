-- Mirrors SQLite's 0011_chunk_digest.sql (TestPostgresSchemaMirrorsSQLite):
-- a chunk's content digest, recorded with its first intent; empty for
-- chunks an earlier version began to send.
ALTER TABLE chunks ADD COLUMN digest text NOT NULL DEFAULT '';
