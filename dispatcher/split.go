package dispatcher

import (
	"context"
	"fmt"

	"github.com/sluice-batch/sluice"
)

// Chunks cut to the provider's enqueued-token limit (issue 21, item 3).
//
// The provider counts a batch's enqueued tokens its own way: OpenAI by its
// tokenizer, which differs from sluice's estimate by language and by how
// much of a body is not text; the emulator by body bytes / 4, 2.3 times
// the estimate on examples/requests.jsonl. No fixed margin holds, so the
// job learns, per model, how many tokens the provider counts per
// estimated token (its ratio), and cuts by it:
//
//   - A batch the provider refuses token_limit_exceeded while it is the
//     job's only batch of its model live is over the limit by itself. It is
//     split: the chunk ends failed (its batch was refused) and its requests
//     move to new chunks of the next attempt, cut at half its estimate and
//     half its requests (or smaller, as the ratio says), which are
//     submitted like any chunk; a half still refused alone is split again.
//     A split spends no attempt (Chunk.Splits counts them). A chunk of one
//     request cannot be split: it is sent again up to
//     Options.MaxQueueRefusals times while alone, then its request fails,
//     the message saying that it alone is over the provider's limit.
//   - Such a refusal of a chunk of est estimated tokens under
//     --max-enqueued-tokens L says the provider counted more than L for it:
//     the ratio is at least L/est. It is taken as 2 × ChunkTokenShare × L /
//     est (refusalRatio), the ratio at which the cut rule gives exactly its
//     halves. Finished batches teach a ratio too, from their reported usage
//     (Options.Learned, the whole state directory). The job uses the larger
//     of the two.
//   - With a ratio r above 1, every chunk cut from now on (the halves of a
//     split, the chunks of a retry) holds at most ChunkTokenShare × L / r
//     estimated tokens (cutTokens), and a chunk not yet submitted whose
//     estimate × r is over L is re-cut to that before it is submitted
//     (tooBig, recut): it ends failed without a batch, its requests moved
//     as by a split.
//     Admission counts every chunk's estimate × r against L.
//
// The refusal ratio lasts: split chunks stay in the tracker, failed with
// CodeQueueFull and their QueueRefusals, and a resumed run takes it back
// from them (restoreRefused). sluice cannot see other work in the
// organisation's queue: a refusal it caused counts as the chunk's own,
// and only makes chunks smaller than they need be.

// refusalRatio is the ratio a chunk of est estimated tokens refused while
// alone under a budget of limit teaches: the one at which the cut rule
// (cutTokens) gives its halves.
func refusalRatio(limit, est int64) float64 {
	return 2 * sluice.ChunkTokenShare * float64(limit) / float64(max(est, 1))
}

// ratio is how many tokens the provider counts per estimated token of
// model, as far as the job has learned: the larger of what finished
// batches' usage and what refusals taught. ok is false when nothing was.
func (d *Dispatcher) ratio(model string) (r float64, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r, ok = d.usage[model].InputRatio()
	if x, has := d.refusedRatio[model]; has && (!ok || x > r) {
		r, ok = x, true
	}
	return r, ok
}

// noteRefused records the ratio a refusal of model's batch taught.
func (d *Dispatcher) noteRefused(model string, r float64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if r > d.refusedRatio[model] {
		d.refusedRatio[model] = r
	}
}

// setUsage records what finished batches taught (Options.Learned).
func (d *Dispatcher) setUsage(l map[string]sluice.Learned) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.usage = l
}

// restoreRefused takes back the ratios the refusals of an earlier run (or
// another worker) taught, from the chunks they split.
func (d *Dispatcher) restoreRefused(chunks []*sluice.Chunk) {
	lim := d.job.Limits.MaxEnqueuedTokens
	if lim <= 0 {
		return
	}
	for _, c := range chunks {
		if c.State == sluice.ChunkFailed && c.ErrorCode == sluice.CodeQueueFull && c.QueueRefusals > 0 && c.Requests > 1 {
			d.noteRefused(c.Model, refusalRatio(lim, c.EstTokens))
		}
	}
}

// queueTokens is chunk c's estimate as it counts against
// MaxEnqueuedTokens: times the ratio learned.
func (d *Dispatcher) queueTokens(c *sluice.Chunk) int64 {
	if r, ok := d.ratio(c.Model); ok {
		return int64(float64(c.EstTokens)*r + 0.5)
	}
	return c.EstTokens
}

// cutTokens is the most estimated tokens a chunk of model cut now may
// hold, beyond the job's limits: ChunkTokenShare of MaxEnqueuedTokens as
// the provider counts, by the ratio learned; 0 when that is no tighter.
func (d *Dispatcher) cutTokens(model string) int64 {
	lim := d.job.Limits.MaxEnqueuedTokens
	if lim <= 0 {
		return 0
	}
	r, ok := d.ratio(model)
	if !ok || r <= 1 {
		return 0
	}
	return max(int64(float64(lim)*sluice.ChunkTokenShare/r), 1)
}

// tooBig reports whether chunk c, not yet submitted, is over
// MaxEnqueuedTokens as the provider counts and can be cut smaller.
func (d *Dispatcher) tooBig(c *sluice.Chunk) bool {
	lim := d.job.Limits.MaxEnqueuedTokens
	return lim > 0 && c.Requests > 1 && d.queueTokens(c) > lim
}

// recut cuts chunk c, not yet submitted, by the ratio learned: its
// requests move to new chunks, as by a split, and c ends failed without a
// batch.
func (d *Dispatcher) recut(ctx context.Context, c *sluice.Chunk) error {
	r, _ := d.ratio(c.Model)
	k := recut{attempt: c.Attempt + 1, tokens: d.cutTokens(c.Model), split: true}
	msg := fmt.Sprintf("not submitted: its %d estimated input tokens are about %d as the provider counts them (x%.2f, as this job learned), "+
		"over --max-enqueued-tokens %d; its %d requests were cut into chunks of at most %d estimated tokens",
		c.EstTokens, d.queueTokens(c), r, d.job.Limits.MaxEnqueuedTokens, c.Requests, cutLimit(k, d.job.Limits))
	d.chunkLog(c).Info().Str("reason", msg).Msg("chunk re-cut to the provider's token counting")
	return d.split(ctx, c, c.State, k, msg)
}

// splitRefused splits chunk c, whose batch the provider refused for its
// enqueued-token limit while no other batch of its model from this job was
// live (b says why).
func (d *Dispatcher) splitRefused(ctx context.Context, c *sluice.Chunk, b sluice.Batch) error {
	if lim := d.job.Limits.MaxEnqueuedTokens; lim > 0 {
		d.noteRefused(c.Model, refusalRatio(lim, c.EstTokens))
	}
	k := recut{attempt: c.Attempt + 1, tokens: max((c.EstTokens+1)/2, 1), requests: (c.Requests + 1) / 2, split: true}
	if t := d.cutTokens(c.Model); t > 0 && t < k.tokens {
		k.tokens = t
	}
	msg := fmt.Sprintf("the provider refused this batch for its enqueued-token limit while no other batch of model %s from this job was live (%s): "+
		"the batch alone is over the limit as the provider counts; its %d requests were split into chunks of at most %d estimated input tokens",
		c.Model, firstMessage(b.Errors), c.Requests, k.tokens)
	d.chunkLog(c).Warn().Str("reason", msg).Msg("batch over the provider's enqueued-token limit by itself; split")
	return d.split(ctx, c, sluice.ChunkSubmitted, k, msg)
}

// split ends chunk c (in state from) failed with msg, every request moved
// to new chunks cut as k says.
func (d *Dispatcher) split(ctx context.Context, c *sluice.Chunk, from sluice.ChunkState, k recut, msg string) error {
	c.SetError(sluice.CodeQueueFull, msg)
	return d.conclude(ctx, c, from, func(e *ending) error {
		e.missingCode, e.missingMsg, e.failed, e.split = sluice.CodeQueueFull, msg, true, &k
		return nil
	})
}

// cutLimit is the most estimated tokens a chunk cut by k under lim holds.
func cutLimit(k recut, lim sluice.Limits) int64 {
	if t := lim.ChunkTokens(); k.tokens <= 0 || t > 0 && t < k.tokens {
		return t
	}
	return k.tokens
}

// aloneInStore tells, from the tracker, whether chunk c's batch was the
// only one of its model from this job live at the provider while it was,
// for a batch this run did not submit (a resumed run, or --once runs):
// any other chunk of the model mid-call or live now, or whose batch ended
// after c's was submitted, may have counted beside it. known is false when
// the tracker cannot say.
func (d *Dispatcher) aloneInStore(ctx context.Context, c *sluice.Chunk) (alone, known bool) {
	if c.SubmittedAt.IsZero() {
		return false, false
	}
	cs, err := d.store.Chunks(ctx, d.job.ID)
	if err != nil {
		return false, false
	}
	for _, o := range cs {
		if o.ID == c.ID || o.Model != c.Model {
			continue
		}
		if inFlight(o.State) || o.State.Terminal() && o.BatchID != "" && !o.EndedAt.Before(c.SubmittedAt) {
			return false, true
		}
	}
	return true, true
}

// aloneMessage is what the request of a chunk of one request says when
// the provider refused it for its enqueued-token limit n times while no
// other batch of its model from this job was live (b the last refusal).
func aloneMessage(c *sluice.Chunk, n int, b sluice.Batch) string {
	what := "this request alone"
	if c.Requests > 1 {
		what = fmt.Sprintf("this batch of %d requests alone", c.Requests)
	}
	return fmt.Sprintf("the provider refused the batch of this request %d times for its enqueued-token limit while no other batch of model %s from this job was live: "+
		"%s (about %d estimated input tokens; the provider counts its own way) is over the provider's limit (%s); "+
		"it cannot be sent in a batch under that limit",
		n, c.Model, what, c.EstTokens, firstMessage(b.Errors))
}
