package dispatcher

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sluice-batch/sluice"
)

// ending collects the outcome of one chunk's attempt: which requests are
// final (written to the chunk's results file) and which go to the next
// attempt.
type ending struct {
	d    *Dispatcher
	c    *sluice.Chunk
	ids  []string // custom_id by index in the chunk
	reqs []sluice.Request
	byID map[string]int
	seen []bool

	f   *os.File
	w   *bufio.Writer
	buf []byte

	outcomes []sluice.Outcome
	retry    []int
	usage    sluice.Usage
	unknown  int // results for custom_ids not in this chunk
	doubled  int // second results for the same custom_id

	// missingCode and missingMsg describe requests without a result.
	missingCode, missingMsg string
	noRetry                 bool
}

func (e *ending) lookup(i int) (string, bool) {
	if i < 0 || i >= len(e.ids) {
		return "", false
	}
	return e.ids[i], true
}

func (e *ending) canRetry() bool {
	return !e.noRetry && e.d.job.State != sluice.JobCancelled && e.c.Attempt < e.d.job.MaxAttempts
}

// add records one result the provider returned.
func (e *ending) add(r sluice.Result) error {
	i, ok := e.byID[r.CustomID]
	if !ok {
		e.unknown++
		if e.unknown <= 5 {
			e.d.chunkLog(e.c).Warn().Str("custom_id", r.CustomID).Msg("provider returned a result for a custom_id not in this batch; ignored")
		}
		return nil
	}
	if e.seen[i] {
		e.doubled++
		if e.doubled <= 5 {
			e.d.chunkLog(e.c).Warn().Str("custom_id", r.CustomID).Msg("provider returned a second result for the same custom_id; the first is kept")
		}
		return nil
	}
	e.seen[i] = true
	e.usage.InputTokens += r.Usage.InputTokens
	e.usage.OutputTokens += r.Usage.OutputTokens
	switch r.Kind {
	case sluice.ResultSucceeded:
		return e.final(i, false, r.Line)
	case sluice.ResultFailed:
		return e.final(i, true, r.Line)
	default:
		if e.canRetry() {
			e.retry = append(e.retry, i)
			return nil
		}
		return e.final(i, true, r.Line)
	}
}

// final writes a request's final record.
func (e *ending) final(i int, failed bool, line sluice.OutputLine) error {
	line.CustomID = e.ids[i]
	if line.Error != nil {
		errCopy := *line.Error
		errCopy.Attempts = e.c.Attempt
		line.Error = &errCopy
	}
	js, err := json.Marshal(line)
	if err != nil {
		return fmt.Errorf("encode result of %q: %w", e.ids[i], err)
	}
	e.buf = sluice.AppendResultRecord(e.buf[:0], e.reqs[i].Ordinal, failed, js)
	if _, err := e.w.Write(e.buf); err != nil {
		return err
	}
	st := sluice.RequestSucceeded
	if failed {
		st = sluice.RequestFailed
	}
	e.outcomes = append(e.outcomes, sluice.Outcome{Ordinal: e.reqs[i].Ordinal, State: st})
	return nil
}

// conclude ends chunk c (in state from): fill feeds results into the
// ending; requests without a result are retried or failed; the results
// file and the next attempt's chunk files are written and synced; then one
// transaction records it all. A crash anywhere before that commit leaves
// the chunk as it was, and the same work is redone.
func (d *Dispatcher) conclude(ctx context.Context, c *sluice.Chunk, from sluice.ChunkState, fill func(*ending) error) error {
	d.finishMu.Lock()
	defer d.finishMu.Unlock()
	e := &ending{d: d, c: c, byID: make(map[string]int, c.Requests)}
	if err := d.store.ChunkRequests(ctx, d.job.ID, c.ID, func(r *sluice.Request) error {
		if r.State != sluice.RequestPending {
			return fmt.Errorf("chunk %d: request %q is already %s", c.ID, r.CustomID, r.State)
		}
		e.byID[r.CustomID] = len(e.reqs)
		e.ids = append(e.ids, r.CustomID)
		e.reqs = append(e.reqs, *r)
		return nil
	}); err != nil {
		return fatal(err)
	}
	e.seen = make([]bool, len(e.reqs))
	rel := filepath.Join("results", fmt.Sprintf("c%06d-a%d.results", c.ID, c.Attempt))
	path := filepath.Join(d.job.Dir, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fatal(err)
	}
	f, err := os.Create(path + ".tmp")
	if err != nil {
		return fatal(err)
	}
	defer func() {
		if e.f != nil {
			e.f.Close()
			os.Remove(path + ".tmp")
		}
	}()
	e.f, e.w = f, bufio.NewWriterSize(f, 1<<20)
	if err := fill(e); err != nil {
		return fmt.Errorf("chunk %d: read results: %w", c.ID, err)
	}
	code, msg := e.missingCode, e.missingMsg
	if code == "" {
		code, msg = "missing_result", "the provider returned no result for this request"
	}
	missing := 0
	for i, ok := range e.seen {
		if ok {
			continue
		}
		missing++
		if e.canRetry() {
			e.retry = append(e.retry, i)
			continue
		}
		if err := e.final(i, true, sluice.OutputLine{Error: &sluice.LineError{Code: code, Message: msg}}); err != nil {
			return fatal(err)
		}
	}
	if err := e.w.Flush(); err != nil {
		return fatal(err)
	}
	if err := e.f.Sync(); err != nil {
		return fatal(err)
	}
	e.f.Close()
	e.f = nil
	if err := os.Rename(path+".tmp", path); err != nil {
		return fatal(err)
	}
	fin := &sluice.Finish{Chunk: c, From: from, Outcomes: e.outcomes}
	if len(e.retry) > 0 {
		if fin.NewChunks, fin.Moved, err = d.regroup(c, e.reqs, e.retry); err != nil {
			return fatal(fmt.Errorf("chunk %d: regroup retries: %w", c.ID, err))
		}
	}
	c.State = sluice.ChunkDone
	if e.missingCode != "" {
		c.State = sluice.ChunkFailed
	}
	c.ResultsPath = rel
	c.EndedAt = d.opts.Now()
	c.InputTokens += e.usage.InputTokens
	c.OutputTokens += e.usage.OutputTokens
	if e.unknown > 0 || e.doubled > 0 {
		c.LastError = fmt.Sprintf("provider output had %d results for unknown custom_ids and %d duplicates (ignored)", e.unknown, e.doubled)
	}
	if err := d.store.FinishChunk(ctx, fin); err != nil {
		return fatal(err)
	}
	for _, nc := range fin.NewChunks {
		d.nextID = max(d.nextID, nc.ID+1)
	}
	d.chunkLog(c).Info().Int("final", len(e.outcomes)).Int("retried", len(e.retry)).Int("missing", missing).
		Int64("input_tokens", e.usage.InputTokens).Int64("output_tokens", e.usage.OutputTokens).Msg("chunk recorded")
	return nil
}
