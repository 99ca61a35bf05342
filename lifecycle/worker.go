package lifecycle

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/tracker"
)

// Many workers on one job (docs/scale-out.md, "Many workers"). Every
// `sluice run` is a worker of its job: it registers, heartbeats, plans only
// while it holds the job's plan role, acts on a chunk only under the
// chunk's lease, and merges only while it holds the merge role. A Worker
// is started by StartWorker (it registers and heartbeats) and stopped by
// Stop, which waits for its heartbeat to end and unregisters it.

// DefaultLeaseTTL is how long a worker's leases last past its last
// heartbeat: a worker that dies loses its chunks this long after. Workers
// heartbeat every TTL/3.
const DefaultLeaseTTL = 30 * time.Second

// LeaseStore is what workers need of the tracker (tracker/leases.go),
// whatever its backend.
type LeaseStore interface {
	Job(ctx context.Context, id string) (*sluice.Job, error)
	Chunk(ctx context.Context, job string, id int64) (*sluice.Chunk, error)
	RegisterWorker(ctx context.Context, job string, w sluice.Worker) error
	UnregisterWorker(ctx context.Context, job, worker string) error
	Heartbeat(ctx context.Context, job, worker string, ttl time.Duration) error
	ClaimChunk(ctx context.Context, job string, chunk int64, worker string, ttl time.Duration) (bool, error)
	ReleaseChunk(ctx context.Context, job string, chunk int64, worker string) error
	ClaimRole(ctx context.Context, job, role, worker string, ttl time.Duration) (bool, error)
	ReleaseRole(ctx context.Context, job, role, worker string) error
	PruneWorkers(ctx context.Context, job string, before time.Time) (int, error)
	// TryLockPlan takes the job's plan lock on this machine, if free.
	TryLockPlan(job string) (*tracker.Lock, bool, error)
}

var (
	_ LeaseStore = (*tracker.DB)(nil)
	_ LeaseStore = (*tracker.Postgres)(nil)
)

// Worker is this process as one worker of a job.
type Worker struct {
	db   LeaseStore
	job  string
	id   string
	host string
	ttl  time.Duration
	log  zerolog.Logger
	// lock is the job's lock this worker holds (lockgate.go).
	lock *tracker.Lock
	// Leases held (lockgate.go): claims holds when the claim of each
	// chunk this worker holds started, landed when the last heartbeat
	// that landed started: a chunk's lease lives until the later of the
	// two + ttl. lapsed is set, for good, once one did not.
	leaseMu sync.Mutex
	claims  map[int64]time.Time
	landed  time.Time
	lapsed  error
	// stop cancels the run once the worker's leases lapsed or the job
	// lock is lost for good (lockgate.go); nil until the run sets it.
	stop   func()
	stopMu sync.Mutex

	cancel context.CancelFunc // stops the heartbeat
	wg     sync.WaitGroup
}

// StartWorker registers this process as a worker of job, holding lock
// (the job's lock, taken by the caller), and heartbeats every ttl/3 until
// Stop.
func StartWorker(ctx context.Context, db LeaseStore, job string, ttl time.Duration, lock *tracker.Lock, log zerolog.Logger) (*Worker, error) {
	if ttl <= 0 {
		ttl = DefaultLeaseTTL
	}
	host, _ := os.Hostname()
	var r [4]byte
	rand.Read(r[:])
	w := &Worker{db: db, job: job, ttl: ttl, host: host, lock: lock,
		id: fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(r[:]))}
	w.log = log.With().Str("job", job).Str("worker", w.id).Logger()
	w.landed, w.claims = time.Now(), map[int64]time.Time{}
	if err := db.RegisterWorker(ctx, job, sluice.Worker{ID: w.id, Host: host, PID: os.Getpid()}); err != nil {
		return nil, err
	}
	w.prune(ctx)
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w.cancel = cancel
	w.wg.Add(1)
	go w.heartbeat(hctx)
	return w, nil
}

func (w *Worker) heartbeat(ctx context.Context) {
	defer w.wg.Done()
	t := time.NewTicker(w.ttl / 3)
	defer t.Stop()
	stopped := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := w.beat(ctx)
		if lerr := w.leasesLost(); lerr != nil && ctx.Err() == nil && !stopped {
			w.log.Error().Err(lerr).Msg("stopping: this worker's leases lapsed")
			w.stopRun()
			stopped = true
		}
		if err != nil && ctx.Err() == nil {
			w.log.Warn().Err(err).Msg("heartbeat failed; leases expire unless the next one lands")
		}
	}
}

// beat sends one heartbeat, given a lease's life to land, and records
// when it started if it landed: the leases it extended live from then.
func (w *Worker) beat(ctx context.Context) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, w.ttl)
	defer cancel()
	err := w.db.Heartbeat(ctx, w.job, w.id, w.ttl)
	if errors.Is(err, tracker.ErrNotFound) {
		// Removed (by an exclusive run that took the job over): say
		// again that this worker is alive; its lost leases are lost.
		err = w.db.RegisterWorker(ctx, w.job, sluice.Worker{ID: w.id, Host: w.host, PID: os.Getpid()})
	}
	if err == nil {
		w.landedAt(start)
	}
	return err
}

// Stop stops the heartbeat, waits for it to end, and unregisters the worker, freeing every
// lease and role it holds at once.
func (w *Worker) Stop() {
	if w == nil {
		return
	}
	w.cancel()
	w.wg.Wait()
	// Bounded: a run ends even when the database stopped answering (its
	// leases then expire by themselves), and a run stopped by a signal
	// no longer dies by a further one while it ends (Life.Stop).
	ctx, cancel := context.WithTimeout(context.Background(), stopWithin)
	defer cancel()
	if err := w.db.UnregisterWorker(ctx, w.job, w.id); err != nil {
		w.log.Warn().Err(err).Msg("could not unregister the worker; its leases expire by themselves")
	}
	w.prune(ctx)
}

// stopWithin bounds what Stop asks of the database (a variable: a test
// shortens it).
var stopWithin = 10 * time.Second

// prune removes the rows of workers killed without unregistering (silent
// for three lease lives, nothing held), so that status lists the workers
// there are.
func (w *Worker) prune(ctx context.Context) {
	if n, err := w.db.PruneWorkers(ctx, w.job, time.Now().Add(-3*w.ttl)); err != nil {
		w.log.Warn().Err(err).Msg("could not remove the rows of dead workers")
	} else if n > 0 {
		w.log.Info().Int("workers", n).Msg("removed the rows of workers that stopped without leaving")
	}
}

// LockLost returns the error of the job's lock lost for good, or nil.
func (w *Worker) LockLost() error { return w.lock.Lost() }

// pollEvery is how often a worker waiting for another (for the plan, for
// the merge) looks again.
func (w *Worker) pollEvery() time.Duration {
	return min(max(w.ttl/10, 20*time.Millisecond), time.Second)
}

// wait sleeps one poll interval, or until ctx ends or stop closes.
func (w *Worker) wait(ctx context.Context, stop <-chan struct{}) error {
	t := time.NewTimer(w.pollEvery())
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-stop:
		return ErrStopped
	case <-t.C:
		return nil
	}
}

// ErrStopped: a stop signal came while a worker waited for another.
var ErrStopped = errors.New("stopped while waiting for another worker")

// Claim is the dispatcher's Options.Claim: it leases chunk c to this
// worker and refreshes *c from the store.
func (w *Worker) Claim(ctx context.Context, c *sluice.Chunk) (func(), bool, error) {
	start := time.Now()
	ok, err := w.db.ClaimChunk(ctx, w.job, c.ID, w.id, w.ttl)
	if err != nil || !ok {
		return nil, false, err
	}
	w.claimed(c.ID, start)
	release := func() {
		w.released(c.ID)
		if err := w.db.ReleaseChunk(context.Background(), w.job, c.ID, w.id); err != nil {
			w.log.Warn().Err(err).Int64("chunk", c.ID).Msg("could not release a chunk lease; it expires by itself")
		}
	}
	fresh, err := w.db.Chunk(ctx, w.job, c.ID)
	if err != nil {
		release()
		return nil, false, err
	}
	*c = *fresh
	return release, true, nil
}

// PlanOnce returns the job planned: by plan, called while this worker
// holds the plan role (it plans, or finds the plan another worker
// committed meanwhile and reuses it), or found planned. While another
// worker holds the role, it waits for that plan; when that worker dies
// mid-plan, its role expires and this one plans from scratch.
func (w *Worker) PlanOnce(ctx context.Context, stop <-chan struct{}, plan func() (*Prepared, error)) (*Prepared, error) {
	waiting := false
	for {
		job, err := w.db.Job(ctx, w.job)
		switch {
		case err == nil && job.State != sluice.JobPlanning:
			return plan() // planned: plan reuses it
		case err != nil && !errors.Is(err, tracker.ErrNotFound):
			return nil, err
		}
		ok, err := w.db.ClaimRole(ctx, w.job, sluice.RolePlan, w.id, w.ttl)
		if err != nil {
			return nil, err
		}
		if ok {
			// The role says no worker anywhere plans; the plan lock, that no
			// live process on this machine does (its heartbeats may be
			// starved by its own plan's writes).
			lk, locked, err := w.db.TryLockPlan(w.job)
			if err != nil {
				return nil, err
			}
			if locked {
				defer lk.Unlock()
				defer func() {
					if err := w.db.ReleaseRole(context.WithoutCancel(ctx), w.job, sluice.RolePlan, w.id); err != nil {
						w.log.Warn().Err(err).Msg("could not release the plan role; it expires by itself")
					}
				}()
				return plan()
			}
		}
		if !waiting {
			w.log.Info().Msg("another worker is planning the job; waiting for its plan")
			waiting = true
		}
		if err := w.wait(ctx, stop); err != nil {
			return nil, err
		}
	}
}

// MergeOnce calls merge with the job while this worker holds the merge
// role, unless another worker merged it first (the job is done and was
// not when this worker started: doneBefore false): then it returns false.
// While another worker holds the role it waits; when that worker dies
// mid-merge, its role expires and this one merges.
func (w *Worker) MergeOnce(ctx context.Context, stop <-chan struct{}, doneBefore bool, merge func(*sluice.Job) error) (bool, error) {
	waiting := false
	for {
		ok, err := w.db.ClaimRole(ctx, w.job, sluice.RoleMerge, w.id, w.ttl)
		if err != nil {
			return false, err
		}
		job, err := w.db.Job(ctx, w.job)
		if err != nil {
			return false, err
		}
		if job.State == sluice.JobDone && !doneBefore {
			if ok {
				w.db.ReleaseRole(context.WithoutCancel(ctx), w.job, sluice.RoleMerge, w.id)
			}
			return false, nil // another worker merged it
		}
		if ok {
			return true, merge(job)
		}
		if !waiting {
			w.log.Info().Msg("every request is final; another worker is merging")
			waiting = true
		}
		if err := w.wait(ctx, stop); err != nil {
			return false, err
		}
	}
}
