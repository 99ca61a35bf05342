package dispatcher

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/sluice-batch/sluice"
)

// The scheduler (docs/architecture.md, "Dispatcher").
//
// Run keeps the job's chunks in memory and starts a task for a chunk when
// the chunk is due (its NextPollAt has passed, or it has none) and no task
// of it is in flight, as long as fewer than Options.Concurrency tasks are
// running. A task is one step of one chunk: submit (upload and create),
// poll (and, once the batch ended, download, decode and record its
// results), reconcile (an intent a crashed run left) or abandon (a
// cancelled job's unsent chunk). Whether a submission may start (live
// batches, enqueued tokens per model, the spend cap, a full provider
// queue, the Untagged leftover rule) is decided when it starts, against
// the chunks as they stand then, counting the submissions in flight as
// live.
//
// A task that ends wakes the loop at once: its chunk is put back as the
// task left it (the task works on a copy, so the loop's view never changes
// under it), new chunks its end made are added, and the next due chunks
// start; nothing waits for sibling tasks. Otherwise the loop sleeps until
// the earliest due time, gathered to at most one timer wake-up per
// gatherWait, so thousands of jittered polls do not each wake it (and no
// wake-up re-reads the chunk rows: scripts/bench-polling.sh). With leases
// (Options.Claim) the whole set is re-read from the store at most every
// refreshEvery, for what other workers changed.
//
// Stop, the deadline and a fatal error start nothing new; the tasks in
// flight finish and record their outcome (a fatal error never cancels its
// siblings: cancelling them mid-call would leave intent states for the
// next run to wait out; docs/crash-safety.md). Only ctx abandons them.

// step is what a task does to its chunk.
type step int8

const (
	stepSubmit step = iota + 1
	stepPoll
	stepReconcile
	stepAbandon
	stepRecut
	stepRealtime // send through the synchronous API (realtime.go)
	stepCombine  // combine retries under the provider's minimum (combine.go)
)

// onceRounds bounds how often Once goes over the chunks again after a
// pass that moved something (a batch ended and left retries, a
// submission): a cron run does what is ready and never sleeps.
const onceRounds = 6

// taskEnd is what one task reports to the loop.
type taskEnd struct {
	id      int64
	c       *sluice.Chunk // the chunk as the task left it; nil: unchanged
	moved   bool          // something moved (for Once's passes)
	refused bool          // Options.Claim said another worker has it
	err     error
}

// slimChunk is what a pass reads first about a chunk.
type slimChunk struct {
	due  int64 // NextPollAt in Unix ns; math.MinInt64 when none
	live bool  // submitted: polled on its schedule
	idle bool  // terminal, or a task of it is in flight: nothing to start
}

func slimOf(c *sluice.Chunk, busy bool) slimChunk {
	due := int64(math.MinInt64)
	if !c.NextPollAt.IsZero() {
		due = c.NextPollAt.UnixNano()
	}
	return slimChunk{due: due, live: c.State == sluice.ChunkSubmitted, idle: busy || c.State.Terminal()}
}

// sched is one Run's state. Only the loop goroutine touches it.
type sched struct {
	d      *Dispatcher
	chunks []*sluice.Chunk // in id order; entries are replaced, never changed
	index  map[int64]int   // chunk id -> position in chunks
	// slim mirrors chunks with what a pass looks at first, packed: with
	// thousands of live batches most are skipped on this alone, without
	// touching their Chunk (a cache miss each).
	slim []slimChunk
	busy map[int64]step // chunks with a task in flight
	// notBefore holds chunks Claim refused: not asked for again before.
	notBefore map[int64]time.Time
	// Once: a chunk is started at most once per pass (gen); another pass
	// follows while the last one moved something.
	visited  map[int64]int
	gen      int
	genMoved bool

	learned      map[string]sluice.Learned
	learnedStale bool
	lastRefresh  time.Time
	changed      bool // since the last OnTick
	ends         chan taskEnd
}

// Run drives the job until every request is final (Finished), or until the
// deadline, --once, or stop says to leave the rest running (Stopped). stop
// closing means: start nothing new, let calls in flight record their
// outcome, return. Cancelling ctx abandons calls in flight; their chunks
// stay in intent states and are reconciled on the next run.
func (d *Dispatcher) Run(ctx context.Context, stop <-chan struct{}) (Outcome, error) {
	if d.opts.Claim == nil {
		// One worker: what a crashed run left mid-call is settled first,
		// before anything is sent. With leases (Claim) these chunks go
		// through the loop like any other, each under its claim: another
		// worker may be mid-call on them.
		chunks, err := d.store.Chunks(ctx, d.job.ID)
		if err != nil {
			return Stopped, err
		}
		if err := d.reconcile(ctx, chunks); err != nil {
			return Stopped, err
		}
	}
	if err := d.loadRealtime(ctx); err != nil {
		return Stopped, err
	}
	s := &sched{d: d, busy: map[int64]step{}, notBefore: map[int64]time.Time{}, visited: map[int64]int{},
		gen: 1, learnedStale: true, ends: make(chan taskEnd, d.opts.Concurrency)}
	if err := s.refresh(ctx); err != nil {
		return Stopped, err
	}
	return s.loop(ctx, stop)
}

func (s *sched) loop(ctx context.Context, stop <-chan struct{}) (Outcome, error) {
	d := s.d
	var failed error // the first fatal error (or ctx's)
	halted := false  // start nothing new: wait for the tasks in flight
	stopC, ctxDone := stop, ctx.Done()
	var wake time.Time // when the next chunk falls due, as the last pass found
	s.changed = true
	for {
		if !halted {
			switch {
			case ctx.Err() != nil:
				halted, failed = true, ctx.Err()
			case d.halted.Load():
				halted = true
			case d.stopping(stop):
				halted = true
			}
		}
		if halted {
			if len(s.busy) == 0 {
				s.tick()
				if failed != nil {
					return Stopped, failed
				}
				if allTerminal(s.chunks) {
					return Finished, nil
				}
				return Stopped, nil
			}
		} else {
			if d.opts.Claim != nil && !d.now().Before(s.lastRefresh.Add(s.refreshEvery())) {
				if err := s.refresh(ctx); err != nil {
					halted, failed = true, err
					continue
				}
			}
			s.tick()
			var started, capped bool
			started, capped, wake = s.pass(ctx)
			if len(s.busy) == 0 && !started {
				switch {
				case allTerminal(s.chunks):
					return Finished, nil
				case capped:
					return CapReached, nil
				case d.opts.Once && s.genMoved && s.gen < onceRounds:
					s.gen, s.genMoved = s.gen+1, false
					continue
				case d.opts.Once:
					return Stopped, nil
				}
			}
		}
		var timerC <-chan time.Time
		if !halted && !d.opts.Once {
			now := d.now()
			timerC = d.opts.Clock.After(max(wake.Sub(now), s.gatherWait()))
		}
		select {
		case e := <-s.ends:
			if err := s.apply(ctx, e); err != nil && failed == nil {
				halted, failed = true, err
			}
		case <-timerC:
		case <-stopC:
			stopC = nil
		case <-ctxDone:
			ctxDone = nil
		}
	}
}

// pass starts a task for every due chunk that has none in flight, as far
// as the free slots and the admission rules allow, and returns when the
// next chunk falls due (the earliest due time still ahead, or
// MaxPollInterval from now; chunks due but not started wait for a task to
// end). capped reports that the spend cap kept a chunk waiting while
// nothing is in flight. One walk over the chunks in memory: the live
// counts the admission rules need are gathered only when a submission is
// due (scripts/bench-polling.sh: with 2,000 live batches and none to
// submit, a pass is a loop over the chunks and nothing more).
//
// Submissions (and reconciles) take the free slots before polls: a batch
// sent sooner is done sooner, while a poll seconds after its create finds
// it still running. Without that, with 2,000 chunks to send, polls of the
// first batches took half the slots and sending them all took twice as
// long (scripts/bench-polling.sh). A poll waits only while chunks are
// being sent, never for a create to return: once the last due chunk has
// started, free slots go to polls and downloads.
func (s *sched) pass(ctx context.Context) (started, capped bool, wake time.Time) {
	d := s.d
	now := d.now()
	p := &passState{now: now, wake: now.Add(d.opts.MaxPollInterval), fallback: d.fallbackOn(),
		cancelled: d.job.State == sluice.JobCancelled, slots: d.opts.Concurrency - len(s.busy)}
	if !d.opts.Deadline.IsZero() && d.opts.Deadline.Before(p.wake) {
		p.wake = d.opts.Deadline
	}
	if fa := d.opts.FallbackAt; d.rt != nil && !p.fallback && !fa.IsZero() && fa.Before(p.wake) {
		p.wake = fa
	}
	nowNS, wakeNS := now.UnixNano(), p.wake.UnixNano()
	for i := range s.slim {
		if e := &s.slim[i]; e.idle || e.live && e.due > nowNS && !d.opts.Once && len(s.notBefore) == 0 && !p.fallback {
			if !e.idle {
				wakeNS = min(wakeNS, e.due)
			}
			continue
		}
		c := s.chunks[i]
		k := s.want(ctx, p, c)
		if k == 0 || p.slots <= 0 {
			continue
		}
		s.start(ctx, k, c)
		p.slots--
		started = true
	}
	// Results that expire soonest are fetched first (docs/providers.md,
	// "Results expire"); chunks without a known expiry come last.
	slices.SortStableFunc(p.polls, byExpiry)
	for _, c := range p.polls {
		if p.slots <= 0 {
			break
		}
		s.start(ctx, stepPoll, c)
		p.slots--
		started = true
	}
	capped = p.adm != nil && p.adm.spend != nil && p.adm.spend.blocked > 0 && p.adm.flying == 0
	return started, capped, earlier(p.wake, time.Unix(0, wakeNS))
}

// passState is what one pass knows and has decided so far.
type passState struct {
	now                 time.Time
	wake                time.Time // when the next chunk falls due
	fallback, cancelled bool
	slots               int             // free slots left
	adm                 *admission      // counted when a submission is first due
	polls               []*sluice.Chunk // due polls, started once the rest had their slots
}

// admission returns the pass's admission counts, counting them the first
// time.
func (p *passState) admission(ctx context.Context, s *sched) *admission {
	if p.adm == nil {
		p.adm = s.admission(ctx)
	}
	return p.adm
}

// want is the step chunk c is due for in this pass (0: none now), by its
// state; a due poll is queued in p.polls instead, and a chunk that waits
// moves p.wake to its due time.
func (s *sched) want(ctx context.Context, p *passState, c *sluice.Chunk) step {
	d := s.d
	if c.State.Terminal() {
		return 0
	}
	if _, ok := s.busy[c.ID]; ok {
		return 0
	}
	if len(s.notBefore) > 0 {
		if t, ok := s.notBefore[c.ID]; ok {
			if p.now.Before(t) {
				p.wake = earlier(p.wake, t)
				return 0
			}
			delete(s.notBefore, c.ID)
		}
	}
	if d.opts.Once && s.visited[c.ID] >= s.gen {
		return 0
	}
	switch c.State {
	case sluice.ChunkPending, sluice.ChunkUploaded:
		return s.wantSubmit(ctx, p, c)
	case sluice.ChunkSubmitted:
		if !d.opts.Once && c.NextPollAt.After(p.now) && !(p.fallback && c.Stuck == "") {
			p.wake = earlier(p.wake, c.NextPollAt)
			return 0
		}
		p.polls = append(p.polls, c)
	case sluice.ChunkUploading, sluice.ChunkCreating:
		// Left by a crashed run (or an answer lost) and not settled
		// yet (see reconcile).
		if c.NextPollAt.After(p.now) {
			p.wake = earlier(p.wake, c.NextPollAt)
			return 0
		}
		return stepReconcile
	}
	return 0
}

// wantSubmit is the step a chunk not yet submitted is due for: sent
// through the synchronous API, abandoned (a cancelled job), cut smaller,
// or submitted, as the free slots and the admission rules allow.
func (s *sched) wantSubmit(ctx context.Context, p *passState, c *sluice.Chunk) step {
	d := s.d
	if !p.fallback && !p.cancelled && d.underMinimum(c) && !d.realtimeChunk(c.ID) {
		switch d.minimumFate(s.chunks, c) {
		case fateWait, fateJoin:
			return 0 // a task's end wakes the loop to decide again
		case fateCombine:
			if _, busy := s.busy[c.ID]; busy || p.slots <= 0 {
				return 0
			}
			return stepCombine
		}
	}
	if d.realtimeChunk(c.ID) || d.toRealtime(c, p.fallback) && !p.cancelled {
		if p.slots <= 0 {
			return 0
		}
		adm := p.admission(ctx, s)
		if !p.cancelled && !adm.admitRealtime(c) {
			return 0 // a cancelled job's realtime chunk sends nothing more
		}
		return stepRealtime
	}
	if p.cancelled {
		return stepAbandon
	}
	if s.lessons(ctx); d.tooBig(c) {
		return stepRecut // over the budget as the provider counts: cut smaller first
	}
	if c.NextPollAt.After(p.now) && !d.opts.Once {
		p.wake = earlier(p.wake, c.NextPollAt) // backing off after a refused submission
		return 0
	}
	if p.slots <= 0 || !p.admission(ctx, s).admit(c) {
		return 0
	}
	return stepSubmit
}

// byExpiry orders chunks by ResultsExpireAt, soonest first, unknown last.
func byExpiry(a, b *sluice.Chunk) int {
	switch ea, eb := a.ResultsExpireAt, b.ResultsExpireAt; {
	case ea.Equal(eb):
		return 0
	case ea.IsZero():
		return 1
	case eb.IsZero():
		return -1
	}
	return a.ResultsExpireAt.Compare(b.ResultsExpireAt)
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// admission is what the admission rules count, as the chunks stand at the
// start of a pass, with the submissions in flight counted as live.
type admission struct {
	s           *sched
	lim         sluice.Limits
	learned     map[string]sluice.Learned
	view        []*sluice.Chunk
	spend       *capCheck
	live        int
	flying      int
	liveTokens  map[string]int64
	liveByModel map[string]int
	// leftover: for providers whose batches name no chunk, a batch a
	// crashed run may still have created is matched by time and size: no
	// new create may start until every such leftover is settled, or two
	// could match.
	leftover bool
}

// lessons reads again what finished batches taught, when batches ended
// since it last did.
func (s *sched) lessons(ctx context.Context) {
	if s.learnedStale {
		s.learned, s.learnedStale = s.d.lessons(ctx), false
	}
}

func (s *sched) admission(ctx context.Context) *admission {
	d := s.d
	s.lessons(ctx)
	a := &admission{s: s, lim: d.job.Limits, learned: s.learned, liveTokens: map[string]int64{}, liveByModel: map[string]int{}}
	// A chunk whose submission is in flight counts as live: its batch may
	// exist at the provider at any moment.
	a.view = s.chunks
	copied := false
	for id, k := range s.busy {
		if k != stepSubmit && k != stepRealtime {
			continue
		}
		if !copied {
			a.view, copied = append([]*sluice.Chunk(nil), s.chunks...), true
		}
		i := s.index[id]
		c := *a.view[i]
		c.State = sluice.ChunkCreating
		if k == stepRealtime {
			// In flight (its bound committed, at the full rate), but no
			// batch: not live for the batch limits.
			c.State, c.BatchID = sluice.ChunkUploading, sluice.RealtimeBatch
		}
		a.view[i] = &c
	}
	a.spend = d.newCapCheck(a.view, a.learned)
	for _, c := range a.view {
		if c.State.Live() {
			a.live++
			a.liveTokens[c.Model] += d.queueTokens(c)
			a.liveByModel[c.Model]++
		}
		if inFlight(c.State) {
			a.flying++
		}
		if d.caps.Untagged && c.State == sluice.ChunkCreating && s.busy[c.ID] != stepSubmit {
			a.leftover = true
		}
	}
	return a
}

// admit reports whether chunk c may be submitted now, and if so counts it
// as live.
func (a *admission) admit(c *sluice.Chunk) bool {
	d, lim := a.s.d, a.lim
	if a.leftover {
		return false
	}
	live := a.live
	if d.caps.LivePerModel {
		live = a.liveByModel[c.Model] // the quota is per model (Bedrock's)
	}
	if lim.MaxLiveBatches > 0 && live >= lim.MaxLiveBatches {
		return false
	}
	mark, full := d.queueMark(c.Model)
	if full && a.liveByModel[c.Model] > 0 {
		// The provider's queue was full for this model: wait for our own
		// batches of it to drain, then send one chunk alone, a probe, and
		// the next only once the provider accepts a batch of the model
		// (poll.go clears the mark). Chunks sent together after each drain
		// are refused together, none of them alone, so none is ever split:
		// a livelock (TestRefusedTogetherDoesNotLivelock). Only the probe
		// clears the mark: a batch admitted before it proves nothing.
		return false
	}
	q := d.queueTokens(c)
	if lim.MaxEnqueuedTokens > 0 && a.liveByModel[c.Model] > 0 && a.liveTokens[c.Model]+q > lim.MaxEnqueuedTokens {
		return false
	}
	if !a.spend.admit(c) {
		return false
	}
	a.live++
	a.flying++
	a.liveTokens[c.Model] += q
	a.liveByModel[c.Model]++
	a.s.markAlone(c, a.view, a.liveByModel[c.Model] == 1, mark, full)
	return true
}

// admitRealtime reports whether chunk c may be sent through the
// synchronous API now: only the spend cap applies, at the full rate.
func (a *admission) admitRealtime(c *sluice.Chunk) bool {
	rc := *c
	rc.BatchID = sluice.RealtimeBatch
	if !a.spend.admit(&rc) {
		return false
	}
	a.flying++
	return true
}

// markAlone records whether chunk c, about to be submitted, goes with no
// other batch of its model live or in flight; if not, neither do those
// others any more (a chunk refused for the queue counts only the refusals
// it met alone: issue 11, item 5). full says c was admitted while its
// model's queue was marked full (as of mark): it is the probe, whose
// acceptance clears the mark (queueTook).
func (s *sched) markAlone(c *sluice.Chunk, view []*sluice.Chunk, alone bool, mark time.Time, full bool) {
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	d.alone[c.ID] = alone
	if full {
		d.probe[c.ID] = mark
	} else {
		delete(d.probe, c.ID)
	}
	if alone {
		return
	}
	for _, o := range view {
		if o.Model == c.Model && o.State.Live() {
			if _, ok := d.alone[o.ID]; ok {
				d.alone[o.ID] = false
			}
		}
	}
}

// start runs one step of chunk c in a goroutine, on a copy of c.
func (s *sched) start(ctx context.Context, k step, c *sluice.Chunk) {
	s.busy[c.ID] = k
	s.slim[s.index[c.ID]].idle = true
	s.visited[c.ID] = s.gen
	cc := *c
	go func() { s.ends <- s.d.task(ctx, k, &cc) }()
}

// task does step k of chunk c: under Options.Claim's lease when one is
// set, on the chunk as the store has it then.
func (d *Dispatcher) task(ctx context.Context, k step, c *sluice.Chunk) (e taskEnd) {
	e.id = c.ID
	defer func() {
		if e.err != nil && (errors.Is(e.err, ErrFatal) || ctx.Err() != nil) {
			d.halted.Store(true) // siblings start no new provider call
		}
	}()
	if d.halted.Load() {
		return e // a sibling failed fatally while this one was being started
	}
	if d.opts.Claim != nil {
		was := *c // as the loop chose the step for it (Claim may refresh c)
		release, ok, err := d.opts.Claim(ctx, c)
		switch {
		case err != nil && ctx.Err() != nil:
			e.err = ctx.Err()
			return e
		case err != nil:
			e.err = fatal(fmt.Errorf("claim chunk %d: %w", c.ID, err))
			return e
		case !ok:
			e.refused = true
			return e
		}
		if release != nil {
			defer release()
		}
		// Another worker may have moved the chunk since the loop last read
		// it: act only on what the store says now.
		fresh, err := d.chunk(ctx, c.ID)
		if err != nil {
			if ctx.Err() != nil {
				e.err = ctx.Err()
			} else {
				e.err = fatal(fmt.Errorf("re-read chunk %d: %w", c.ID, err))
			}
			return e
		}
		if !sameStep(&was, fresh) {
			e.c, e.moved = fresh, true
			return e
		}
		c = fresh
	}
	switch k {
	case stepSubmit:
		e.moved, e.err = d.submit(ctx, c)
	case stepPoll:
		e.moved, e.err = d.poll(ctx, c)
	case stepReconcile:
		e.moved, e.err = d.reconcileOne(ctx, c)
	case stepAbandon:
		e.moved, e.err = true, d.abandon(ctx, c)
	case stepRecut:
		e.moved, e.err = true, d.recut(ctx, c)
	case stepRealtime:
		e.moved, e.err = d.realtime(ctx, c)
	case stepCombine:
		e.moved, e.err = d.combine(ctx, c)
	}
	e.c = c
	return e
}

// sameStep reports whether fresh, as re-read from the store, is still the
// chunk the loop chose a step for.
func sameStep(was, fresh *sluice.Chunk) bool {
	return was.State == fresh.State && was.Attempt == fresh.Attempt && was.Polls == fresh.Polls &&
		was.BatchID == fresh.BatchID && was.FileID == fresh.FileID && was.NextPollAt.Equal(fresh.NextPollAt)
}

// chunkGetter is a store that reads one chunk (tracker.DB.Chunk).
type chunkGetter interface {
	Chunk(ctx context.Context, job string, id int64) (*sluice.Chunk, error)
}

// chunk reads chunk id from the store.
func (d *Dispatcher) chunk(ctx context.Context, id int64) (*sluice.Chunk, error) {
	if g, ok := d.store.(chunkGetter); ok {
		return g.Chunk(ctx, d.job.ID, id)
	}
	cs, err := d.store.Chunks(ctx, d.job.ID)
	if err != nil {
		return nil, err
	}
	for _, c := range cs {
		if c.ID == id {
			return c, nil
		}
	}
	return nil, fmt.Errorf("chunk %d of job %s: not found", id, d.job.ID)
}

// apply takes a finished task's report into the loop's view. It returns
// the error that stops the run, if any.
func (s *sched) apply(ctx context.Context, e taskEnd) error {
	d := s.d
	delete(s.busy, e.id)
	if i, ok := s.index[e.id]; ok {
		s.slim[i] = slimOf(s.chunks[i], false)
	}
	for _, nc := range d.takeBorn() {
		s.put(nc)
	}
	if e.refused {
		s.notBefore[e.id] = d.now().Add(d.opts.PollInterval)
		return nil
	}
	if e.moved {
		s.genMoved = true
	}
	s.changed = true
	if e.err != nil {
		if errors.Is(e.err, ErrFatal) || ctx.Err() != nil {
			return e.err
		}
		// The step failed half-way: take the chunk as the store has it.
		d.chunkLog(s.chunks[s.index[e.id]]).Warn().Err(e.err).Msg("step failed; will try again")
		c, err := d.chunk(ctx, e.id)
		if err != nil {
			return fatal(err)
		}
		s.put(c)
		return nil
	}
	if e.c != nil {
		s.put(e.c)
		if e.c.State.Terminal() {
			s.learnedStale = true
		}
	}
	return nil
}

// put adds or replaces a chunk in the view.
func (s *sched) put(c *sluice.Chunk) {
	if i, ok := s.index[c.ID]; ok {
		_, busy := s.busy[c.ID]
		s.chunks[i], s.slim[i] = c, slimOf(c, busy)
		return
	}
	s.index[c.ID] = len(s.chunks)
	s.chunks = append(s.chunks, c)
	s.slim = append(s.slim, slimOf(c, false))
	if n := len(s.chunks); n > 1 && s.chunks[n-2].ID > c.ID {
		s.reindex()
	}
}

// refresh re-reads every chunk from the store, keeping the loop's view of
// those with a task in flight (the task reports how it left them).
func (s *sched) refresh(ctx context.Context) error {
	cs, err := s.d.store.Chunks(ctx, s.d.job.ID)
	if err != nil {
		return err
	}
	for i, c := range cs {
		if _, ok := s.busy[c.ID]; ok {
			cs[i] = s.chunks[s.index[c.ID]]
		}
	}
	s.chunks = cs
	s.reindex()
	s.d.restoreRefused(cs)
	s.lastRefresh = s.d.now()
	s.learnedStale, s.changed = true, true
	return nil
}

func (s *sched) reindex() {
	slices.SortFunc(s.chunks, func(a, b *sluice.Chunk) int { return cmp.Compare(a.ID, b.ID) })
	s.index = make(map[int64]int, len(s.chunks))
	s.slim = make([]slimChunk, len(s.chunks))
	for i, c := range s.chunks {
		s.index[c.ID] = i
		_, busy := s.busy[c.ID]
		s.slim[i] = slimOf(c, busy)
	}
}

// refreshEvery is how often, with leases, the whole chunk set is re-read
// for what other workers did: at most once per timer gathering, so the
// admission rules count the other workers' batches within a second.
func (s *sched) refreshEvery() time.Duration {
	return s.gatherWait()
}

// gatherWait is the least time between two timer wake-ups: polls due
// within it are started together. With thousands of live batches and
// jittered schedules, waking for each one cost 615 CPU s per hour of
// waiting at 2,000 batches when every wake-up re-read the chunk rows
// (scripts/bench-polling.sh).
func (s *sched) gatherWait() time.Duration {
	return min(time.Second, max(s.d.opts.PollInterval/2, 10*time.Millisecond))
}

// tick calls Options.OnTick with the chunks as they stand, when they
// changed since the last call.
func (s *sched) tick() {
	if s.d.opts.OnTick == nil || !s.changed {
		return
	}
	s.changed = false
	s.d.opts.OnTick(append([]*sluice.Chunk(nil), s.chunks...))
}

// born records chunks a finished chunk made (its retries), for the loop.
func (d *Dispatcher) born(cs []*sluice.Chunk) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range cs {
		cc := *c
		d.newChunks = append(d.newChunks, &cc)
	}
}

func (d *Dispatcher) takeBorn() []*sluice.Chunk {
	d.mu.Lock()
	defer d.mu.Unlock()
	cs := d.newChunks
	d.newChunks = nil
	return cs
}
