-- A plan's identity in a shared --store (docs/scale-out.md, "Two plans,
-- one store"):
--
-- jobs.store_key is where the store keeps the job's files
-- (sluice.Job.StoreKey): "jobs/ID/PLAN", PLAN random per plan, so that two
-- state directories planning the same job name into one store never share
-- (and overwrite) each other's chunk, results or rejected files. Empty:
-- planned before, its files under "jobs/ID".
--
-- chunks.file_digest is the chunk file's XXH3-128 (sluice.Chunk.FileDigest),
-- computed as the file is written and checked before it is sent. Empty:
-- written by an earlier version.
ALTER TABLE jobs ADD COLUMN store_key TEXT NOT NULL DEFAULT '';
ALTER TABLE chunks ADD COLUMN file_digest TEXT NOT NULL DEFAULT '';
