package dispatcher

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/internal/atomicfile"
	"github.com/sluice-batch/sluice/internal/wire"
)

// ending collects the outcome of one chunk's attempt: which requests are
// final (written to the chunk's results file) and which go to the next
// attempt.
//
// The provider's output is not trusted to be well formed. A result for a
// custom_id that is not in the chunk is ignored and counted. When a
// custom_id comes back more than once, the better result is kept: a
// success over any error, a permanent failure over a retryable one, and
// the first of two of the same rank; so a request the provider reports both
// done and failed is never bought again, and the order of the provider's
// files does not matter. Lines that do not parse were skipped by Decode
// (sluice.MalformedLines): their requests have no result and count as
// missing. Every such anomaly is counted into the chunk's last error
// (sluice.CodeProviderOutput).
type ending struct {
	d    *Dispatcher
	c    *sluice.Chunk
	ids  []string // custom_id by index in the chunk
	reqs []sluice.Request
	byID map[string]int
	rank []int8 // best result seen per index: rankNone, ...

	// held are the error results kept so far, by index: they become final
	// (or retried) only at the end, since a success may still come.
	held map[int]sluice.Result

	f       *atomicfile.File // the results file
	w       *bufio.Writer
	buf     []byte
	written int64 // bytes of records written to the results file

	outcomes  []sluice.Outcome
	retry     []int
	usage     sluice.Usage
	usageEst  int64 // sluice's input estimate of the results with usage (docs/money.md)
	unknown   int   // results for custom_ids not in this chunk
	doubled   int   // further results for the same custom_id
	upgraded  int   // of those, how many replaced an earlier, worse result
	malformed *sluice.MalformedLines

	// missingCode and missingMsg describe requests without a result;
	// failed marks the whole attempt failed (no results were read).
	missingCode sluice.ErrorCode
	missingMsg  string
	failed      bool
	noRetry     bool
	// split, when set, moves every request without a final result to new
	// chunks cut as it says (split.go), whatever the attempts left.
	split *recut
	// notes are added to the chunk's last error, with notesCode
	// (sluice.CodeProviderOutput when empty).
	notes     []string
	notesCode sluice.ErrorCode
}

const (
	rankNone int8 = iota
	rankRetryable
	rankFailed
	rankSucceeded
)

func rankOf(k sluice.ResultKind) int8 {
	switch k {
	case sluice.ResultSucceeded:
		return rankSucceeded
	case sluice.ResultFailed:
		return rankFailed
	}
	return rankRetryable
}

func (e *ending) lookup(i int) (string, bool) {
	if i < 0 || i >= len(e.ids) {
		return "", false
	}
	return e.ids[i], true
}

func (e *ending) canRetry() bool {
	if e.split != nil {
		return true
	}
	// Splits spend no attempt (split.go).
	return !e.noRetry && e.d.job.State != sluice.JobCancelled && e.c.Attempt-e.c.Splits < e.d.job.MaxAttempts
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
	rank := rankOf(r.Kind)
	if prev := e.rank[i]; prev != rankNone {
		e.doubled++
		better := rank > prev
		if better {
			e.upgraded++
		}
		if e.doubled <= 5 {
			msg := "provider returned a second result for the same custom_id; the first is kept"
			if better {
				msg = "provider returned a second result for the same custom_id; it is better than the first and replaces it"
			}
			e.d.chunkLog(e.c).Warn().Str("custom_id", r.CustomID).Str("kept", r.Kind.String()).Msg(msg)
		}
		if !better {
			return nil
		}
		old := e.held[i] // an error: a success is never replaced
		e.usage.InputTokens -= old.Usage.InputTokens
		e.usage.OutputTokens -= old.Usage.OutputTokens
		if old.Usage.InputTokens > 0 {
			e.usageEst -= e.reqs[i].Tokens
		}
		delete(e.held, i)
	}
	e.rank[i] = rank
	e.usage.InputTokens += r.Usage.InputTokens
	e.usage.OutputTokens += r.Usage.OutputTokens
	if r.Usage.InputTokens > 0 {
		e.usageEst += e.reqs[i].Tokens
	}
	if r.Kind == sluice.ResultSucceeded {
		return e.final(i, false, r.Line)
	}
	e.held[i] = r.Owned() // r's bytes are lent until add returns
	return nil
}

// final writes a request's final record. Its errors are local (the results
// file) and stop the run.
func (e *ending) final(i int, failed bool, line sluice.OutputLine) error {
	line.CustomID = e.ids[i]
	if line.Error != nil {
		errCopy := *line.Error
		errCopy.Attempts = e.c.Attempt - e.c.Splits // splits spend no attempt
		line.Error = &errCopy
	}
	var err error
	if e.buf, err = wire.AppendResultLine(e.buf[:0], e.reqs[i].Ordinal, failed, &line); err != nil {
		return fatal(fmt.Errorf("encode result of %q: %w", e.ids[i], err))
	}
	if _, err := e.w.Write(e.buf); err != nil {
		return fatal(err)
	}
	st := sluice.RequestSucceeded
	if failed {
		st = sluice.RequestFailed
	}
	e.outcomes = append(e.outcomes, sluice.Outcome{Ordinal: e.reqs[i].Ordinal, State: st,
		Offset: e.written, Length: int64(len(e.buf)), CustomID: e.reqs[i].CustomID, BodyKey: e.reqs[i].BodyKey})
	e.written += int64(len(e.buf))
	return nil
}

// describe is what the chunk's last error says about the provider's output.
func (e *ending) describe(missing int) []string {
	notes := e.notes
	if e.malformed != nil && e.malformed.Count > 0 {
		notes = append(notes, fmt.Sprintf("%d malformed result line(s) skipped, their requests counted as missing: %s",
			e.malformed.Count, e.malformed.Summary(3)))
	}
	if e.unknown > 0 {
		notes = append(notes, fmt.Sprintf("%d result(s) for custom_ids not in this batch ignored", e.unknown))
	}
	if e.doubled > 0 {
		notes = append(notes, fmt.Sprintf("%d duplicate result(s) for the same custom_id (%d replaced a worse first result; the others were dropped)",
			e.doubled, e.upgraded))
	}
	if len(notes) > len(e.notes) && missing > 0 && !e.failed {
		notes = append(notes, fmt.Sprintf("%d request(s) without a result", missing))
	}
	return notes
}

// conclude ends chunk c (in state from): fill feeds results into the
// ending; requests without a result are retried or failed; the results
// file and the next attempt's chunk files are written and synced; then one
// transaction records it all. A crash anywhere before that commit leaves
// the chunk as it was, and the same work is redone.
func (d *Dispatcher) conclude(ctx context.Context, c *sluice.Chunk, from sluice.ChunkState, fill func(*ending) error) error {
	e, err := d.newEnding(ctx, c)
	if err != nil {
		return err
	}
	rel := filepath.Join("results", fmt.Sprintf("c%06d-a%d.results", c.ID, c.Attempt))
	path := filepath.Join(d.job.Dir, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fatal(err)
	}
	f, err := atomicfile.Create(path)
	if err != nil {
		return fatal(err)
	}
	defer f.Abort() // nothing once committed
	e.f, e.w = f, bufio.NewWriterSize(f, 1<<20)
	if err := fill(e); err != nil {
		if errors.Is(err, ErrFatal) {
			return err
		}
		return fmt.Errorf("chunk %d: read results: %w", c.ID, err)
	}
	missing, err := e.settle()
	if err != nil {
		return err
	}
	if err := e.w.Flush(); err != nil {
		return fatal(err)
	}
	if err := e.f.Commit(); err != nil {
		return fatal(err)
	}
	fin := &sluice.Finish{Chunk: c, From: from, Outcomes: e.outcomes}
	if len(e.retry) > 0 {
		k := d.retryCut(c)
		if e.split != nil {
			k = *e.split
		}
		if fin.NewChunks, fin.Moved, err = d.regroup(ctx, c, e.reqs, e.retry, k); err != nil {
			return fatal(fmt.Errorf("chunk %d: regroup retries: %w", c.ID, err))
		}
	}
	e.record(rel, missing)
	// What the tracker is about to record must outlive this machine.
	for _, rel := range append([]string{rel}, chunkPaths(fin.NewChunks)...) {
		if err := d.put(ctx, rel); err != nil {
			return fatal(fmt.Errorf("chunk %d: store %s: %w", c.ID, rel, err))
		}
	}
	// Results are read, decoded, written and stored by every chunk's task
	// at once; only the tracker write is one at a time.
	d.finishMu.Lock()
	err = d.store.FinishChunk(ctx, fin)
	d.finishMu.Unlock()
	if err != nil {
		return fatal(err)
	}
	d.born(fin.NewChunks)
	if d.rt != nil && d.opts.StuckFallback && c.Stuck != "" && c.Stuck != sluice.FallbackReason {
		for _, nc := range fin.NewChunks {
			d.markRealtime(nc.ID) // a stuck batch's rest goes through the synchronous API
		}
	}
	ev := d.chunkLog(c).Info()
	if c.ErrorCode == sluice.CodeProviderOutput {
		ev = d.chunkLog(c).Warn().Str("provider_output", c.LastError)
	}
	ev.Int("final", len(e.outcomes)).Int("retried", len(e.retry)).Int("missing", missing).
		Int64("input_tokens", e.usage.InputTokens).Int64("output_tokens", e.usage.OutputTokens).Msg("chunk recorded")
	return nil
}

// newEnding reads the requests of chunk c, every one still pending, into
// an ending.
func (d *Dispatcher) newEnding(ctx context.Context, c *sluice.Chunk) (*ending, error) {
	e := &ending{d: d, c: c, byID: make(map[string]int, c.Requests),
		ids: make([]string, 0, c.Requests), reqs: make([]sluice.Request, 0, c.Requests),
		outcomes: make([]sluice.Outcome, 0, c.Requests)}
	if err := d.store.ChunkRequests(ctx, d.job.ID, c.ID, func(r *sluice.Request) error {
		if r.State != sluice.RequestPending {
			return fmt.Errorf("chunk %d: request %q is already %s", c.ID, r.CustomID, r.State)
		}
		e.byID[r.CustomID] = len(e.reqs)
		e.ids = append(e.ids, r.CustomID)
		e.reqs = append(e.reqs, *r)
		return nil
	}); err != nil {
		return nil, fatal(err)
	}
	e.rank = make([]int8, len(e.reqs))
	e.held = map[int]sluice.Result{}
	return e, nil
}

// settle decides every request by the best result it got: a success is
// final already; an error that may be retried is, while the chunk can
// retry, else it is final like any other error; a request without a result
// is retried, or failed with the reason of missingReason. It returns how
// many had no result.
func (e *ending) settle() (missing int, err error) {
	code, msg := e.missingReason()
	for i, rank := range e.rank {
		var line sluice.OutputLine
		switch rank {
		case rankSucceeded:
			continue
		case rankFailed:
			line = e.held[i].Line
		case rankRetryable:
			if e.canRetry() {
				e.retry = append(e.retry, i)
				continue
			}
			line = e.held[i].Line
		default:
			missing++
			if e.canRetry() {
				e.retry = append(e.retry, i)
				continue
			}
			line = sluice.OutputLine{Error: &sluice.LineError{Code: code, Message: msg}}
		}
		if err := e.final(i, true, line); err != nil {
			return missing, err
		}
	}
	return missing, nil
}

// missingReason is the error of a request the provider returned no result
// for.
func (e *ending) missingReason() (sluice.ErrorCode, string) {
	if e.missingCode != "" {
		return e.missingCode, e.missingMsg
	}
	if e.malformed != nil && e.malformed.Count > 0 {
		return sluice.CodeMissingResult, fmt.Sprintf("the provider returned no readable result for this request; its output had %d malformed line(s): %s",
			e.malformed.Count, e.malformed.Summary(3))
	}
	return sluice.CodeMissingResult, "the provider returned no result for this request"
}

// record sets what the tracker records of the chunk itself: its end state,
// results file, token counts and what its output said.
func (e *ending) record(rel string, missing int) {
	c, d := e.c, e.d
	c.State = sluice.ChunkDone
	if e.failed {
		c.State = sluice.ChunkFailed
	}
	c.ResultsPath = rel
	c.EndedAt = d.now()
	c.InputTokens += e.usage.InputTokens
	c.OutputTokens += e.usage.OutputTokens
	if d.caps.UsagePerBatch && e.usage.InputTokens > 0 {
		// The batch's usage covers every request it answered.
		e.usageEst = 0
		for i, rank := range e.rank {
			if rank != rankNone {
				e.usageEst += e.reqs[i].Tokens
			}
		}
	}
	c.UsageEstTokens += e.usageEst
	if notes := e.describe(missing); len(notes) > 0 {
		code := e.notesCode
		if code == "" || len(notes) > len(e.notes) {
			code = sluice.CodeProviderOutput
		}
		c.SetError(code, strings.Join(notes, "; "))
	}
}

func chunkPaths(cs []*sluice.Chunk) []string {
	var ps []string
	for _, c := range cs {
		ps = append(ps, c.Path)
	}
	return ps
}
