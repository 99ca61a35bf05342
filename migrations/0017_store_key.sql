-- Where a --store keeps a job's files (sluice.Job.StoreKey;
-- docs/scale-out.md, "Job files"): "jobs/ID/PLAN", PLAN random per plan, so
-- that two state directories planning the same job name into one store
-- never share (and overwrite) each other's chunk, results or rejected
-- files. Empty: planned before, its files under "jobs/ID".
ALTER TABLE jobs ADD COLUMN store_key TEXT NOT NULL DEFAULT '';
