-- Trust at the edges (issue 11; cmd/sluice/identity.go, cmd/sluice/cleanup.go).
-- The endpoint a job talks to, as resolved from --base-url, the provider's
-- environment variable or its preset (and Cloudflare's account): a job's
-- identity comes from resolved values, never from how they were given.
ALTER TABLE jobs ADD COLUMN endpoint TEXT NOT NULL DEFAULT '';
-- The job's files at the provider (uploaded inputs, result files): 'live'
-- until the job is done and they are deleted ('deleted'), or kept on
-- request ('kept', --keep-provider-files). A done job still 'live' was
-- interrupted between its merge and the cleanup: the next run finishes it.
ALTER TABLE jobs ADD COLUMN provider_files TEXT NOT NULL DEFAULT 'live'
    CHECK (provider_files IN ('live', 'deleted', 'kept'));
-- How many times in a row a chunk's batch failed token_limit_exceeded
-- while no other batch of its model in this job was live: the chunk alone
-- is over the provider's enqueued-token limit, and past a bound its
-- requests fail instead of being resubmitted for ever.
ALTER TABLE chunks ADD COLUMN queue_refusals INTEGER NOT NULL DEFAULT 0;
