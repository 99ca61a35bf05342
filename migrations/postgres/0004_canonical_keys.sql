-- Mirrors SQLite's 0010_canonical_keys.sql: 0 for a job planned before
-- ledger keys were canonical (docs/money.md), 1 for one planned since.
ALTER TABLE jobs ADD COLUMN canonical_keys smallint NOT NULL DEFAULT 0;
