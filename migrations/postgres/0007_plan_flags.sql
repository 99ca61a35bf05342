-- Mirrors SQLite's 0012_plan_flags.sql: the --model-map and
-- --default-max-tokens a job was planned with; NULL when unknown.
ALTER TABLE jobs ADD COLUMN model_map text;
ALTER TABLE jobs ADD COLUMN default_max_tokens bigint;
