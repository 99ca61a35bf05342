-- Mirrors SQLite's 0008_settled_chunks.sql, so the two schemas keep the
-- same columns (TestPostgresSchemaMirrorsSQLite). PostgreSQL records every
-- outcome on its request's row and writes the ledger as each chunk
-- finishes (one statement per finish, run by the server beside other
-- workers'), so a finished chunk is settled on its rows (1) and keeps no
-- answers for a later fold.
ALTER TABLE chunks ADD COLUMN requests_settled smallint NOT NULL DEFAULT 0;
UPDATE chunks SET requests_settled = 1 WHERE state IN ('done', 'failed');
ALTER TABLE chunks ADD COLUMN answers text;
