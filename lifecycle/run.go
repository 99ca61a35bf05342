package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/dispatcher"
	"github.com/sluice-batch/sluice/objstore"
	"github.com/sluice-batch/sluice/pricing"
	"github.com/sluice-batch/sluice/tracker"
)

// RunOptions tune a run. Zero values take the defaults of defaults.go
// (for --provider local, its Local* ones).
type RunOptions struct {
	// Output is recorded as the job's output path (status and cancel use
	// it); "" keeps what is recorded.
	Output string
	// Concurrency bounds provider calls in flight.
	Concurrency int
	// PollInterval and MaxPollInterval: the first and the longest wait
	// between polls of one batch.
	PollInterval, MaxPollInterval time.Duration
	// Deadline, when set, stops submitting and polling at that time.
	Deadline time.Time
	// FallbackAt, when set, begins the realtime fallback then
	// (dispatcher.Options.FallbackAt).
	FallbackAt time.Time
	// StuckFallback sends the requests of batches cancelled as stuck
	// through the synchronous API too (dispatcher.Options.StuckFallback).
	StuckFallback bool
	// Once does every step that is ready now and returns without sleeping.
	Once bool
	// ReconcileGrace: how long after a crash to keep looking at the
	// provider for what the killed run may have created. Ignored for
	// --provider local (sluice.LocalReconcileGrace).
	ReconcileGrace time.Duration
	// StuckAfter: a batch not ended this long after its submission is
	// cancelled and its requests retried.
	StuckAfter time.Duration
	// ResultsRetention: how long the provider keeps an ended batch's
	// results, from its creation (dispatcher.Options.ResultsRetention).
	ResultsRetention time.Duration
	// MaxCost caps the job's committed spend in USD (docs/money.md); Price
	// prices a model. A cap is refused (ErrBadInput) before anything is
	// submitted when a model of a chunk still to run has no price or no
	// bound on its output; the cap is recorded (0: none).
	MaxCost float64
	Price   func(model string) (pricing.Price, bool)
	// OnTick is called by the dispatcher with the chunks whenever a step
	// changed them (dispatcher.Options.OnTick).
	OnTick func(chunks []*sluice.Chunk)
	// Claim leases a chunk's next step to this worker of the job
	// (dispatcher.Options.Claim; docs/scale-out.md, "Many workers"); nil
	// when the run is the job's only worker.
	Claim func(ctx context.Context, c *sluice.Chunk) (release func(), ok bool, err error)
	// Clock is the dispatcher's clock (tests); default the wall clock.
	Clock sluice.Clock
	Log   zerolog.Logger
	// Files, if set, keeps the job's chunk and results files in a store
	// besides the job directory (Spec.Files; objects.go).
	Files objstore.Store
}

// Outcome is how a run ended (dispatcher.Finished, Stopped or CapReached).
type Outcome = dispatcher.Outcome

// Dispatches reports whether a run of a job in this state drives batches
// (and so needs a provider client): running and cancelled jobs do, a
// planned one will; a merging or done job only merges.
func Dispatches(job *sluice.Job) bool {
	switch job.State {
	case sluice.JobPlanned, sluice.JobRunning, sluice.JobCancelled:
		return true
	}
	return false
}

// PollDefaults are the poll intervals a run of provider uses when none are
// given: sluice.DefaultPollInterval and DefaultMaxPollInterval, or the
// Local* ones for the built-in emulator.
func PollDefaults(provider string) (poll, maxPoll time.Duration) {
	if provider == "local" {
		return sluice.LocalPollInterval, sluice.LocalMaxPollInterval
	}
	return sluice.DefaultPollInterval, sluice.DefaultMaxPollInterval
}

// CancelPollDefaults are the poll intervals while a cancel waits for
// cancelled batches to end.
func CancelPollDefaults(provider string) (poll, maxPoll time.Duration) {
	if provider == "local" {
		return sluice.LocalCancelPollInterval, sluice.LocalCancelMaxPollInterval
	}
	return sluice.CancelPollInterval, sluice.CancelMaxPollInterval
}

func (o RunOptions) dispatcherOptions(db Store, job *sluice.Job) dispatcher.Options {
	poll, maxPoll := PollDefaults(job.Provider)
	grace := o.ReconcileGrace
	if job.Provider == "local" {
		// The in-process emulator died with the run: nothing lands later.
		grace = sluice.LocalReconcileGrace
	}
	return dispatcher.Options{
		Files:       filesOf(o.Files, job),
		Concurrency: o.Concurrency, PollInterval: orDefault(o.PollInterval, poll),
		MaxPollInterval: orDefault(o.MaxPollInterval, maxPoll), Deadline: o.Deadline, FallbackAt: o.FallbackAt, StuckFallback: o.StuckFallback, Once: o.Once,
		Log: o.Log, OnTick: o.OnTick, ReconcileGrace: grace, StuckAfter: o.StuckAfter, Clock: o.Clock,
		MaxCost: o.MaxCost, Price: o.Price, Learned: db.Learned, Claim: o.Claim,
		ResultsRetention: o.ResultsRetention,
	}
}

// Run drives a prepared job: it records the output path, moves a planned
// job to running, and dispatches a running or cancelled job until every
// request is final (then moves it to merging and returns
// dispatcher.Finished), or until the deadline, Once, the spend cap or stop
// leaves work running (Stopped, CapReached: the job stays as it is and the
// next run carries on). A merging or done job is returned as Finished
// untouched, and prov may then be nil (Dispatches). stop closing means:
// start nothing new, let calls in flight record their outcome. The caller
// holds the job's lock.
func Run(ctx context.Context, db Store, prov sluice.Provider, job *sluice.Job, o RunOptions, stop <-chan struct{}) (Outcome, error) {
	if err := checkCap(ctx, db, job, o); err != nil {
		return dispatcher.Stopped, err
	}
	if o.Output != "" {
		if err := db.SetJobOutput(ctx, job.ID, o.Output); err != nil {
			return dispatcher.Stopped, err
		}
		job.Output = o.Output
	}
	if job.State == sluice.JobPlanned {
		if err := advance(ctx, db, job, sluice.JobRunning); err != nil {
			return dispatcher.Stopped, err
		}
	}
	switch job.State {
	case sluice.JobMerging, sluice.JobDone:
		return dispatcher.Finished, nil
	case sluice.JobRunning, sluice.JobCancelled:
	default:
		// Prepare never hands out a job that is still planning.
		return dispatcher.Stopped, fmt.Errorf("job %s is %s: it cannot run (prepare it first)", job.ID, job.State)
	}
	outcome, err := dispatcher.New(db, prov, job, o.dispatcherOptions(db, job)).Run(ctx, stop)
	if err != nil || outcome != dispatcher.Finished {
		return outcome, err
	}
	if err := advance(ctx, db, job, sluice.JobMerging); err != nil {
		return dispatcher.Stopped, err
	}
	return dispatcher.Finished, nil
}

// advance moves job to state to, unless another worker of the job moved
// it first (docs/scale-out.md, "Many workers": every worker finds the
// job planned, every worker sees its last request final): then job takes
// the state the store holds.
func advance(ctx context.Context, db Store, job *sluice.Job, to sluice.JobState) error {
	err := db.SetJobState(ctx, job.ID, job.State, to)
	if err == nil {
		job.State = to
		return nil
	}
	if !errors.Is(err, tracker.ErrConflict) {
		return err
	}
	fresh, ferr := db.Job(ctx, job.ID)
	if ferr != nil {
		return ferr
	}
	job.State = fresh.State
	return nil
}

// orDefault returns v, or def when v is zero.
func orDefault(v, def time.Duration) time.Duration {
	if v == 0 {
		return def
	}
	return v
}
