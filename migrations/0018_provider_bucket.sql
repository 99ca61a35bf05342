-- The bucket a job's batches live in (cmd/sluice/identity.go): Vertex's
-- --vertex-bucket (gs://) and Bedrock's --bedrock-bucket (s3://), as
-- resolved from the flag, its environment variable or --store. A run that
-- resumes a job with another bucket is refused (exit 2) before anything is
-- sent: the batches at the provider read and write the recorded one.
-- Empty: no bucket (other providers), or planned before sluice recorded it
-- (recorded by the job's next run).
ALTER TABLE jobs ADD COLUMN bucket TEXT NOT NULL DEFAULT '';
