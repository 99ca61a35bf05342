package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/internal/telemetry"
)

// submit takes a pending or uploaded chunk to submitted: upload (when the
// provider uses files), then create, each behind a committed intent.
func (d *Dispatcher) submit(ctx context.Context, c *sluice.Chunk) (bool, error) {
	if d.underMinimum(c) {
		// A retry of a few requests (a plan cuts no chunk under the
		// minimum) that nothing more can join (combine.go): the provider
		// would refuse the batch; never send it. With --fallback realtime
		// the schedule sends it through the synchronous API instead
		// (schedule.go).
		return true, d.failForGood(ctx, c, c.State, sluice.CodeBelowMinimum, fmt.Sprintf(
			"%d request(s) left to retry, under the provider's minimum of %d per batch (--min-batch-requests): not sent", c.Requests, d.job.Limits.MinBatchRequests))
	}
	log := d.chunkLog(c)
	if c.State == sluice.ChunkPending || !d.caps.Files {
		// The chunk file is the body to send: gone means the job directory
		// was deleted or damaged under the job (or, with a store, that it
		// is not in the store either).
		if err := d.fetch(ctx, c.Path); err != nil {
			return false, fatal(fmt.Errorf("chunk %d: %w", c.ID, err))
		}
		if _, err := os.Stat(filepath.Join(d.job.Dir, c.Path)); err != nil {
			return false, fatal(fmt.Errorf("chunk %d cannot be sent: %w; the job directory %s was changed under the job: restore it, or start over with --job NEW_NAME", c.ID, err, d.job.Dir))
		}
		if err := d.checkChunkFile(c, true); err != nil {
			return false, err
		}
	}
	if c.State == sluice.ChunkPending && d.caps.Files {
		c.State, c.IntentAt = sluice.ChunkUploading, d.now()
		if err := d.store.UpdateChunk(ctx, c, sluice.ChunkPending); err != nil {
			return false, fatal(err)
		}
		fileID, err := d.prov.Upload(ctx, c.Ref(d.job.Dir))
		if err != nil {
			return true, d.refused(ctx, c, sluice.ChunkUploading, sluice.ChunkPending, "upload", sluice.CodeUploadFailed, err)
		}
		c.State, c.FileID = sluice.ChunkUploaded, fileID
		c.ClearError()
		if err := d.store.UpdateChunk(ctx, c, sluice.ChunkUploading); err != nil {
			return false, fatal(err)
		}
		log.Info().Str("file_id", fileID).Int64("bytes", c.Bytes).Msg("chunk uploaded")
		if d.halted.Load() {
			return true, nil // a sibling failed fatally: start no new call
		}
	}
	if d.caps.Untagged {
		d.createMu.Lock()
		defer d.createMu.Unlock()
		if d.halted.Load() {
			return false, nil // a sibling failed fatally while this one waited
		}
	}
	from := c.State
	c.State, c.IntentAt = sluice.ChunkCreating, d.now()
	if err := d.store.UpdateChunk(ctx, c, from); err != nil {
		return false, fatal(err)
	}
	b, err := d.prov.Create(ctx, c.Ref(d.job.Dir), c.FileID)
	if err != nil {
		return true, d.refused(ctx, c, sluice.ChunkCreating, from, "create batch", sluice.CodeCreateFailed, err)
	}
	return true, d.submitted(ctx, c, b)
}

// underMinimum reports whether c is a chunk not yet sent with fewer
// requests than the provider's minimum per batch (Limits.MinBatchRequests):
// the rest of a retry. It is a rule of the chunk's own fields, so a
// restarted run decides as the first did.
func (d *Dispatcher) underMinimum(c *sluice.Chunk) bool {
	min := d.job.Limits.MinBatchRequests
	return min > 1 && c.Requests < min && c.State == sluice.ChunkPending
}

// toRealtime reports whether a chunk not at the provider goes through the
// synchronous API: at the fallback, or, with --fallback realtime, when it
// is under the provider's minimum per batch and nothing can join it
// (combine.go: the schedule asks this only then).
func (d *Dispatcher) toRealtime(c *sluice.Chunk, fallback bool) bool {
	return fallback || d.underMinimum(c) && d.opts.StuckFallback && d.rt != nil
}

// submitted records a created batch.
func (d *Dispatcher) submitted(ctx context.Context, c *sluice.Chunk, b sluice.Batch) error {
	c.State, c.BatchID, c.BatchStatus = sluice.ChunkSubmitted, b.ID, b.ProviderStatus
	c.ClearError()
	c.SubmittedAt, c.Polls = d.now(), 0
	c.NextPollAt = d.nextPoll(0)
	d.estimateExpiry(c)
	if err := d.store.UpdateChunk(ctx, c, sluice.ChunkCreating); err != nil {
		return fatal(err)
	}
	d.chunkLog(c).Info().Int("requests", c.Requests).Int64("est_tokens", c.EstTokens).Msg("batch submitted")
	return nil
}

// refused handles a failed upload or create. The intent is rolled back to
// the state before it (nothing exists at the provider), except when the
// call may have landed: when ctx was cancelled mid-call (the intent stays
// for the next run to reconcile), and when its answer was lost and the
// lookup that would have settled it failed too (sluice.ErrUnsettled: the
// intent stays and reconcileOne looks again). Bad credentials stop the run; a request
// the provider refuses for good fails the chunk's attempt
// (sluice.CodeInvalidRequest); other failures are recorded with code and
// retried.
func (d *Dispatcher) refused(ctx context.Context, c *sluice.Chunk, intent, back sluice.ChunkState, what string, code sluice.ErrorCode, err error) error {
	log := d.chunkLog(c)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, sluice.ErrUnsettled) {
		// The call may have taken effect (its answer was cut by a reset)
		// and the listing that would have found it failed too. Rolling the
		// intent back would let the next try create a second batch for the
		// same chunk: bought twice. So the chunk keeps its intent state and
		// reconcileOne looks at the provider again at NextPollAt, in this
		// run's schedule or at the next run's start; the step is redone only
		// when a listing shows nothing, after the grace (docs/crash-safety.md).
		c.SetError(code, fmt.Sprintf("%s: %v", what, err))
		c.Polls++
		c.NextPollAt = d.nextPoll(c.Polls)
		log.Warn().Err(err).Time("look_again_at", c.NextPollAt).Msg(what + ": answer lost and lookup failed; will look again before repeating it")
		if uerr := d.store.UpdateChunk(context.WithoutCancel(ctx), c, intent); uerr != nil {
			return fatal(uerr)
		}
		return nil
	}
	var ae *sluice.APIError
	if errors.As(err, &ae) && (ae.Status == http.StatusUnauthorized || ae.Status == http.StatusForbidden) {
		c.State = back
		c.SetError(code, fmt.Sprintf("%s: %v", what, err))
		if uerr := d.store.UpdateChunk(context.WithoutCancel(ctx), c, intent); uerr != nil {
			return fatal(uerr)
		}
		return fatal(err) // the provider's error names the call and the chunk
	}
	if local(err) || errors.Is(err, sluice.ErrUnreachable) {
		// Our disk, or an endpoint that has not answered for the whole
		// retry budget: submitting again cannot help. Nothing exists at
		// the provider, so the intent is rolled back.
		c.State = back
		c.SetError(code, fmt.Sprintf("%s: %v", what, err))
		if uerr := d.store.UpdateChunk(context.WithoutCancel(ctx), c, intent); uerr != nil {
			return fatal(uerr)
		}
		return fatal(err) // the provider's error names the call and the chunk
	}
	if errors.As(err, &ae) && !ae.Retryable() {
		// The provider refuses this body for good: spend the attempt.
		log.Error().Err(err).Msg(what + " refused")
		c.State = intent
		return d.failAttempt(ctx, c, intent, sluice.CodeInvalidRequest, fmt.Sprintf("%s refused: %v", what, err))
	}
	c.State = back
	c.SetError(code, fmt.Sprintf("%s: %v", what, err))
	c.Polls++
	c.NextPollAt = d.nextPoll(c.Polls)
	log.Warn().Err(err).Time("retry_at", c.NextPollAt).Msg(what + " failed; will retry")
	if uerr := d.store.UpdateChunk(context.WithoutCancel(ctx), c, intent); uerr != nil {
		return fatal(uerr)
	}
	return nil
}

// reconcile settles chunks a previous run left in an intent state: the
// call may or may not have reached the provider. The provider's listings
// decide; only when nothing matches, and the grace period after the intent
// has passed, is the step redone.
func (d *Dispatcher) reconcile(ctx context.Context, chunks []*sluice.Chunk) error {
	for _, c := range chunks {
		if c.State != sluice.ChunkUploading && c.State != sluice.ChunkCreating {
			continue
		}
		if _, err := d.reconcileOne(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

func (d *Dispatcher) reconcileOne(ctx context.Context, c *sluice.Chunk) (bool, error) {
	if d.caps.Untagged {
		// No create of ours may land while we match by time and size.
		d.createMu.Lock()
		defer d.createMu.Unlock()
	}
	log := d.chunkLog(c)
	from := c.State
	if s := telemetry.Get(); s != nil {
		s.Reconcile("chunk")
	}
	fileID, batchID, err := d.prov.Find(ctx, c.Ref(d.job.Dir))
	switch {
	case errors.Is(err, sluice.ErrNoListing):
		// Nothing to look at: redo the step. For Cloudflare the window
		// between the call and recording its answer is one response read.
		log.Warn().Msg("provider cannot list batches; a crash inside submit may have created a batch twice")
	case err != nil && ctx.Err() == nil && sluice.Retryable(err):
		// The listing failed for now (5xx, 429, a broken connection, after
		// the client's own retries): the chunk keeps its intent and is
		// looked up again later. Redoing the step blind could buy it twice;
		// stopping the run for a passing outage would help no one.
		c.Polls++
		c.NextPollAt = d.nextPoll(c.Polls)
		log.Warn().Err(err).Time("look_again_at", c.NextPollAt).Msg("reconcile: the provider's listing failed; will look again")
		if err := d.store.UpdateChunk(ctx, c, from); err != nil {
			return false, fatal(err)
		}
		return false, nil
	case err != nil:
		return false, fatal(fmt.Errorf("reconcile chunk %d (left %s by an earlier run): %w; inspect the provider's batches and run 'sluice status %s --chunks'", c.ID, c.State, err, d.job.ID))
	}
	if batchID != "" && d.caps.Files && c.FileID != "" && fileID != c.FileID {
		// The tracker knows the file this chunk uploaded: a batch made from
		// another file was bought for other bytes (another state directory,
		// another run of the same job name) and is never adopted.
		log.Warn().Str("batch_id", batchID).Str("input_file_id", fileID).Str("file_id", c.FileID).
			Msg("reconcile: a batch under this chunk's name was made from another file; not adopted")
		fileID, batchID = "", ""
	}
	if fileID != "" && c.FileID == "" {
		c.FileID = fileID
	}
	now := d.now()
	switch {
	case batchID != "":
		c.State, c.BatchID, c.BatchStatus = sluice.ChunkSubmitted, batchID, "adopted"
		c.SubmittedAt, c.NextPollAt = now, now
		d.estimateExpiry(c)
		log.Info().Str("batch_id", batchID).Msg("reconciled: adopted the batch a previous run created")
	case from == sluice.ChunkUploading && c.FileID != "":
		c.State, c.NextPollAt = sluice.ChunkUploaded, time.Time{}
		log.Info().Str("file_id", c.FileID).Msg("reconciled: adopted the file a previous run uploaded")
	case !errors.Is(err, sluice.ErrNoListing) && now.Before(c.IntentAt.Add(d.opts.ReconcileGrace)):
		// The call may still be landing: look again later.
		c.NextPollAt = c.IntentAt.Add(d.opts.ReconcileGrace)
		log.Info().Time("look_again_at", c.NextPollAt).Msg("reconcile: nothing found yet; waiting in case the earlier run's call still lands")
	case c.FileID != "" && d.caps.Files:
		c.State, c.NextPollAt = sluice.ChunkUploaded, time.Time{}
		log.Info().Str("file_id", c.FileID).Msg("reconciled: file found, batch not created")
	default:
		c.State, c.NextPollAt = sluice.ChunkPending, time.Time{}
		log.Info().Msg("reconciled: nothing found at the provider; will submit again")
	}
	if err := d.store.UpdateChunk(ctx, c, from); err != nil {
		return false, fatal(err)
	}
	return c.State != from, nil
}

// checkChunkFile proves the chunk file is the one the job planned before
// any of its bytes are sent (submit, realtime) or moved into next
// attempts (regroup): a file that does not give the chunk's FileDigest,
// recorded when the file was written (another plan's, in a store two plans
// share; or changed under the job), is a fatal error, never a silent send
// of other bodies. With digest, the chunk's Digest, if it has none yet, is
// read in the same pass: recorded with submit's intent and carried by the
// upload and the batch, what a later run's Find must see to adopt them.
func (d *Dispatcher) checkChunkFile(c *sluice.Chunk, digest bool) error {
	digest = digest && c.Digest == ""
	if !digest && c.FileDigest == "" {
		return nil // an earlier version's chunk: nothing to check against
	}
	dg, fdg, err := sluice.ChunkDigests(filepath.Join(d.job.Dir, c.Path), digest)
	if err != nil {
		return fatal(fmt.Errorf("chunk %d: %w", c.ID, err))
	}
	if c.FileDigest != "" && fdg != c.FileDigest {
		return fatal(fmt.Errorf("chunk %d: the chunk file %s is not the one job %s planned (XXH3-128 %s, want %s): "+
			"another plan of the same job name owns this file (two state directories sharing one --store?), or it was changed; "+
			"nothing of it was sent. Run with the state directory or database that planned it, or start over with --job NEW_NAME",
			c.ID, c.Path, d.job.ID, fdg, c.FileDigest))
	}
	if digest {
		c.Digest = dg
	}
	return nil
}
