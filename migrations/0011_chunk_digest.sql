-- A chunk's content digest (sluice.ChunkDigest: the first 128 bits of the
-- SHA-256 of its file, in hex), recorded with its first intent. Uploads and
-- batches carry it (file name, batch metadata, display name), and a run
-- that reconciles after a crash adopts a provider object only when it
-- carries the digest of this chunk's exact bytes (docs/crash-safety.md,
-- "Reconcile"). Empty for chunks whose first intent an earlier version
-- recorded: those adopt only a batch made from the file the tracker knows.
ALTER TABLE chunks ADD COLUMN digest TEXT NOT NULL DEFAULT '';
