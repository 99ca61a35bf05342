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
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

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
	// FallbackAt, when set, begins the realtime fallback at that time
	// (realtime.go): live batches are cancelled, what they finished kept,
	// and every request still unanswered is sent through the provider's
	// synchronous API (sluice.RealtimeCaller), Concurrency calls at once.
	FallbackAt time.Time
	// StuckFallback sends the requests a batch cancelled as stuck
	// (StuckAfter) did not finish through the synchronous API instead of a
	// new batch.
	StuckFallback bool
	// Once does every step that is ready now and returns without sleeping.
	Once bool
	Log  zerolog.Logger
	// Clock is the time source of the schedule and of the times recorded
	// (tests); default the wall clock.
	Clock sluice.Clock
	// OnTick is called, from the scheduler's goroutine, with the chunks as
	// they stand whenever a task's outcome changed them. It must not block
	// and must not change the chunks.
	OnTick func(chunks []*sluice.Chunk)
	// Claim, when set, is asked before any step of chunk c starts: it
	// leases the chunk's next step to this worker (and may refresh *c from
	// the store). ok false means another worker holds it: the chunk is left
	// alone and asked for again after PollInterval. release gives the lease
	// back once the step's outcome is recorded. The step then acts on the
	// chunk as the store has it after the claim, and only if it is still
	// the step chosen. Nil: this dispatcher is the job's only worker
	// (docs/scale-out.md, "Many workers"). An error stops the run
	// (ErrFatal).
	Claim func(ctx context.Context, c *sluice.Chunk) (release func(), ok bool, err error)
	// Files, if set, keeps the job's chunk and results files in a shared
	// store as well as in the job directory (--store; docs/scale-out.md,
	// "Object storage").
	Files Files
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
	// ResultsRetention is how long the provider keeps an ended batch's
	// results, counted from its creation (provider.Preset.ResultsRetention,
	// --output-expires-after, --results-retention): a submitted chunk's
	// ResultsExpireAt is its submission plus this, the earliest its
	// results may go, until a poll of the ended batch says when. 0: unknown.
	ResultsRetention time.Duration
	// MaxQueueRefusals is how many times in a row the batch of a chunk of
	// one request may fail token_limit_exceeded while it was submitted
	// alone (no other batch of its model in this job live, none submitted
	// with it) before its request fails for good: the request alone is
	// over the provider's enqueued-token limit, and sending it again cannot
	// help. Default 3 (the org's queue may hold other work for a while).
	// A chunk of more requests refused so is split at once (split.go).
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

	caps sluice.Capabilities

	finishMu sync.Mutex // serialises FinishChunk: the tracker write of a chunk's end
	// concluding bounds how many chunks' results are read at once: each
	// holds its chunk's requests and buffers (tens of MB for 50,000
	// requests), and reading them is CPU work, which more than a few
	// readers per core do not speed up.
	concluding chan struct{}
	createMu   sync.Mutex // serialises creates for Untagged providers
	// queueFull holds the models whose provider queue reported full, with
	// when it last did: only a probe admitted under that mark (probe),
	// taken into the queue, shows that the queue has room again.
	queueFull map[string]time.Time
	// alone says, per chunk submitted by this run, whether it went with no
	// other batch of its model live or submitted beside it.
	alone map[int64]bool
	// probe holds, per chunk this run admitted while its model's queue was
	// marked full, that mark. A batch admitted before the mark is no
	// probe, even when its create returns after the mark was set.
	probe map[int64]time.Time
	// usage and refusedRatio are what the job learned about the provider's
	// token counting, per model (split.go): from finished batches' usage,
	// and from batches refused while alone.
	usage        map[string]sluice.Learned
	refusedRatio map[string]float64
	// newChunks are the chunks of the next attempt that finished chunks
	// made, not yet taken into the scheduler's view.
	newChunks []*sluice.Chunk
	mu        sync.Mutex // guards queueFull, alone, probe, usage, refusedRatio and newChunks
	// halted is set by the first fatal error: no new task or provider call
	// starts; those in flight finish.
	halted atomic.Bool

	// The realtime fallback (realtime.go): the provider's synchronous API
	// and the tracker's log of its calls (nil when either lacks it), the
	// chunks committed to it (guarded by mu), and the slots of calls in
	// flight across the job.
	rt       sluice.RealtimeCaller
	rtStore  sluice.RealtimeStore
	rtChunks map[int64]bool
	rtSem    chan struct{}
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
	if opts.Clock == nil {
		opts.Clock = sluice.SystemClock{}
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
	d := &Dispatcher{store: store, prov: prov, job: job, opts: opts, caps: prov.Capabilities(),
		log: opts.Log.With().Str("job", job.ID).Logger(), queueFull: map[string]time.Time{}, alone: map[int64]bool{}, probe: map[int64]time.Time{}, refusedRatio: map[string]float64{},
		concluding: make(chan struct{}, max(2, runtime.GOMAXPROCS(0))),
		rtChunks:   map[int64]bool{}, rtSem: make(chan struct{}, opts.Concurrency)}
	d.rtStore, _ = store.(sluice.RealtimeStore)
	if rt, ok := prov.(sluice.RealtimeCaller); ok && d.rtStore != nil {
		d.rt = rt
	}
	return d
}

// Realtime reports whether the dispatcher can fall back to the provider's
// synchronous API (its provider and its store support it).
func (d *Dispatcher) Realtime() bool { return d.rt != nil }

func (d *Dispatcher) now() time.Time { return d.opts.Clock.Now() }

func (d *Dispatcher) stopping(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
	}
	return d.pastDeadline()
}

func (d *Dispatcher) pastDeadline() bool {
	return !d.opts.Deadline.IsZero() && !d.now().Before(d.opts.Deadline)
}

func allTerminal(chunks []*sluice.Chunk) bool {
	for _, c := range chunks {
		if !c.State.Terminal() {
			return false
		}
	}
	return true
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
	return d.now().Add(time.Duration(iv))
}

// queueMark reports whether model's provider queue is marked full, and
// since when.
func (d *Dispatcher) queueMark(model string) (time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	at, full := d.queueFull[model]
	return at, full
}

// setQueueFull marks model's provider queue full as of now.
func (d *Dispatcher) setQueueFull(model string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.queueFull[model] = d.now()
}

// queueTook clears the queue-full mark of chunk c's model when c, taken
// into the provider's queue, was admitted under that mark: a probe, sent
// with no other batch of the model live. A batch admitted before the
// mark, whose create returned only after it (a slow create, a loaded
// machine), proves nothing: it went beside the batch that was refused,
// and clearing the mark on it sent the refused batch again beside it, to
// be refused again (TestEnqueuedTokenLimitEqualToBudgetFinishes under
// load: 4 refusals instead of 3).
func (d *Dispatcher) queueTook(c *sluice.Chunk) {
	d.mu.Lock()
	defer d.mu.Unlock()
	at, full := d.queueFull[c.Model]
	if probe, ok := d.probe[c.ID]; full && ok && !probe.Before(at) {
		delete(d.queueFull, c.Model)
	}
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
