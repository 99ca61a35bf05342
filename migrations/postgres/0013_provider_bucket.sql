-- Mirrors SQLite's 0018_provider_bucket.sql: the bucket a Vertex or
-- Bedrock job's batches live in, as resolved (empty: none, or planned
-- before sluice recorded it).
ALTER TABLE jobs ADD COLUMN bucket TEXT NOT NULL DEFAULT '';
