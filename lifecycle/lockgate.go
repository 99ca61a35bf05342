package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/dispatcher"
	"github.com/sluice-batch/sluice/tracker"
)

// The gate in front of the provider (docs/scale-out.md, "The job lock when
// the database goes away"). A run calls the provider only while it holds
// the job's lock and, as a worker, while the leases of its steps in flight
// live: every call of the run's provider first asks the worker's gate,
// which waits while the job lock is being taken back after its PostgreSQL
// connection dropped, and fails once the lock is lost for good or a held
// chunk lease has outlived its ttl without a heartbeat landing (it may be
// another worker's now). Either failure for good also cancels the run
// (stopRun), so the dispatcher stops; calls in flight are abandoned to the
// next holder's reconcile, as a crash's would be.

// gate returns nil while this worker may call the provider; it waits
// while the job lock is being taken back.
func (w *Worker) gate(ctx context.Context) error {
	if w == nil {
		return nil
	}
	if err := w.lock.Wait(ctx); err != nil {
		return err
	}
	if err := w.leasesLost(); err != nil {
		w.stopRun()
		return err
	}
	return nil
}

// stopRun cancels the run (WatchLock's stop).
func (w *Worker) stopRun() {
	w.stopMu.Lock()
	stop := w.stop
	w.stopMu.Unlock()
	if stop != nil {
		stop()
	}
}

// errLeasesLost: the worker's heartbeats stopped landing for longer than
// a lease of a step in flight lives.
var errLeasesLost = errors.New("this worker's heartbeats did not land")

// leasesLost returns an error once the lease of a chunk this worker
// holds (a step in flight) has lived out its ttl without a heartbeat
// landing to extend it: the lease may be another worker's now, so none of
// this worker's steps may call the provider again. For good: a heartbeat
// landing later does not give back a lease another worker may have
// taken. Holding no chunk lease (planning, merging), nothing lapses.
func (w *Worker) leasesLost() error {
	w.leaseMu.Lock()
	defer w.leaseMu.Unlock()
	if w.lapsed == nil {
		w.lapsed = w.expired(time.Now())
	}
	return w.lapsed
}

// expired returns the error of a held chunk lease that had expired at
// at, or nil. w.leaseMu is held.
func (w *Worker) expired(at time.Time) error {
	for id, since := range w.claims {
		from := since
		if w.landed.After(from) {
			from = w.landed
		}
		if gap := at.Sub(from); gap > w.ttl {
			return fmt.Errorf("%w for %s, longer than a lease lives (--lease-ttl %s): the lease of chunk %d may be another worker's now; this run stopped without calling the provider again",
				errLeasesLost, gap.Round(time.Millisecond), w.ttl, id)
		}
	}
	return nil
}

// landedAt records a heartbeat that landed, sent at start: unless a held
// lease had expired before it (then they lapsed), every lease lives from
// start.
func (w *Worker) landedAt(start time.Time) {
	w.leaseMu.Lock()
	defer w.leaseMu.Unlock()
	if w.lapsed == nil {
		w.lapsed = w.expired(start)
	}
	if w.lapsed == nil {
		w.landed = start
	}
}

// claimed records a chunk lease taken by a claim started at start.
func (w *Worker) claimed(id int64, start time.Time) {
	w.leaseMu.Lock()
	defer w.leaseMu.Unlock()
	w.claims[id] = start
}

// released forgets a chunk lease given back.
func (w *Worker) released(id int64) {
	w.leaseMu.Lock()
	defer w.leaseMu.Unlock()
	delete(w.claims, id)
}

// WatchLock logs the job lock's drops and takings back, and sets stop
// (the run's cancel) to be called once the lock is lost for good or the
// worker's leases lapse.
func (w *Worker) WatchLock(log zerolog.Logger, stop func()) {
	if w == nil {
		return
	}
	w.stopMu.Lock()
	w.stop = stop
	w.stopMu.Unlock()
	w.lock.OnChange(func(held bool, cause string, err error) {
		switch {
		case err != nil:
			log.Error().Err(err).Msg("lost the job lock")
			w.stopRun()
		case held:
			log.Warn().Msg("took the job lock back after its PostgreSQL connection dropped; carrying on")
		default:
			log.Warn().Str("cause", cause).Msg("the job lock's PostgreSQL connection dropped: no provider call until it is taken back")
		}
	})
}

// FailureCause names, in the error a run fails with, the database going
// away when it did: the lock lost for good (its error), the worker's
// leases lapsed, or the lock's connection dropped during the run.
func (w *Worker) FailureCause(err error) error {
	if err == nil || w == nil || isSilent(err) {
		return err
	}
	if lost := w.lock.Lost(); lost != nil {
		return lost
	}
	var le *tracker.LockLostError
	if errors.As(err, &le) {
		return le // a chunk write the lock's epoch refused
	}
	if errors.Is(err, errLeasesLost) {
		return err
	}
	if lerr := w.leasesLost(); lerr != nil {
		return fmt.Errorf("%w (%v)", lerr, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if cause := w.lock.Verify(ctx); cause != "" {
		// Being taken back: say how that ends, if it does soon.
		if werr := w.lock.Wait(ctx); errors.As(werr, &le) {
			return le
		}
		return fmt.Errorf("the job lock's PostgreSQL connection dropped during the run (%s); the state is saved: run the same command again to continue: %w", cause, err)
	}
	return err
}

// maxRides bounds how many times one run starts its dispatch over after
// the database went away and came back (Ride).
const maxRides = 5

// Ride calls run (the job's dispatch), and calls it again when it failed
// while the job lock's connection dropped and the lock is this run's
// again: the database went away (a restart, a failover) and came back,
// and whatever the failed dispatch was doing is where the tracker says,
// as after a crash. The next dispatch starts from the tracker's state and
// settles intents left mid-call against the provider's listings first
// (docs/crash-safety.md), as the same command run again would. Not when
// the lock is lost for good, the worker's leases lapsed, or the failure
// came with no drop.
func (w *Worker) Ride(ctx context.Context, log zerolog.Logger, run func() (dispatcher.Outcome, error)) (dispatcher.Outcome, error) {
	for n := 0; ; n++ {
		drops := w.lock.Drops()
		outcome, err := run()
		if err == nil || w == nil || n >= maxRides || ctx.Err() != nil || isSilent(err) {
			return outcome, err
		}
		vctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		w.lock.Verify(vctx) // a drop not seen yet
		cancel()
		if w.lock.Drops() == drops {
			return outcome, err
		}
		if werr := w.lock.Wait(ctx); werr != nil || w.leasesLost() != nil {
			return outcome, err
		}
		log.Warn().Err(err).Msg("the database went away mid-run and the job lock is this run's again: starting the dispatch over from the tracker's state, as a new run would")
	}
}

// isSilent reports whether err is an exit code rather than a failure
// (exit 3 and 4, usage).
func isSilent(err error) bool {
	code := sluice.ErrorCodeOf(err)
	return code != "" && code != sluice.CodeInternal
}

// leasedStore is the tracker as the run's dispatch writes it: a chunk's
// intent or outcome is recorded only while this worker's leases live. A
// worker that wakes from a silence longer than a lease (a pause, a cut
// network) must not record the end of a step another worker has taken
// over meanwhile: that worker would find the chunk moved under it.
type leasedStore struct {
	tracker.Backend
	w *Worker
}

// WithLeases puts db's chunk writes behind w's leases.
func WithLeases(db tracker.Backend, w *Worker) tracker.Backend {
	if w == nil {
		return db
	}
	return &leasedStore{Backend: db, w: w}
}

func (s *leasedStore) UpdateChunk(ctx context.Context, c *sluice.Chunk, from sluice.ChunkState) error {
	if err := s.w.leasesLost(); err != nil {
		s.w.stopRun()
		return err
	}
	return s.Backend.UpdateChunk(ctx, c, from)
}

func (s *leasedStore) FinishChunk(ctx context.Context, f *sluice.Finish) error {
	if err := s.w.leasesLost(); err != nil {
		s.w.stopRun()
		return err
	}
	return s.Backend.FinishChunk(ctx, f)
}

// gatedProvider is the run's provider behind the worker's gate: every
// call that reaches the provider asks it first. Decode only reads files
// already fetched.
type gatedProvider struct {
	sluice.Provider
	w *Worker
}

// GateProvider puts p behind w's gate, keeping ResultStreamer.
func GateProvider(p sluice.Provider, w *Worker) sluice.Provider {
	if w == nil || p == nil {
		return p
	}
	g := &gatedProvider{Provider: p, w: w}
	if rs, ok := p.(sluice.ResultStreamer); ok {
		return &gatedStreamer{gatedProvider: g, rs: rs}
	}
	return g
}

func (g *gatedProvider) Upload(ctx context.Context, ref sluice.BatchRef) (string, error) {
	if err := g.w.gate(ctx); err != nil {
		return "", err
	}
	return g.Provider.Upload(ctx, ref)
}

func (g *gatedProvider) Create(ctx context.Context, ref sluice.BatchRef, fileID string) (sluice.Batch, error) {
	if err := g.w.gate(ctx); err != nil {
		return sluice.Batch{}, err
	}
	return g.Provider.Create(ctx, ref, fileID)
}

func (g *gatedProvider) Poll(ctx context.Context, ref sluice.BatchRef, batchID string) (sluice.Batch, error) {
	if err := g.w.gate(ctx); err != nil {
		return sluice.Batch{}, err
	}
	return g.Provider.Poll(ctx, ref, batchID)
}

func (g *gatedProvider) Fetch(ctx context.Context, ref sluice.BatchRef, b sluice.Batch, dir string) ([]string, error) {
	if err := g.w.gate(ctx); err != nil {
		return nil, err
	}
	return g.Provider.Fetch(ctx, ref, b, dir)
}

func (g *gatedProvider) Cancel(ctx context.Context, batchID string) (sluice.Batch, error) {
	if err := g.w.gate(ctx); err != nil {
		return sluice.Batch{}, err
	}
	return g.Provider.Cancel(ctx, batchID)
}

func (g *gatedProvider) Find(ctx context.Context, ref sluice.BatchRef) (string, string, error) {
	if err := g.w.gate(ctx); err != nil {
		return "", "", err
	}
	return g.Provider.Find(ctx, ref)
}

func (g *gatedProvider) Forget(ctx context.Context, ref sluice.BatchRef, fileIDs ...string) error {
	if err := g.w.gate(ctx); err != nil {
		return err
	}
	return g.Provider.Forget(ctx, ref, fileIDs...)
}

// CallRealtime is the realtime fallback's synchronous call, behind the gate.
func (g *gatedProvider) CallRealtime(ctx context.Context, ref sluice.BatchRef, item []byte) (sluice.Result, error) {
	rt, ok := g.Provider.(sluice.RealtimeCaller)
	if !ok {
		return sluice.Result{}, fmt.Errorf("provider %s has no synchronous API for the realtime fallback", g.Provider.Name())
	}
	if err := g.w.gate(ctx); err != nil {
		return sluice.Result{}, err
	}
	return rt.CallRealtime(ctx, ref, item)
}

// gatedStreamer is a gatedProvider whose provider streams results.
type gatedStreamer struct {
	*gatedProvider
	rs sluice.ResultStreamer
}

func (g *gatedStreamer) StreamsResults(ref sluice.BatchRef) bool { return g.rs.StreamsResults(ref) }

func (g *gatedStreamer) StreamResults(ctx context.Context, ref sluice.BatchRef, b sluice.Batch, lookup func(int) (string, bool), fn func(sluice.Result) error) error {
	if err := g.w.gate(ctx); err != nil {
		return err
	}
	return g.rs.StreamResults(ctx, ref, b, lookup, fn)
}
