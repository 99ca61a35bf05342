-- Mirrors SQLite's 0008_lazy_ledger.sql, so the backends hold the same
-- facts (TestPostgresSchemaMirrorsSQLite): each success's record in its
-- chunk's results file is kept on the request's row. PostgreSQL still
-- writes the ledger as each chunk finishes (one statement per finish, run
-- by the server beside other workers' finishes), so every chunk is folded.
ALTER TABLE requests ADD COLUMN res_offset bigint NOT NULL DEFAULT 0;
ALTER TABLE requests ADD COLUMN res_length bigint NOT NULL DEFAULT 0;
ALTER TABLE chunks ADD COLUMN ledger_folded smallint NOT NULL DEFAULT 1;
