package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/sluice-batch/sluice"
)

// poll asks the provider about a live batch and, when it has ended, reads
// its results and records every request's outcome.
//
// What the provider answers is not trusted (see ending for the results
// themselves):
//   - a batch the provider no longer knows (ErrNotFound) fails the attempt
//     at once: its requests go to the next attempt;
//   - a poll refused for good (a 4xx other than 404, 408, 409, 429), and
//     results that cannot be downloaded or read (an output file that 404s,
//     a download cut short on every HTTP retry), are tried again on later
//     polls, counted in chunk.FetchFailures; at Options.MaxFetchFailures
//     the attempt fails and its requests go to the next attempt;
//   - a batch still not ended StuckAfter after it was submitted (stuck in
//     validating or finalizing, say) is cancelled at the provider; what the
//     cancelled batch delivers is kept and the rest retried. When the
//     provider cannot cancel it, or has not ended it StuckCancelWait later,
//     the attempt fails and its requests go to a new batch;
//   - polls that fail for other reasons (the network, 5xx, 429 after the
//     HTTP layer's retries) are repeated on the poll schedule, but not past
//     StuckAfter + StuckCancelWait.
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
			return true, d.failAttempt(ctx, c, sluice.ChunkSubmitted, sluice.CodeBatchNotFound, fmt.Sprintf("batch %s: %v", c.BatchID, err))
		}
		c.Polls++
		if local(err) {
			// Our disk, not the provider: polling again cannot help.
			return false, fatal(fmt.Errorf("poll batch %s of chunk %d: %w", c.BatchID, c.ID, err))
		}
		if errors.Is(err, sluice.ErrUnreachable) {
			return false, fatal(fmt.Errorf("poll batch %s of chunk %d: %w", c.BatchID, c.ID, err))
		}
		var ae *sluice.APIError
		if errors.As(err, &ae) && (ae.Status == http.StatusUnauthorized || ae.Status == http.StatusForbidden) {
			// Bad credentials are the user's to fix, not the batch's fault:
			// stop without spending anything.
			return false, fatal(fmt.Errorf("poll batch %s of chunk %d: %w", c.BatchID, c.ID, err))
		}
		if errors.As(err, &ae) && !ae.Retryable() {
			return d.fetchFailed(ctx, c, sluice.CodePollRefused, fmt.Sprintf("poll refused: %v", err))
		}
		if age := d.age(c); age > d.opts.StuckAfter+d.opts.StuckCancelWait {
			log.Error().Err(err).Dur("age", age).Msg("batch could not be polled for too long; giving up on it")
			return true, d.failAttempt(ctx, c, sluice.ChunkSubmitted, sluice.CodeBatchStuck,
				fmt.Sprintf("batch %s could not be polled %s after it was submitted (last error: %v)", c.BatchID, roughDuration(age), err))
		}
		c.SetError(sluice.CodePollFailed, fmt.Sprintf("poll: %v", err))
		c.NextPollAt = d.nextPoll(c.Polls)
		log.Warn().Err(err).Time("retry_at", c.NextPollAt).Msg("poll failed; will retry")
		if uerr := d.store.UpdateChunk(ctx, c, sluice.ChunkSubmitted); uerr != nil {
			return false, fatal(uerr)
		}
		return false, nil
	}
	c.Polls++
	c.BatchStatus = b.ProviderStatus
	switch b.Status {
	case sluice.BatchInProgress, sluice.BatchFinalizing, sluice.BatchCompleted:
		// The provider took a batch of this model into its queue: if it
		// was the probe sent after the queue was last full, the queue has
		// room again (schedule.go, admit).
		d.queueTook(c)
	}
	if !b.Status.Ended() {
		if d.fallbackOn() {
			return d.fallbackCancel(ctx, c, b)
		}
		if d.age(c) > d.opts.StuckAfter {
			return d.unstick(ctx, c, b)
		}
		c.NextPollAt = d.nextPoll(c.Polls)
		c.FetchFailures = 0
		c.ClearError()
		if err := d.store.UpdateChunk(ctx, c, sluice.ChunkSubmitted); err != nil {
			return false, fatal(err)
		}
		return false, nil
	}
	return d.ended(ctx, c, b)
}

// age is how long ago the chunk's batch was submitted.
func (d *Dispatcher) age(c *sluice.Chunk) time.Duration {
	if c.SubmittedAt.IsZero() {
		return 0
	}
	return d.now().Sub(c.SubmittedAt)
}

// unstick handles a batch that has not ended StuckAfter after it was
// submitted: cancel it at the provider, and wait (up to StuckCancelWait)
// for the cancelled batch to end, so the lines it finished are kept. A
// batch that cannot be cancelled, or does not end, fails the attempt.
func (d *Dispatcher) unstick(ctx context.Context, c *sluice.Chunk, b sluice.Batch) (bool, error) {
	log := d.chunkLog(c)
	age := d.age(c)
	phase := b.ProviderStatus
	if phase == "" {
		phase = string(b.Status)
	}
	reason := c.Stuck // the phase it was first found stuck in
	if reason == "" {
		reason = fmt.Sprintf("stuck in %s for %s", phase, roughDuration(age))
	}
	if b.Status != sluice.BatchCancelling {
		nb, err := d.prov.Cancel(ctx, c.BatchID)
		if err != nil {
			if ctx.Err() != nil {
				return false, ctx.Err()
			}
			log.Error().Err(err).Str("reason", reason).Msg("stuck batch could not be cancelled; its requests go to a new batch")
			return true, d.failAttempt(ctx, c, sluice.ChunkSubmitted, sluice.CodeBatchStuck,
				fmt.Sprintf("%s; cancel at the provider failed (%v); its requests go to a new batch", reason, err))
		}
		log.Warn().Str("reason", reason).Str("status", nb.ProviderStatus).Msg("stuck batch; cancel requested")
		if nb.ID == "" {
			nb.ID = c.BatchID
		}
		b = nb
		if b.ProviderStatus != "" {
			c.BatchStatus = b.ProviderStatus
		}
		c.Stuck = reason
		if b.Status.Ended() {
			c.SetError(sluice.CodeBatchStuck, reason+"; cancelled at the provider")
			return d.ended(ctx, c, b)
		}
	}
	if age > d.opts.StuckAfter+d.opts.StuckCancelWait {
		log.Error().Str("reason", reason).Msg("stuck batch did not end after the cancel request; its requests go to a new batch")
		return true, d.failAttempt(ctx, c, sluice.ChunkSubmitted, sluice.CodeBatchStuck,
			fmt.Sprintf("%s; cancel requested, still %s %s later; its requests go to a new batch", reason, c.BatchStatus, roughDuration(age-d.opts.StuckAfter)))
	}
	c.SetError(sluice.CodeBatchStuck, reason+"; cancel requested")
	c.NextPollAt = d.nextPoll(c.Polls)
	if err := d.store.UpdateChunk(ctx, c, sluice.ChunkSubmitted); err != nil {
		return false, fatal(err)
	}
	return false, nil
}

// ended reads the results of an ended batch and concludes its chunk.
func (d *Dispatcher) ended(ctx context.Context, c *sluice.Chunk, b sluice.Batch) (bool, error) {
	log := d.chunkLog(c)
	if !b.ResultsExpireAt.IsZero() {
		c.ResultsExpireAt = b.ResultsExpireAt // the provider's word
	}
	if b.Status == sluice.BatchFailed && b.QueueFull() {
		return d.queueRefused(ctx, c, b)
	}
	if b.Status == sluice.BatchFailed {
		code, msg := sluice.CodeBatchFailed, "the provider failed the batch"
		if len(b.Errors) > 0 && b.Errors[0].Code != "" {
			// The provider's own code, verbatim (docs/contract.md).
			code, msg = sluice.ErrorCode(b.Errors[0].Code), describeErrors(b.Errors)
		} else if len(b.Errors) > 0 {
			msg = describeErrors(b.Errors)
		}
		log.Error().Str("reason", msg).Msg("batch failed")
		return true, d.failAttempt(ctx, c, sluice.ChunkSubmitted, code, msg)
	}
	// The results are read as they download when the provider can
	// (sluice.ResultStreamer), else downloaded to raw files and read back.
	// Either way nothing is recorded before conclude commits the chunk's
	// results file and FinishChunk runs (docs/crash-safety.md).
	r := &reading{d: d, c: c, b: b, ref: c.Ref(d.job.Dir), stuck: c.Stuck}
	dir := filepath.Join(d.job.Dir, "results", fmt.Sprintf("raw-c%06d-a%d", c.ID, c.Attempt))
	streams, err := r.stream(ctx)
	if !streams {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return false, fatal(err)
		}
		files, ferr := d.prov.Fetch(ctx, r.ref, b, dir)
		if ferr != nil {
			if ctx.Err() == nil && !local(ferr) {
				os.Remove(dir) // only if empty: a partial fetch is kept for the next try
			}
			return d.unfetched(ctx, c, ferr)
		}
		err = r.finish(ctx, func(lookup func(int) (string, bool), add func(sluice.Result) error) error {
			return d.prov.Decode(ctx, r.ref, files, lookup, add)
		})
	}
	if err != nil {
		return d.unread(ctx, c, err)
	}
	switch bad := r.bad; {
	case bad != nil && streams:
		d.keepRaw(ctx, c, b, dir, bad)
	case bad != nil:
		// Keep what the provider sent, for whoever looks into it.
		log.Warn().Int("malformed_lines", bad.Count).Str("first", bad.Summary(3)).Str("raw_dir", dir).
			Msg("provider output had malformed lines; their requests are retried; the raw files are kept")
	default:
		os.RemoveAll(dir)
	}
	log.Info().Str("status", string(b.Status)).Msg("batch finished")
	return true, nil
}

// queueRefused handles a batch the provider failed because its
// enqueued-token queue was full. A chunk refused while it was alone at the
// provider is itself over the limit: it is split, and a chunk of one
// request, which cannot be, fails after a few such refusals (split.go).
// Otherwise the chunk waits for our own batches of its model to drain,
// then is submitted again, without spending an attempt.
func (d *Dispatcher) queueRefused(ctx context.Context, c *sluice.Chunk, b sluice.Batch) (bool, error) {
	log := d.chunkLog(c)
	alone, known := d.wasAlone(c.ID)
	if !known {
		alone, known = d.aloneInStore(ctx, c)
	}
	switch {
	case alone:
		c.QueueRefusals++
	case known:
		c.QueueRefusals = 0
	}
	if alone && c.Requests > 1 && d.job.State != sluice.JobCancelled {
		return true, d.splitRefused(ctx, c, b)
	}
	if c.QueueRefusals >= d.opts.MaxQueueRefusals {
		msg := aloneMessage(c, c.QueueRefusals, b)
		log.Error().Str("reason", msg).Msg("request over the provider's enqueued-token limit by itself; it fails")
		return true, d.failForGood(ctx, c, sluice.ChunkSubmitted, sluice.CodeQueueFull, msg)
	}
	d.setQueueFull(c.Model)
	c.State, c.BatchID, c.Stuck = sluice.ChunkPending, "", ""
	if c.FileID != "" && d.caps.Files {
		c.State = sluice.ChunkUploaded
	}
	c.SetError(sluice.CodeQueueFull, firstMessage(b.Errors))
	c.NextPollAt = d.nextPoll(c.Polls)
	log.Warn().Str("reason", "token_limit_exceeded").Msg("provider queue full; will resubmit when our batches drain")
	if err := d.store.UpdateChunk(ctx, c, sluice.ChunkSubmitted); err != nil {
		return false, fatal(err)
	}
	return true, nil
}

// reading is the reading of an ended batch's results into conclude.
type reading struct {
	d     *Dispatcher
	c     *sluice.Chunk
	b     sluice.Batch
	ref   sluice.BatchRef
	stuck string                 // why we cancelled the batch ("": we did not)
	bad   *sluice.MalformedLines // lines that did not parse, of the last read
}

// finish concludes the chunk with the results read (one conclude at a
// time per Dispatcher).
func (r *reading) finish(ctx context.Context, read func(lookup func(int) (string, bool), add func(sluice.Result) error) error) error {
	d, b := r.d, r.b
	r.bad = nil
	select {
	case d.concluding <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-d.concluding }()
	return d.conclude(ctx, r.c, sluice.ChunkSubmitted, func(e *ending) error {
		if b.Status == sluice.BatchCancelled && r.stuck == "" {
			// A batch cancelled before it ran some lines (in validating,
			// it ran none) leaves them out of its files: they were
			// cancelled, not lost.
			e.missingCode, e.missingMsg = sluice.CodeBatchCancelled, "the batch was cancelled before this request ran"
		}
		if r.stuck != "" {
			// Cancelled by us: what it finished is kept, the rest retried.
			e.notes = append(e.notes, fmt.Sprintf("%s; cancelled at the provider (ended %s), its finished lines kept",
				r.stuck, b.Status))
			e.notesCode = sluice.CodeBatchStuck
			e.missingCode, e.missingMsg = sluice.CodeBatchStuck, "the batch was "+r.stuck+" and cancelled; this request got no result"
		}
		add := e.add
		if rt, ok := d.prov.Codec().(sluice.ResultTranslator); ok {
			add = func(res sluice.Result) error {
				rt.TranslateResult(r.ref, &res)
				return e.add(res)
			}
		}
		err := read(e.lookup, add)
		if errors.As(err, &r.bad) {
			// Lines that do not parse were skipped; every other line was
			// read. Their requests count as missing.
			e.malformed = r.bad
			return nil
		}
		return err
	})
}

// stream reads the results as they download, when the provider can; it
// reports false when they are to be downloaded to files instead.
func (r *reading) stream(ctx context.Context) (bool, error) {
	streamer, ok := r.d.prov.(sluice.ResultStreamer)
	if !ok || !streamer.StreamsResults(r.ref) {
		return false, nil
	}
	err := r.finish(ctx, func(lookup func(int) (string, bool), add func(sluice.Result) error) error {
		var addErr error
		err := streamer.StreamResults(ctx, r.ref, r.b, lookup, func(res sluice.Result) error {
			if err := add(res); err != nil {
				addErr = err
				return err
			}
			return nil
		})
		if err != nil && addErr == nil && !errors.As(err, new(*sluice.MalformedLines)) {
			// The download failed: the ending is dropped, nothing of it
			// recorded.
			return &unfetchedError{err}
		}
		return err
	})
	if errors.Is(err, sluice.ErrStreamBroken) && ctx.Err() == nil {
		// The download broke after some lines were read: they were
		// dropped with the ending. Start over from files, where the
		// HTTP layer repeats a cut download (docs/crash-safety.md): a
		// break mid-stream costs a download, not one of the batch's
		// fetch tries, as it did before results were streamed.
		r.d.chunkLog(r.c).Warn().Err(err).Msg("results download broke mid-stream; nothing of it kept; downloading them to files instead")
		return false, nil
	}
	return true, err
}

// unread handles results that were fetched (or streamed) but could not
// be read into the chunk's ending.
func (d *Dispatcher) unread(ctx context.Context, c *sluice.Chunk, err error) (bool, error) {
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	var ue *unfetchedError
	if errors.As(err, &ue) {
		return d.unfetched(ctx, c, ue.err)
	}
	if errors.Is(err, ErrFatal) {
		return false, err
	}
	if local(err) {
		return false, fatal(err)
	}
	return d.fetchFailed(ctx, c, sluice.CodeResultsUnreadable, err.Error())
}

// unfetchedError is a failed download of a batch's results, met while
// they were streamed into conclude.
type unfetchedError struct{ err error }

func (e *unfetchedError) Error() string { return e.err.Error() }
func (e *unfetchedError) Unwrap() error { return e.err }

// unfetched handles results that could not be downloaded (Fetch failed, or
// a stream of them broke): our own disk and an unreachable endpoint stop
// the run (the next run fetches again); anything else is tried again on the
// next poll, counted by fetchFailed.
func (d *Dispatcher) unfetched(ctx context.Context, c *sluice.Chunk, err error) (bool, error) {
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	if local(err) || errors.Is(err, sluice.ErrUnreachable) {
		return false, fatal(fmt.Errorf("chunk %d: download results of batch %s: %w", c.ID, c.BatchID, err))
	}
	if errors.Is(err, sluice.ErrNotFound) && !c.ResultsExpireAt.IsZero() && !d.now().Before(c.ResultsExpireAt) {
		// Gone past the provider's retention: asking again cannot bring
		// them back.
		msg := fmt.Sprintf("results of batch %s expired at the provider (%s) before they were fetched: %v",
			c.BatchID, c.ResultsExpireAt.UTC().Format(time.RFC3339), err)
		d.chunkLog(c).Error().Str("reason", msg).Msg("results expired; its requests go to the next attempt")
		return true, d.failAttempt(ctx, c, sluice.ChunkSubmitted, sluice.CodeResultsExpired, msg)
	}
	return d.fetchFailed(ctx, c, sluice.CodeResultsUnavailable, fmt.Sprintf("download results: %v", err))
}

// estimateExpiry sets a just-submitted chunk's ResultsExpireAt to the
// earliest its batch's results may expire: its creation (the intent
// before the create call, when recorded, else the submission) plus the
// provider's retention.
func (d *Dispatcher) estimateExpiry(c *sluice.Chunk) {
	if d.opts.ResultsRetention <= 0 {
		return
	}
	from := c.SubmittedAt
	if !c.IntentAt.IsZero() && c.IntentAt.Before(from) {
		from = c.IntentAt
	}
	c.ResultsExpireAt = from.Add(d.opts.ResultsRetention)
}

// keepRaw downloads, once the chunk is recorded, the raw result files of a
// streamed batch whose output had malformed lines, into dir, for whoever
// looks into it (a streamed batch otherwise leaves no raw files). Best
// effort: a failure is only logged.
func (d *Dispatcher) keepRaw(ctx context.Context, c *sluice.Chunk, b sluice.Batch, dir string, bad *sluice.MalformedLines) {
	log := d.chunkLog(c)
	ev := log.Warn().Int("malformed_lines", bad.Count).Str("first", bad.Summary(3))
	err := os.MkdirAll(dir, 0o700)
	if err == nil {
		_, err = d.prov.Fetch(ctx, c.Ref(d.job.Dir), b, dir)
	}
	if err != nil {
		os.Remove(dir) // only if empty
		ev.AnErr("keep_error", err).Msg("provider output had malformed lines; their requests are retried; its raw files could not be kept")
		return
	}
	ev.Str("raw_dir", dir).Msg("provider output had malformed lines; their requests are retried; the raw files are kept")
}

// fetchFailed records a poll whose results could not be had (or a poll the
// provider refused for good). It is tried again on the poll schedule until
// MaxFetchFailures such polls in a row; then the attempt fails and the
// batch's requests go to the next attempt, never stuck and never lost.
func (d *Dispatcher) fetchFailed(ctx context.Context, c *sluice.Chunk, code sluice.ErrorCode, msg string) (bool, error) {
	log := d.chunkLog(c)
	c.FetchFailures++
	if c.FetchFailures >= d.opts.MaxFetchFailures {
		log.Error().Str("reason", msg).Int("tries", c.FetchFailures).Msg("giving up on the batch's results; its requests go to the next attempt")
		return true, d.failAttempt(ctx, c, sluice.ChunkSubmitted, code,
			fmt.Sprintf("%s (failed on %d polls in a row)", msg, c.FetchFailures))
	}
	c.SetError(code, fmt.Sprintf("%s (try %d of %d)", msg, c.FetchFailures, d.opts.MaxFetchFailures))
	c.NextPollAt = d.nextPoll(c.Polls)
	log.Warn().Str("reason", msg).Int("try", c.FetchFailures).Time("retry_at", c.NextPollAt).Msg("batch results unavailable; will try again")
	if err := d.store.UpdateChunk(ctx, c, sluice.ChunkSubmitted); err != nil {
		return false, fatal(err)
	}
	return false, nil
}

// failAttempt ends a chunk whose batch produced no results: every request
// goes to the next attempt, or fails for good with code and message when
// attempts are spent.
func (d *Dispatcher) failAttempt(ctx context.Context, c *sluice.Chunk, from sluice.ChunkState, code sluice.ErrorCode, msg string) error {
	c.SetError(code, msg)
	return d.conclude(ctx, c, from, func(e *ending) error {
		e.missingCode, e.missingMsg, e.failed = code, msg, true
		return nil
	})
}

// failForGood ends a chunk whose batch produced no results and can never
// succeed as it is: every request fails for good with code and message.
func (d *Dispatcher) failForGood(ctx context.Context, c *sluice.Chunk, from sluice.ChunkState, code sluice.ErrorCode, msg string) error {
	c.SetError(code, msg)
	return d.conclude(ctx, c, from, func(e *ending) error {
		e.missingCode, e.missingMsg, e.failed, e.noRetry = code, msg, true, true
		return nil
	})
}

// local reports whether err is a failure of our own file system (a full
// disk, a file that vanished under the job) rather than of the provider:
// such errors stop the run instead of spending the batch's fetch tries.
func local(err error) bool {
	var pe *fs.PathError
	var le *os.LinkError
	return errors.As(err, &pe) || errors.As(err, &le)
}

// roughDuration shows a duration the way a person reads it: whole hours
// from an hour on ("27h"), else to the millisecond.
func roughDuration(d time.Duration) string {
	if d >= time.Hour {
		return fmt.Sprintf("%dh", int(d.Round(time.Hour)/time.Hour))
	}
	if d >= time.Minute {
		return d.Round(time.Minute).String()
	}
	return d.Round(time.Millisecond).String()
}

// abandon ends a chunk of a cancelled job that was never submitted: its
// requests fail for good as cancelled.
func (d *Dispatcher) abandon(ctx context.Context, c *sluice.Chunk) error {
	return d.conclude(ctx, c, c.State, func(e *ending) error {
		e.missingCode, e.missingMsg = sluice.CodeCancelled, "the job was cancelled before this request was submitted"
		e.noRetry, e.failed = true, true
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
