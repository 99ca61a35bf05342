-- Consecutive polls of an ended batch whose results could not be fetched or
-- read (or whose poll the provider refused for good). The dispatcher fails
-- the attempt, so its requests are retried, when it reaches its bound.
ALTER TABLE chunks ADD COLUMN fetch_failures INTEGER NOT NULL DEFAULT 0;
