package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sluice-batch/sluice"
)

// poll asks the provider about a live batch and, when it has ended, reads
// its results and records every request's outcome.
func (d *Dispatcher) poll(ctx context.Context, c *sluice.Chunk) (bool, error) {
	log := d.chunkLog(c)
	ref := c.Ref(d.job.Dir)
	b, err := d.prov.Poll(ctx, ref, c.BatchID)
	if err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		if errors.Is(err, sluice.ErrNotFound) {
			// The provider no longer knows the batch: its requests were never
			// answered, so they go to the next attempt.
			log.Error().Err(err).Msg("batch unknown to the provider")
			return true, d.failAttempt(ctx, c, sluice.ChunkSubmitted, "batch_not_found", fmt.Sprintf("batch %s: %v", c.BatchID, err))
		}
		c.Polls++
		c.LastError = fmt.Sprintf("poll: %v", err)
		c.NextPollAt = d.nextPoll(c.Polls)
		log.Warn().Err(err).Time("retry_at", c.NextPollAt).Msg("poll failed; will retry")
		if uerr := d.store.UpdateChunk(ctx, c, sluice.ChunkSubmitted); uerr != nil {
			return false, fatal(uerr)
		}
		return false, nil
	}
	c.Polls++
	c.BatchStatus = b.ProviderStatus
	if !b.Status.Ended() {
		c.NextPollAt = d.nextPoll(c.Polls)
		c.LastError = ""
		if err := d.store.UpdateChunk(ctx, c, sluice.ChunkSubmitted); err != nil {
			return false, fatal(err)
		}
		return false, nil
	}
	if b.Status == sluice.BatchFailed {
		if b.QueueFull() {
			// The provider's enqueued-token queue is full: wait for our own
			// batches of this model to drain, then submit again, without
			// spending an attempt.
			d.setQueueFull(c.Model, true)
			c.State, c.BatchID = sluice.ChunkPending, ""
			if c.FileID != "" && d.prov.UsesFiles() {
				c.State = sluice.ChunkUploaded
			}
			c.LastError = "token_limit_exceeded: " + firstMessage(b.Errors)
			c.NextPollAt = d.nextPoll(c.Polls)
			log.Warn().Str("reason", "token_limit_exceeded").Msg("provider queue full; will resubmit when our batches drain")
			if err := d.store.UpdateChunk(ctx, c, sluice.ChunkSubmitted); err != nil {
				return false, fatal(err)
			}
			return true, nil
		}
		code, msg := "batch_failed", "the provider failed the batch"
		if len(b.Errors) > 0 {
			code, msg = b.Errors[0].Code, describeErrors(b.Errors)
		}
		log.Error().Str("reason", msg).Msg("batch failed")
		return true, d.failAttempt(ctx, c, sluice.ChunkSubmitted, code, msg)
	}
	dir := filepath.Join(d.job.Dir, "results", fmt.Sprintf("raw-c%06d-a%d", c.ID, c.Attempt))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, fatal(err)
	}
	files, err := d.prov.Fetch(ctx, ref, b, dir)
	if err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		c.LastError = fmt.Sprintf("download results: %v", err)
		c.NextPollAt = d.nextPoll(c.Polls)
		log.Warn().Err(err).Msg("download failed; will retry")
		if uerr := d.store.UpdateChunk(ctx, c, sluice.ChunkSubmitted); uerr != nil {
			return false, fatal(uerr)
		}
		return false, nil
	}
	if err := d.conclude(ctx, c, sluice.ChunkSubmitted, func(e *ending) error {
		return d.prov.Decode(ctx, ref, files, e.lookup, e.add)
	}); err != nil {
		return false, err
	}
	os.RemoveAll(dir)
	log.Info().Str("status", string(b.Status)).Msg("batch finished")
	return true, nil
}

// failAttempt ends a chunk whose batch produced no results: every request
// goes to the next attempt, or fails for good with code and message when
// attempts are spent.
func (d *Dispatcher) failAttempt(ctx context.Context, c *sluice.Chunk, from sluice.ChunkState, code, msg string) error {
	c.LastError = code + ": " + msg
	return d.conclude(ctx, c, from, func(e *ending) error {
		e.missingCode, e.missingMsg = code, msg
		return nil
	})
}

// abandon ends a chunk of a cancelled job that was never submitted: its
// requests fail for good as cancelled.
func (d *Dispatcher) abandon(ctx context.Context, c *sluice.Chunk) error {
	return d.conclude(ctx, c, c.State, func(e *ending) error {
		e.missingCode, e.missingMsg = "cancelled", "the job was cancelled before this request was submitted"
		e.noRetry = true
		return nil
	})
}

func firstMessage(es []sluice.BatchError) string {
	if len(es) == 0 {
		return ""
	}
	return es[0].Message
}

func describeErrors(es []sluice.BatchError) string {
	s := ""
	for i, e := range es {
		if i == 3 {
			s += fmt.Sprintf("; and %d more", len(es)-3)
			break
		}
		if i > 0 {
			s += "; "
		}
		s += e.Code + ": " + e.Message
		if e.Line > 0 {
			s += fmt.Sprintf(" (line %d)", e.Line)
		}
	}
	return s
}
