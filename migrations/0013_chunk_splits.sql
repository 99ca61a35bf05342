-- A chunk's splits (issue 21, item 3; dispatcher/split.go): how many of
-- its attempts were the provider's enqueued-token limit refusing a batch of
-- its requests by itself, or sluice cutting a chunk not yet submitted
-- smaller for that limit. Its requests went to new chunks of the next
-- attempt each time, which spends none of the job's attempts: a chunk may
-- be retried while attempt - splits is below them. Numbered after the
-- issue and item, so branches of work in parallel do not take the same
-- version.
ALTER TABLE chunks ADD COLUMN splits INTEGER NOT NULL DEFAULT 0;
