package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/internal/wire"
)

// The realtime fallback (--fallback realtime; docs/crash-safety.md, "The
// realtime fallback"; docs/money.md).
//
// From Options.FallbackAt on, every live batch is cancelled at the
// provider (what it finished is kept: the cancelled batch's results and
// errors are read as for any ended batch, and only the requests without a
// result go to a chunk of the next attempt), and every chunk not at the
// provider is sent request by request through its synchronous API
// (sluice.RealtimeCaller). Each call is bracketed like a batch: the
// intent (a realtime_calls row in state realtime_sending) commits before
// the call, the answer after it. A chunk with such rows is committed to
// the synchronous API for good: it is never submitted as a batch, and a
// request found realtime_sending (the run was killed mid-call, or the
// answer was lost) is never sent again: it fails with
// sluice.CodeRealtimeUnknown, since the provider may have charged it and
// nothing can tell. When every request of the chunk has its answer (or is
// unknown), the chunk is concluded as a batch's would be, its BatchID
// sluice.RealtimeBatch: its usage is priced at the full rate.

// fallbackOn reports whether the realtime fallback has begun.
func (d *Dispatcher) fallbackOn() bool {
	return d.rt != nil && !d.opts.FallbackAt.IsZero() && !d.now().Before(d.opts.FallbackAt)
}

// realtimeChunk reports whether chunk id is committed to the synchronous
// API (it has realtime calls recorded, or a realtime step began on it).
func (d *Dispatcher) realtimeChunk(id int64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.rtChunks[id]
}

func (d *Dispatcher) markRealtime(id int64) {
	d.mu.Lock()
	d.rtChunks[id] = true
	d.mu.Unlock()
}

// loadRealtime reads which chunks earlier runs committed to the
// synchronous API.
func (d *Dispatcher) loadRealtime(ctx context.Context) error {
	if d.rtStore == nil {
		return nil
	}
	ids, err := d.rtStore.RealtimeChunks(ctx, d.job.ID)
	if err != nil {
		return fmt.Errorf("read realtime calls: %w", err)
	}
	if len(ids) > 0 && d.rt == nil {
		return fmt.Errorf("job %s has requests sent through a synchronous API that provider %s does not offer", d.job.ID, d.prov.Name())
	}
	for _, id := range ids {
		d.markRealtime(id)
	}
	return nil
}

// fallbackCancel asks the provider to cancel a live batch at the
// fallback, and polls it again soon: the requests it did not finish go to
// the synchronous API only once it has ended and its results were read,
// so no request is bought twice. A cancel the provider refuses leaves the
// batch to end by itself (its requests are never sent elsewhere meanwhile).
func (d *Dispatcher) fallbackCancel(ctx context.Context, c *sluice.Chunk, b sluice.Batch) (bool, error) {
	log := d.chunkLog(c)
	if c.Stuck == "" {
		c.Stuck = sluice.FallbackReason
	}
	if b.Status != sluice.BatchCancelling {
		nb, err := d.prov.Cancel(ctx, c.BatchID)
		switch {
		case err != nil && ctx.Err() != nil:
			return false, ctx.Err()
		case err != nil:
			log.Warn().Err(err).Msg("realtime fallback: the batch could not be cancelled; waiting for it to end")
			c.SetError(sluice.CodeBatchStuck, fmt.Sprintf("%s; cancel refused: %v", sluice.FallbackReason, err))
		default:
			log.Info().Str("status", nb.ProviderStatus).Msg("realtime fallback: batch cancel requested")
			if nb.ID == "" {
				nb.ID = c.BatchID
			}
			if nb.ProviderStatus != "" {
				c.BatchStatus = nb.ProviderStatus
			}
			if nb.Status.Ended() {
				return d.ended(ctx, c, nb)
			}
		}
	}
	c.NextPollAt = d.now().Add(d.opts.PollInterval)
	if err := d.store.UpdateChunk(ctx, c, sluice.ChunkSubmitted); err != nil {
		return false, fatal(err)
	}
	return false, nil
}

// realtime sends chunk c's requests through the synchronous API, then
// concludes the chunk. It stops starting calls at the deadline or a stop;
// the chunk then keeps its recorded calls and the next run goes on.
func (d *Dispatcher) realtime(ctx context.Context, c *sluice.Chunk) (bool, error) {
	from := c.State
	d.markRealtime(c.ID)
	if err := d.fetch(ctx, c.Path); err != nil {
		return false, fatal(fmt.Errorf("chunk %d: fetch %s: %w", c.ID, c.Path, err))
	}
	if err := d.checkChunkFile(c, false); err != nil {
		return false, err
	}
	prior, err := d.rtStore.RealtimeCalls(ctx, d.job.ID, c.ID)
	if err != nil {
		return false, fatal(err)
	}
	calls := make(map[int]sluice.RealtimeCall, len(prior))
	for _, rc := range prior {
		calls[rc.Index] = rc // realtime_sending ones were left by an earlier run: unknown
	}
	var reqs []sluice.Request
	if err := d.store.ChunkRequests(ctx, d.job.ID, c.ID, func(r *sluice.Request) error {
		if r.State != sluice.RequestPending {
			return fmt.Errorf("chunk %d: request %q is already %s", c.ID, r.CustomID, r.State)
		}
		reqs = append(reqs, *r)
		return nil
	}); err != nil {
		return false, fatal(err)
	}
	if d.job.State == sluice.JobCancelled {
		// sluice cancel: nothing more is sent; what was answered is kept.
		return true, d.concludeRealtime(ctx, c, from, calls)
	}
	complete, err := d.sendRealtime(ctx, c, reqs, calls)
	if err != nil || !complete {
		return false, err
	}
	return true, d.concludeRealtime(ctx, c, from, calls)
}

// sendRealtime calls the synchronous API for every request of reqs with
// no call recorded in calls, Options.Concurrency calls at once across the
// job, and adds their answers to calls. complete is false when it stopped
// before every request had a call (the deadline, a stop, a fatal error).
func (d *Dispatcher) sendRealtime(ctx context.Context, c *sluice.Chunk, reqs []sluice.Request, calls map[int]sluice.RealtimeCall) (complete bool, err error) {
	f, err := os.Open(filepath.Join(d.job.Dir, c.Path))
	if err != nil {
		return false, fatal(err)
	}
	defer f.Close()
	ref := c.Ref(d.job.Dir)
	var (
		mu    sync.Mutex
		wg    sync.WaitGroup
		first error
	)
	// The requests to send are chosen before any call starts: the calls
	// write their answers into calls as they end.
	todo := make([]sluice.Request, 0, len(reqs))
	for _, r := range reqs {
		if _, ok := calls[r.Index]; !ok {
			todo = append(todo, r)
		}
	}
	stopped := false
	for _, r := range todo {
		if d.halted.Load() || ctx.Err() != nil || d.pastDeadline() {
			stopped = true
			break
		}
		item := make([]byte, r.Length)
		if _, err := f.ReadAt(item, r.Offset); err != nil && !errors.Is(err, io.EOF) {
			return false, fatal(fmt.Errorf("chunk %d: read request %q: %w", c.ID, r.CustomID, err))
		}
		select {
		case d.rtSem <- struct{}{}:
		case <-ctx.Done():
			stopped = true
		}
		if stopped {
			break
		}
		wg.Add(1)
		go func(r sluice.Request) {
			defer func() { <-d.rtSem; wg.Done() }()
			rc, err := d.callOne(ctx, ref, c, r, item)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if first == nil {
					first = err
				}
				return
			}
			if rc != nil {
				calls[r.Index] = *rc
			}
		}(r)
	}
	wg.Wait()
	if first != nil {
		d.halted.Store(true)
		return false, first
	}
	return !stopped, nil
}

// callOne records the intent of one synchronous call, makes it, and
// records its answer. When another run recorded a call for the request
// first, nothing is sent and the request is taken as sent with its answer
// unknown (RealtimeSending): it may have been charged, so it is never
// sent again, nor concluded as never sent.
func (d *Dispatcher) callOne(ctx context.Context, ref sluice.BatchRef, c *sluice.Chunk, r sluice.Request, item []byte) (*sluice.RealtimeCall, error) {
	ok, err := d.rtStore.RealtimeIntent(ctx, d.job.ID, c.ID, r.Index)
	if err != nil {
		return nil, fatal(err)
	}
	if !ok {
		return &sluice.RealtimeCall{Chunk: c.ID, Index: r.Index, State: sluice.RealtimeSending}, nil
	}
	rc := sluice.RealtimeCall{Chunk: c.ID, Index: r.Index, State: sluice.RealtimeAnswered}
	res, err := d.rt.CallRealtime(ctx, ref, item)
	switch {
	case err == nil:
		if res.CustomID != r.CustomID {
			res = sluice.Result{Kind: sluice.ResultFailed, Line: sluice.OutputLine{Error: &sluice.LineError{
				Code: sluice.CodeProviderOutput, Message: fmt.Sprintf("the synchronous call answered for %q", res.CustomID)}}}
		}
	case errors.Is(err, sluice.ErrUnsettled) && ctx.Err() == nil:
		res = unknownResult(err.Error())
	default:
		// No answer (the context, bad credentials, the network gone): the
		// intent stays; the next run finds it unknown.
		return nil, fatal(fmt.Errorf("chunk %d: synchronous call for %q: %w", c.ID, r.CustomID, err))
	}
	res.Line.CustomID = r.CustomID
	if rc.Line, err = wire.AppendOutputLine(nil, &res.Line); err != nil {
		return nil, fatal(err)
	}
	rc.Kind, rc.Usage = res.Kind, res.Usage
	if err := d.rtStore.RealtimeAnswer(ctx, d.job.ID, rc); err != nil {
		return nil, fatal(err)
	}
	return &rc, nil
}

func unknownResult(why string) sluice.Result {
	return sluice.Result{Kind: sluice.ResultFailed, Line: sluice.OutputLine{Error: &sluice.LineError{
		Code: sluice.CodeRealtimeUnknown,
		Message: "sent through the synchronous API but its answer was lost (" + why +
			"); the provider may have charged it, so it is not sent again"}}}
}

// concludeRealtime records the chunk's end from its calls, as a batch's
// results would be.
func (d *Dispatcher) concludeRealtime(ctx context.Context, c *sluice.Chunk, from sluice.ChunkState, calls map[int]sluice.RealtimeCall) error {
	c.BatchID, c.Stuck = sluice.RealtimeBatch, ""
	select {
	case d.concluding <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-d.concluding }()
	ref := c.Ref(d.job.Dir)
	tr, _ := d.prov.Codec().(sluice.ResultTranslator)
	return d.conclude(ctx, c, from, func(e *ending) error {
		e.missingCode, e.missingMsg = sluice.CodeCancelled, "the job was cancelled before this request was sent"
		for i, id := range e.ids {
			rc, ok := calls[e.reqs[i].Index]
			if !ok {
				continue // not sent: the job was cancelled (sendRealtime was complete otherwise)
			}
			var res sluice.Result
			if rc.State != sluice.RealtimeAnswered {
				res = unknownResult("the run was stopped during the call")
			} else if err := json.Unmarshal(rc.Line, &res.Line); err != nil {
				return fmt.Errorf("request %q: recorded answer: %w", id, err)
			} else {
				res.Kind, res.Usage = rc.Kind, rc.Usage
			}
			res.CustomID, res.Line.CustomID = id, id
			if tr != nil && rc.State == sluice.RealtimeAnswered {
				tr.TranslateResult(ref, &res) // the answer in the input's shape, as a batch's
			}
			if err := e.add(res); err != nil {
				return err
			}
		}
		return nil
	})
}
