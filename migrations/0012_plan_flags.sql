-- What else shaped a job's plan (issue 21, item 5; cmd/sluice/identity.go):
-- the --model-map (sorted, "old=new,...") and --default-max-tokens it was
-- planned with, so that a later command saying otherwise re-plans the job
-- while nothing of it is at the provider, or is refused naming the flag
-- and both values. NULL: planned before sluice recorded them (unknown).
-- Numbered after the issue: migrations apply in any order (migrations.go).
ALTER TABLE jobs ADD COLUMN model_map TEXT;
ALTER TABLE jobs ADD COLUMN default_max_tokens INTEGER;
