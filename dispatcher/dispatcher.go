// Package dispatcher drives a planned job's chunks through a provider's
// batch API: it submits with bounded concurrency under the provider's live
// batch and enqueued-token limits, polls on a schedule kept in the tracker,
// reads results, records every request's outcome, and regroups retryable
// requests into chunks of the next attempt.
//
// Every provider side effect is bracketed by the tracker
// (docs/crash-safety.md): the intent (uploading, creating) is committed before the call
// and the outcome after it; a chunk found in an intent state at start is
// reconciled against the provider's listings before anything is redone.
package dispatcher

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/pricing"
)

// Options tune a dispatcher.
type Options struct {
	// Concurrency bounds provider calls in flight (uploads, creates, polls,
	// downloads). Default 4.
	Concurrency int
	// PollInterval is the first wait before polling a new batch; waits grow
	// by half each poll up to MaxPollInterval. Defaults 10s and 2m.
	PollInterval, MaxPollInterval time.Duration
	// Deadline, when set, stops submitting and polling at that time.
	Deadline time.Time
	// Once does every step that is ready now and returns without sleeping.
	Once bool
	Log  zerolog.Logger
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
	// OnTick is called after each round with the chunks as they stand.
	OnTick func(chunks []*sluice.Chunk)
	// ReconcileGrace is how long after a crashed run's intent sluice keeps
	// looking for what the call created before concluding it never landed:
	// a call in flight when the process died can still complete at the
	// provider after the next run has looked. Default 2m.
	ReconcileGrace time.Duration
	// StuckAfter is how long after its submission a batch that has not
	// ended (stuck in validating or finalizing, say) is cancelled and its
	// requests retried: past the providers' 24h window plus a margin.
	// Default 26h.
	StuckAfter time.Duration
	// StuckCancelWait is how long a stuck batch may take to end after
	// sluice asked the provider to cancel it (what it finished is kept);
	// then its requests go to a new batch regardless. Default 30m.
	StuckCancelWait time.Duration
	// MaxFetchFailures is how many polls in a row may fail to get an ended
	// batch's results (download refused or cut short after the HTTP
	// layer's retries, a file that cannot be read), or be refused for good,
	// before the attempt fails and its requests go to the next attempt.
	// Default 5.
	MaxFetchFailures int
	// MaxQueueRefusals is how many times in a row a chunk's batch may fail
	// token_limit_exceeded while it was submitted alone (no other batch of
	// its model in this job live, none submitted with it) before its
	// requests fail for good: the chunk alone is over the provider's
	// enqueued-token limit, and sending it again cannot help. Default 3
	// (the org's queue may hold other work for a while).
	MaxQueueRefusals int
	// MaxCost, when positive, caps the job's committed spend in USD (see
	// spend.go); Price prices a model (pricing.Table.Lookup for the job's
	// provider).
	MaxCost float64
	Price   func(model string) (pricing.Price, bool)
	// Learned, if set, returns per model what finished batches taught
	// about the input estimate (tracker.DB.Learned); the cap and
	// MaxEnqueuedTokens use it.
	Learned func(ctx context.Context) (map[string]sluice.Learned, error)
	// Claim, when set, is called before acting on a chunk (submit, poll,
	// reconcile): it leases the chunk's next step to this worker, and on
	// success refreshes *c from the store (another worker may have moved
	// it since it was read). ok false means another worker holds it: the
	// chunk is left alone this time. release gives the lease back once the
	// step is done. Nil: this dispatcher is the job's only worker
	// (docs/scale-out.md, "Many workers").
	Claim func(ctx context.Context, c *sluice.Chunk) (release func(), ok bool, err error)
	// Files, if set, keeps the job's chunk and results files in a shared
	// store as well as in the job directory (--store; docs/scale-out.md,
	// "Object storage").
	Files Files
}

// Files is the job's files in a shared store, by their path relative to
// the job directory. The job directory is then a cache: a worker on
// another machine, or one restarted with an empty disk, fetches what it
// lacks.
type Files interface {
	// Fetch makes sure the file rel is in the job directory, copying it
	// from the store when it is not.
	Fetch(ctx context.Context, rel string) error
	// Put stores the job directory's file rel (complete and synced)
	// durably. The dispatcher puts a chunk's results file and its next
	// attempt's chunk files before the tracker records the chunk's end.
	Put(ctx context.Context, rel string) error
}

// fetch is Files.Fetch, or nothing without a store.
func (d *Dispatcher) fetch(ctx context.Context, rel string) error {
	if d.opts.Files == nil {
		return nil
	}
	return d.opts.Files.Fetch(ctx, rel)
}

// put is Files.Put, or nothing without a store.
func (d *Dispatcher) put(ctx context.Context, rel string) error {
	if d.opts.Files == nil {
		return nil
	}
	return d.opts.Files.Put(ctx, rel)
}

// DefaultStuckAfter is Options.StuckAfter's default (sluice.DefaultStuckAfter).
const DefaultStuckAfter = sluice.DefaultStuckAfter

// Outcome is how Run ended.
type Outcome int

const (
	// Finished: every request is final; the job can be merged.
	Finished Outcome = iota
	// Stopped: deadline, --once or a stop signal left work running.
	Stopped
)

// ErrFatal marks errors that stop the whole run (bad credentials, a
// database that cannot be written).
var ErrFatal = errors.New("fatal")

// Dispatcher drives one job. It is used by one goroutine; the job's lock
// must be held by the caller.
type Dispatcher struct {
	store sluice.Store
	prov  sluice.Provider
	job   *sluice.Job
	opts  Options
	log   zerolog.Logger

	finishMu  sync.Mutex      // serialises FinishChunk
	createMu  sync.Mutex      // serialises creates for sluice.Untagged providers
	queueFull map[string]bool // models whose provider queue reported full
	// alone says, per chunk submitted by this run, whether it went with no
	// other batch of its model live or submitted beside it.
	alone map[int64]bool
	mu    sync.Mutex // guards queueFull and alone
	// halted is set by the first fatal error of a round: no new task or
	// provider call starts; those in flight finish.
	halted atomic.Bool
	// capped is set by a round that found the spend cap leaves room for
	// no waiting chunk while none is in flight.
	capped bool
}

// New returns a dispatcher for job.
func New(store sluice.Store, prov sluice.Provider, job *sluice.Job, opts Options) *Dispatcher {
	// Defaults are sluice.Default* (defaults.go), defined once.
	if opts.Concurrency <= 0 {
		opts.Concurrency = sluice.DefaultConcurrency
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = sluice.DefaultPollInterval
	}
	if opts.MaxPollInterval < opts.PollInterval {
		opts.MaxPollInterval = max(sluice.DefaultMaxPollInterval, opts.PollInterval)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.ReconcileGrace <= 0 {
		opts.ReconcileGrace = sluice.DefaultReconcileGrace
	}
	if opts.StuckAfter <= 0 {
		opts.StuckAfter = DefaultStuckAfter
	}
	if opts.StuckCancelWait <= 0 {
		opts.StuckCancelWait = sluice.DefaultStuckCancelWait
	}
	if opts.MaxFetchFailures <= 0 {
		opts.MaxFetchFailures = sluice.DefaultMaxFetchFailures
	}
	if opts.MaxQueueRefusals <= 0 {
		opts.MaxQueueRefusals = sluice.DefaultMaxQueueRefusals
	}
	if job.MaxAttempts <= 0 {
		job.MaxAttempts = sluice.DefaultMaxAttempts
	}
	return &Dispatcher{store: store, prov: prov, job: job, opts: opts,
		log: opts.Log.With().Str("job", job.ID).Logger(), queueFull: map[string]bool{}, alone: map[int64]bool{}}
}

// Run drives the job until every request is final (Finished), or until the
// deadline, --once, or stop says to leave the rest running (Stopped). stop
// closing means: start nothing new, let calls in flight record their
// outcome, return. Cancelling ctx abandons calls in flight; their chunks
// stay in intent states and are reconciled on the next run.
func (d *Dispatcher) Run(ctx context.Context, stop <-chan struct{}) (Outcome, error) {
	chunks, err := d.store.Chunks(ctx, d.job.ID)
	if err != nil {
		return Stopped, err
	}
	if err := d.reconcile(ctx, chunks); err != nil {
		return Stopped, err
	}
	for round := 0; ; round++ {
		chunks, err := d.store.Chunks(ctx, d.job.ID)
		if err != nil {
			return Stopped, err
		}
		if d.opts.OnTick != nil {
			d.opts.OnTick(chunks)
		}
		if allTerminal(chunks) {
			return Finished, nil
		}
		if d.stopping(stop) {
			return Stopped, nil
		}
		progressed, err := d.round(ctx, stop, chunks)
		if err != nil {
			return Stopped, err
		}
		if d.capped && !progressed {
			return CapReached, nil
		}
		if d.opts.Once {
			// Rounds repeat only while they move something (a batch ended
			// and left retries, a submission); a cron run never sleeps.
			if !progressed || round >= 5 {
				chunks, err := d.store.Chunks(ctx, d.job.ID)
				if err != nil {
					return Stopped, err
				}
				if allTerminal(chunks) {
					return Finished, nil
				}
				return Stopped, nil
			}
			continue
		}
		if progressed {
			continue
		}
		if err := d.sleep(ctx, stop, chunks); err != nil {
			return Stopped, err
		}
	}
}

func (d *Dispatcher) stopping(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
	}
	return !d.opts.Deadline.IsZero() && !d.opts.Now().Before(d.opts.Deadline)
}

func allTerminal(chunks []*sluice.Chunk) bool {
	for _, c := range chunks {
		if !c.State.Terminal() {
			return false
		}
	}
	return true
}

// round starts every submission the limits admit and every poll that is
// due, waits for them, and reports whether anything moved.
func (d *Dispatcher) round(ctx context.Context, stop <-chan struct{}, chunks []*sluice.Chunk) (bool, error) {
	now := d.opts.Now()
	lim := d.job.Limits
	learned := d.lessons(ctx)
	spend := d.newCapCheck(chunks, learned)
	d.capped = false
	live, flying := 0, 0
	liveTokens := map[string]int64{}
	liveByModel := map[string]int{}
	for _, c := range chunks {
		if c.State.Live() {
			live++
			liveTokens[c.Model] += queueTokens(c, learned)
			liveByModel[c.Model]++
		}
		if inFlight(c.State) {
			flying++
		}
	}
	// For providers whose batches name no chunk, a batch a crashed run may
	// still have created is matched by time and size: no new create may
	// start until every such leftover is settled, or two could match.
	leftover := false
	if u, ok := d.prov.(sluice.Untagged); ok && u.Untagged() {
		for _, c := range chunks {
			leftover = leftover || c.State == sluice.ChunkCreating
		}
	}
	var tasks []func(context.Context) (bool, error)
	var admitted []*sluice.Chunk
	cancelled := d.job.State == sluice.JobCancelled
	// Each task acts on one chunk under its lease (Options.Claim).
	add := func(c *sluice.Chunk, t func(context.Context) (bool, error)) {
		tasks = append(tasks, d.leased(c, now, t))
	}
	for _, c := range chunks {
		c := c
		switch c.State {
		case sluice.ChunkPending, sluice.ChunkUploaded:
			if cancelled {
				add(c, func(ctx context.Context) (bool, error) { return true, d.abandon(ctx, c) })
				continue
			}
			if c.NextPollAt.After(now) && !d.opts.Once {
				continue // backing off after a refused submission
			}
			if leftover {
				continue
			}
			if lim.MaxLiveBatches > 0 && live >= lim.MaxLiveBatches {
				continue
			}
			if d.isQueueFull(c.Model) {
				if liveByModel[c.Model] > 0 {
					continue // wait for our own batches of this model to drain
				}
				d.setQueueFull(c.Model, false)
			}
			if lim.MaxEnqueuedTokens > 0 && liveByModel[c.Model] > 0 && liveTokens[c.Model]+queueTokens(c, learned) > lim.MaxEnqueuedTokens {
				continue
			}
			if !spend.admit(c) {
				continue
			}
			live++
			flying++
			liveTokens[c.Model] += queueTokens(c, learned)
			liveByModel[c.Model]++
			admitted = append(admitted, c)
			add(c, func(ctx context.Context) (bool, error) { return d.submit(ctx, c) })
		case sluice.ChunkSubmitted:
			if !d.opts.Once && c.NextPollAt.After(now) {
				continue
			}
			add(c, func(ctx context.Context) (bool, error) { return d.poll(ctx, c) })
		case sluice.ChunkUploading, sluice.ChunkCreating:
			// Left by a crashed run and not settled yet (see reconcile).
			if c.NextPollAt.After(now) {
				continue
			}
			add(c, func(ctx context.Context) (bool, error) { return d.reconcileOne(ctx, c) })
		}
	}
	if spend != nil && spend.blocked > 0 && flying == 0 {
		d.capped = true
	}
	if len(tasks) == 0 {
		return false, nil
	}
	d.mu.Lock()
	for _, c := range admitted {
		d.alone[c.ID] = liveByModel[c.Model] == 1
	}
	d.mu.Unlock()
	var moved bool
	var movedMu sync.Mutex
	// A fatal error stops new work but never cancels the calls in flight:
	// cancelling them mid-call would leave their chunks in intent states
	// that the next run must wait out the reconcile grace for (issue 11,
	// item 6). They finish and record their outcome, as after a first stop
	// signal; only ctx (a second signal) abandons them.
	var g errgroup.Group
	g.SetLimit(d.opts.Concurrency)
	for _, t := range tasks {
		if d.stopping(stop) || d.halted.Load() {
			break
		}
		g.Go(func() error {
			if d.halted.Load() {
				return nil // a sibling failed fatally while this one waited for a slot
			}
			m, err := t(ctx)
			if m {
				movedMu.Lock()
				moved = true
				movedMu.Unlock()
			}
			if err != nil && (errors.Is(err, ErrFatal) || ctx.Err() != nil) {
				d.halted.Store(true)
				return err
			}
			return nil
		})
	}
	err := g.Wait()
	if ctx.Err() != nil {
		return moved, ctx.Err()
	}
	return moved, err
}

// sleep waits until the next poll or retry is due, stop, the deadline, or
// ctx.
func (d *Dispatcher) sleep(ctx context.Context, stop <-chan struct{}, chunks []*sluice.Chunk) error {
	now := d.opts.Now()
	wake := now.Add(d.opts.MaxPollInterval)
	for _, c := range chunks {
		if c.State.Terminal() || c.NextPollAt.IsZero() {
			continue
		}
		if c.NextPollAt.Before(wake) {
			wake = c.NextPollAt
		}
	}
	if !d.opts.Deadline.IsZero() && d.opts.Deadline.Before(wake) {
		wake = d.opts.Deadline
	}
	// Polls due within the next moment are gathered into one round: with
	// thousands of live batches and jittered schedules, waking for each
	// one re-read every chunk row tens of times a second
	// (scripts/bench-polling.sh: 615 CPU s per hour of waiting at 2,000
	// batches).
	wait := max(wake.Sub(now), min(time.Second, max(d.opts.PollInterval/2, 10*time.Millisecond)))
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-stop:
	case <-t.C:
	}
	return nil
}

// nextPoll is when a batch polled n times should be polled again: the
// interval grows by half each poll up to the maximum, with ±20% jitter so
// many batches do not poll in step.
func (d *Dispatcher) nextPoll(n int) time.Time {
	iv := float64(d.opts.PollInterval)
	for i := 0; i < n && iv < float64(d.opts.MaxPollInterval); i++ {
		iv *= 1.5
	}
	iv = min(iv, float64(d.opts.MaxPollInterval))
	iv *= 0.8 + 0.4*rand.Float64()
	return d.opts.Now().Add(time.Duration(iv))
}

func (d *Dispatcher) isQueueFull(model string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.queueFull[model]
}

func (d *Dispatcher) setQueueFull(model string, full bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.queueFull[model] = full
}

// wasAlone reports whether this run submitted chunk id alone of its model,
// and whether it knows.
func (d *Dispatcher) wasAlone(id int64) (alone, known bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	alone, known = d.alone[id]
	return alone, known
}

func (d *Dispatcher) chunkLog(c *sluice.Chunk) *zerolog.Logger {
	l := d.log.With().Int64("chunk", c.ID).Int("attempt", c.Attempt).Str("model", c.Model)
	if c.BatchID != "" {
		l = l.Str("batch_id", c.BatchID)
	}
	lg := l.Logger()
	return &lg
}

// fatalError marks err as stopping the run without changing its message.
type fatalError struct{ err error }

func (e *fatalError) Error() string   { return e.err.Error() }
func (e *fatalError) Unwrap() []error { return []error{ErrFatal, e.err} }
func fatal(err error) error           { return &fatalError{err} }
