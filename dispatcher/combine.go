package dispatcher

import (
	"context"
	"fmt"

	"github.com/sluice-batch/sluice"
)

// Retries under the provider's minimum per batch (Limits.MinBatchRequests,
// Bedrock's minimum records per job).
//
// A plan cuts no chunk under the minimum, but the requests left to retry
// after a batch (a few failed records) are fewer as a rule. Such a chunk
// is never sent alone: it waits, and the waiting chunks of one URL and
// model are combined into one chunk as soon as together they reach the
// minimum (combine). Only when nothing more can join them, no other chunk
// of the model left unfinished whose batch could leave retries, do they
// fail with CodeBelowMinimum, or go through the synchronous API under
// --fallback realtime (toRealtime). Every decision is a rule over the
// chunks as the tracker has them (minimumFate), so a restarted run decides
// as the first did; the combination is one transaction (sluice.Finish's
// Also): the combined chunks end done, without a batch, their requests
// moved into the new one.

// fate is what a pending chunk under the minimum is due for.
type fate int

const (
	fateAlone   fate = iota // nothing can join it: fail, or realtime
	fateWait                // more retries of its model may come
	fateCombine             // it leads a combination that reaches the minimum
	fateJoin                // another chunk leads its combination
)

// waiting is the set of chunks under the minimum of chunk c's URL and
// model, in id order: a prefix of them that reaches the minimum within
// the job's limits (pick), and whether any other chunk of the model is
// unfinished (more).
type waiting struct {
	group []*sluice.Chunk
	pick  int // how many of group are combined; 0: they do not reach the minimum
	more  bool
}

// waitingOf reads the waiting set of c among cs (in id order).
func (d *Dispatcher) waitingOf(cs []*sluice.Chunk, c *sluice.Chunk) waiting {
	var w waiting
	for _, o := range cs {
		if o.URL != c.URL || o.Model != c.Model || o.State.Terminal() {
			continue
		}
		if d.underMinimum(o) && !d.realtimeChunk(o.ID) {
			w.group = append(w.group, o)
		} else {
			w.more = true
		}
	}
	lim := d.job.Limits
	n, bytes := 0, int64(0)
	for i, o := range w.group {
		n, bytes = n+o.Requests, bytes+o.Bytes
		if lim.MaxBatchRequests > 0 && n > lim.MaxBatchRequests || lim.MaxBatchBytes > 0 && bytes > lim.MaxBatchBytes {
			break
		}
		if n >= lim.MinBatchRequests {
			w.pick = i + 1
			break
		}
	}
	return w
}

// minimumFate is what chunk c, pending under the minimum, is due for,
// among the chunks cs.
func (d *Dispatcher) minimumFate(cs []*sluice.Chunk, c *sluice.Chunk) fate {
	w := d.waitingOf(cs, c)
	switch {
	case w.pick > 0 && w.group[0].ID == c.ID:
		return fateCombine
	case w.pick > 0:
		return fateJoin
	case w.more:
		return fateWait
	}
	return fateAlone
}

// combine combines the chunks under the minimum that chunk c leads, as the
// tracker has them now, into one chunk of the next attempt (the largest
// attempt among them): their wire items copied byte for byte, their
// requests moved, the chunks ended done without a batch, in one
// transaction. It reports whether it did.
func (d *Dispatcher) combine(ctx context.Context, c *sluice.Chunk) (bool, error) {
	cs, err := d.store.Chunks(ctx, d.job.ID)
	if err != nil {
		return false, fatal(err)
	}
	w := d.waitingOf(cs, c)
	if w.pick == 0 || w.group[0].ID != c.ID {
		return false, nil // the store moved on since the pass decided
	}
	srcs := w.group[:w.pick]
	k := recut{combine: true}
	cuts := make([]cutSource, len(srcs))
	total := 0
	for i, o := range srcs {
		k.attempt = max(k.attempt, o.Attempt)
		if err := d.store.ChunkRequests(ctx, d.job.ID, o.ID, func(r *sluice.Request) error {
			if r.State != sluice.RequestPending {
				return fmt.Errorf("chunk %d: request %q is already %s", o.ID, r.CustomID, r.State)
			}
			cuts[i].idx = append(cuts[i].idx, len(cuts[i].reqs))
			cuts[i].reqs = append(cuts[i].reqs, *r)
			return nil
		}); err != nil {
			return false, fatal(err)
		}
		cuts[i].chunk = o
		total += len(cuts[i].reqs)
	}
	lead := *srcs[0]
	nc, moved, err := d.cut(ctx, &lead, cuts, k)
	if err != nil {
		return false, fatal(fmt.Errorf("chunk %d: combine retries: %w", c.ID, err))
	}
	for _, rel := range chunkPaths(nc) {
		if err := d.put(ctx, rel); err != nil {
			return false, fatal(fmt.Errorf("chunk %d: store %s: %w", c.ID, rel, err))
		}
	}
	var fin *sluice.Finish
	ended := make([]*sluice.Chunk, len(srcs))
	for i, o := range srcs {
		e := *o
		e.State, e.EndedAt = sluice.ChunkDone, d.now()
		e.ClearError()
		n := len(cuts[i].reqs)
		f := &sluice.Finish{Chunk: &e, From: o.State, Moved: moved[:n]}
		moved, ended[i] = moved[n:], &e
		if fin == nil {
			fin = f
			fin.NewChunks = nc
			continue
		}
		fin.Also = append(fin.Also, f)
	}
	d.finishMu.Lock()
	err = d.store.FinishChunk(ctx, fin)
	d.finishMu.Unlock()
	if err != nil && d.opts.Claim != nil {
		// Another worker may have taken one of them: the chunk is read
		// again and its fate decided again.
		return false, fmt.Errorf("combine chunks from %d: %w", c.ID, err)
	}
	if err != nil {
		return false, fatal(err)
	}
	*c = *ended[0]
	d.born(append(nc, ended[1:]...))
	d.chunkLog(c).Info().Int("chunks", len(srcs)).Int("requests", total).Int("min_batch_requests", d.job.Limits.MinBatchRequests).
		Int64("into_chunk", nc[0].ID).Msg("retries under the provider's minimum per batch combined")
	return true, nil
}
