-- Ledger keys of the canonical form (docs/money.md, "Never buying the same
-- answer twice"): a job planned before them keyed its requests on the
-- body's bytes without whitespace (0); one planned since, on the body's
-- canonical form (1). While a job of the old keys is in the state
-- directory, a plan also looks its requests up by their old keys, so the
-- answers bought under them keep being reused.
ALTER TABLE jobs ADD COLUMN canonical_keys INTEGER NOT NULL DEFAULT 0;
