-- Request pages (tracker/pages.go; docs/architecture.md, "The tracker's
-- request records"). A plan's requests are no longer one row each: they
-- go in pages of up to 1,024 consecutive ordinals, each page one packed
-- BLOB. A row per request cost 3 CPU seconds per million to write (the
-- table and its two indexes) and 1 to 2 more to read back, a third of a
-- whole 1,000,000-request run (BENCHMARKS.md, "End to end").
--
-- A page holds what the plan decided and never changes (line, custom_id,
-- plan chunk, place in the chunk file, tokens, body key). What happens to a
-- request later is on the chunk while it is the default (pending in its
-- plan chunk; succeeded when the chunk is settled on the chunk, or when it
-- is in chunk 0, answered from earlier jobs), and on a row of requests
-- otherwise: a request moved to a retry chunk, failed, or settled one by
-- one gets a full row there, which from then on is its record.
CREATE TABLE request_pages (
    id   INTEGER PRIMARY KEY, -- (job key << 40) | the page's first ordinal
    n    INTEGER NOT NULL,    -- its requests: ordinals id .. id + n - 1
    data BLOB NOT NULL
);

-- 1: the job's plan is in request_pages (every job planned from now on);
-- 0: one row per request, as before.
ALTER TABLE jobs ADD COLUMN paged INTEGER NOT NULL DEFAULT 0;

-- For a chunk of a paged plan: the first and last ordinal of its
-- requests, how many of them the pages hold, and how many of those have
-- since been given a row of their own (moved, failed, settled by row).
ALTER TABLE chunks ADD COLUMN first_ordinal INTEGER NOT NULL DEFAULT -1;
ALTER TABLE chunks ADD COLUMN last_ordinal INTEGER NOT NULL DEFAULT -1;
ALTER TABLE chunks ADD COLUMN paged INTEGER NOT NULL DEFAULT 0;
ALTER TABLE chunks ADD COLUMN overlaid INTEGER NOT NULL DEFAULT 0;
-- Two sums over the chunk's request ids, each of a different 64-bit mix of
-- the id (wrapping), so a finish whose outcomes are every request of the
-- chunk is known to be one without reading the pages (tracker/pages.go,
-- settleWhole).
ALTER TABLE chunks ADD COLUMN id_sum INTEGER NOT NULL DEFAULT 0;
ALTER TABLE chunks ADD COLUMN id_mix INTEGER NOT NULL DEFAULT 0;

-- A ledger row folded from a paged chunk names its chunk and custom_id
-- itself (its request may have no row to join); NULL for rows folded
-- before, which still join requests.
ALTER TABLE ledger ADD COLUMN chunk INTEGER;
ALTER TABLE ledger ADD COLUMN custom_id TEXT;

-- custom_ids are checked unique while a job is planned (the splitter's
-- filter, then Plan.FindCustomID's index of the plan, built only when the
-- filter finds a candidate); nothing looks a request up by custom_id after.
DROP INDEX requests_custom_id;
