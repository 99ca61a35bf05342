-- When the results of a chunk's batch may expire at the provider (issue
-- 23, item 5), in Unix nanoseconds, 0 when unknown: the submission plus the
-- provider's retention (docs/providers.md, "Results expire"), refined when
-- a poll finds the batch ended. `sluice status` warns of results not yet
-- fetched that expire within a day; `sluice run` fetches the
-- soonest-expiring first.
ALTER TABLE chunks ADD COLUMN results_expire_at INTEGER NOT NULL DEFAULT 0;
