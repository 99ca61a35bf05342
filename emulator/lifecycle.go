package emulator

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Batch lifecycles are driven by the clock and evaluated lazily: every API
// call first runs tick(now), which applies, in time order (ties by creation
// order), every event whose time has come. Nothing runs in the background,
// so a fake clock makes everything deterministic.

const (
	evValidated = "validated"
	evFinalize  = "finalize"
	evComplete  = "complete"
	evExpire    = "expire"
	evCancelled = "cancelled"
)

const completionWindow = 24 * time.Hour

// windowOf is how long a batch may run before it expires: 24 h, Gemini's
// 48 h.
func windowOf(b *batchRec) time.Duration {
	if b.WindowSec > 0 {
		return time.Duration(b.WindowSec) * time.Second
	}
	if b.Family == famGemini {
		return geminiExpiry
	}
	return completionWindow
}

func (s *Server) at(b *batchRec, f float64) time.Time {
	return b.Created.Add(time.Duration(float64(s.batchTime(b)) * f))
}

// batchTime is the BatchTime b was made under (Options.BatchTime for a
// record without one).
func (s *Server) batchTime(b *batchRec) time.Duration {
	if b.BatchTimeNs != nil {
		return time.Duration(*b.BatchTimeNs)
	}
	return s.opts.BatchTime
}

// runStart and runEnd bound the in_progress phase of a batch.
func (s *Server) runStart(b *batchRec) time.Time {
	if b.Family == famAnthropic {
		return b.Created
	}
	return s.at(b, 0.1)
}

func (s *Server) runEnd(b *batchRec) time.Time {
	if b.Family == famOpenAI {
		return s.at(b, 0.9)
	}
	return s.at(b, 1)
}

// fracAt is the fraction of a batch's lines processed by time t.
func (s *Server) fracAt(b *batchRec, t time.Time) float64 {
	start, end := s.runStart(b), s.runEnd(b)
	if !end.After(start) {
		return 1
	}
	return clamp01(float64(t.Sub(start)) / float64(end.Sub(start)))
}

// nextEvent is the next lifecycle event of b and its time; ok is false for
// terminal batches.
func (s *Server) nextEvent(b *batchRec) (t time.Time, ev string, ok bool) {
	if s.stuckHere(b) {
		return time.Time{}, "", false
	}
	switch b.Status {
	case stValidating:
		return s.at(b, 0.1), evValidated, true
	case stInProgress:
		end := s.runEnd(b)
		if exp := b.Created.Add(windowOf(b)); end.After(exp) {
			return exp, evExpire, true
		}
		switch {
		case b.ExpireFate:
			return end, evExpire, true
		case b.Family == famOpenAI:
			return end, evFinalize, true
		}
		return end, evComplete, true
	case stFinalizing:
		return s.at(b, 1), evComplete, true
	case stCancelling:
		return b.CancellingAt.Add(s.batchTime(b) / 10), evCancelled, true
	}
	return time.Time{}, "", false
}

// tick applies every due event. Caller holds s.mu.
func (s *Server) tick(now time.Time) {
	for {
		var best *batchRec
		var bt time.Time
		var bev string
		for _, b := range s.active {
			t, ev, ok := s.nextEvent(b)
			if !ok || t.After(now) {
				continue
			}
			if best == nil || t.Before(bt) || (t.Equal(bt) && b.Seq < best.Seq) {
				best, bt, bev = b, t, ev
			}
		}
		if best == nil {
			return
		}
		s.apply(best, bev, bt)
	}
}

func (s *Server) apply(b *batchRec, ev string, t time.Time) {
	tp := &t
	switch ev {
	case evValidated:
		switch b.Family {
		case famOpenAI, famMistral, famTogether, famBedrock, famGemini, famVertex:
			s.validate(b, t)
		}
		if b.Status == stValidating {
			b.Status, b.InProgressAt = stInProgress, tp
		}
	case evFinalize:
		b.Status, b.FinalizingAt = stFinalizing, tp
	case evComplete:
		if s.finish(b, 1, "", t) {
			b.Status, b.CompletedAt = stCompleted, tp
		}
	case evExpire:
		f := s.opts.ExpireDoneFraction
		if !b.ExpireFate {
			f = s.fracAt(b, t)
		}
		if b.Family == famGemini {
			f = 0 // an expired Gemini batch has no results: nothing of it ran
		}
		if s.finish(b, f, stExpired, t) {
			b.Status, b.ExpiredAt = stExpired, tp
		}
	case evCancelled:
		if b.InProgressAt == nil { // cancelled while validating: nothing ran
			b.Status, b.CancelledAt = stCancelled, tp
		} else if s.finish(b, b.DoneFraction, stCancelled, t) {
			b.Status, b.CancelledAt = stCancelled, tp
		}
	}
	s.logf("emulator: %s batch %s -> %s", b.Family, b.ID, b.Status)
	if terminal(b.Status) {
		delete(s.active, b.ID)
		delete(s.permCache, b.ID)
		s.bump(func(st *Stats) {
			switch b.Status {
			case stCompleted:
				st.BatchesCompleted++
			case stFailed:
				st.BatchesFailed++
			case stExpired:
				st.BatchesExpired++
			case stCancelled:
				st.BatchesCancelled++
			}
		})
		s.saveState()
	}
	s.saveBatch(b)
}

// finish writes a batch's results; on an I/O error the batch fails.
func (s *Server) finish(b *batchRec, done float64, undone string, t time.Time) bool {
	if err := s.finalize(b, done, undone, t); err != nil {
		s.logf("emulator: finalizing %s: %v", b.ID, err)
		s.fail(b, t, batchError{Code: "server_error", Message: "emulator: " + err.Error()})
		return false
	}
	return true
}

func (s *Server) fail(b *batchRec, t time.Time, errs ...batchError) {
	b.Status, b.FailedAt, b.Errors = stFailed, &t, errs
}

// validate reports the outcome of the validating phase (for Gemini and
// Vertex AI the end of PENDING): the errors the input scan found, an
// injected failure (in the family's error code), or OpenAI's
// enqueued-token limit.
func (s *Server) validate(b *batchRec, t time.Time) {
	invalid := "invalid_request"
	if b.Family == famGemini || b.Family == famVertex {
		invalid = "INVALID_ARGUMENT"
	}
	switch {
	case len(b.ScanErrors) > 0:
		s.fail(b, t, b.ScanErrors...)
	case b.FailInjected:
		s.fail(b, t, batchError{Code: invalid,
			Message: "The batch input file failed validation (injected by the emulator's ValidationFailRate)."})
	case s.opts.EnqueuedTokenLimit > 0 && b.Family == famOpenAI:
		if q := s.enqueued(b.Family, b.Model, b.ID); q+b.Tokens > s.opts.EnqueuedTokenLimit {
			s.fail(b, t, batchError{Code: "token_limit_exceeded", Message: fmt.Sprintf(
				"Enqueued token limit reached for %s in organization org-emulator. Limit: %s enqueued tokens. "+
					"Please try again once some in_progress batches have been completed.",
				b.Model, commas(s.opts.EnqueuedTokenLimit))})
		}
	}
}

// enqueued sums the estimated input tokens of the running batches of a
// model (in_progress, finalizing or cancelling). Caller holds s.mu.
func (s *Server) enqueued(family, model, exclude string) int64 {
	var sum int64
	for _, o := range s.active {
		if o.Family != family || o.Model != model || o.ID == exclude {
			continue
		}
		switch o.Status {
		case stInProgress, stFinalizing, stCancelling:
			sum += o.Tokens
		}
	}
	return sum
}

// cancel moves a batch to cancelling. ok is false for a terminal batch.
// Caller holds s.mu and has ticked.
func (s *Server) cancel(b *batchRec, now time.Time) (ok bool) {
	switch b.Status {
	case stCancelling:
		return true
	case stValidating:
		b.DoneFraction = 0
	case stInProgress:
		b.DoneFraction = s.fracAt(b, now)
	case stFinalizing:
		b.DoneFraction = 1
	default:
		return false
	}
	if b.Stuck == stValidating {
		b.DoneFraction = 0 // stuck before anything ran
	}
	b.Status, b.CancellingAt = stCancelling, &now
	s.saveBatch(b)
	return true
}

type fate uint8

const (
	fateOK fate = iota
	fateOmit
	fate429
	fate500
	fate400
)

// lineFate is the injected outcome of line i of b (a pure function of the
// seed, the batch id and i).
func (s *Server) lineFate(b *batchRec, i int) fate {
	if s.opts.OmitRate > 0 && unit(h64(s.opts.Seed, "omit", b.ID, i)) < s.opts.OmitRate {
		return fateOmit
	}
	if s.opts.LineErrorRate > 0 && unit(h64(s.opts.Seed, "lineerr", b.ID, i)) < s.opts.LineErrorRate {
		switch u := unit(h64(s.opts.Seed, "errkind", b.ID, i)); {
		case u < 0.25:
			return fate429
		case u < 0.5:
			return fate500
		default:
			return fate400
		}
	}
	return fateOK
}

// perm is the order in which b's lines are processed; results are written
// in this order, so output order is not input order.
func (s *Server) perm(b *batchRec) []int32 {
	p := make([]int32, b.N)
	for i := range p {
		p[i] = int32(i)
	}
	if b.Inline {
		return p // inlined responses come back in request order
	}
	r := rand.New(rand.NewPCG(uint64(s.opts.Seed), h64(s.opts.Seed, "perm", b.ID, 0)))
	r.Shuffle(len(p), func(i, j int) { p[i], p[j] = p[j], p[i] })
	return p
}

func doneCount(f float64, n int) int {
	return min(n, int(math.Floor(clamp01(f)*float64(n)+1e-9)))
}

// liveCounts estimates (completed, failed) of a running OpenAI batch from the
// injected fates of the lines processed so far.
func (s *Server) liveCounts(b *batchRec, now time.Time) (completed, failed int) {
	var k int
	switch b.Status {
	case stInProgress:
		k = doneCount(s.fracAt(b, now), b.N)
	case stFinalizing:
		k = b.N
	case stCancelling:
		k = doneCount(b.DoneFraction, b.N)
	}
	if k == 0 {
		return 0, 0
	}
	// Count the fates of (a sample of at most 2048 of) the processed lines.
	p, ok := s.permCache[b.ID]
	if !ok {
		p = s.perm(b)
		s.permCache[b.ID] = p
	}
	m := min(k, 2048)
	for _, i := range p[:m] {
		switch s.lineFate(b, int(i)) {
		case fate429, fate500, fate400:
			failed++
		}
	}
	failed = int(math.Round(float64(failed) * float64(k) / float64(m)))
	return k - failed, failed
}

func commas(n int64) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
