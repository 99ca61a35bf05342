package tracker

import (
	"context"
	"path/filepath"
	"time"

	"github.com/sluice-batch/sluice"
)

// Backend is the tracker as the commands use it, whatever database holds
// it: *DB (SQLite in the state directory, the default) and *Postgres
// (--db postgres://...) implement it, and the conformance suite
// (conformance_test.go) runs the same tests against both. The contract is
// sluice.Store's (guarded transitions: a row found in another state than
// expected is ErrConflict; a missing job is ErrNotFound) plus what the
// commands need around it.
type Backend interface {
	sluice.Store
	// The realtime fallback's log of synchronous calls (realtime.go).
	sluice.RealtimeStore

	// Dir is the local state directory: job directories (chunk and
	// results files) live there whichever database tracks them.
	Dir() string
	// Describe names the database for people: a path, or a PostgreSQL
	// address with its password redacted.
	Describe() string
	Close() error

	// Jobs returns every job, newest first.
	Jobs(ctx context.Context) ([]*sluice.Job, error)
	// CancelJob moves a job from state from to cancelled (guarded) and
	// records when; it returns the time recorded.
	CancelJob(ctx context.Context, id string, from sluice.JobState) (time.Time, error)
	SetJobOutput(ctx context.Context, id, output string) error
	UpdateFingerprint(ctx context.Context, id string, fp sluice.Fingerprint) error
	// DeleteJob removes a job and every row of it (its ledger entries too).
	DeleteJob(ctx context.Context, id string) error
	SetJobSettings(ctx context.Context, id string, limits sluice.Limits, maxAttempts int) error
	SetJobBucket(ctx context.Context, id, bucket string) error
	SetProviderFiles(ctx context.Context, id, state string) error

	// BatchKnown reports whether any chunk records this provider batch id.
	BatchKnown(ctx context.Context, batchID string) bool
	RetriedRequests(ctx context.Context, job string) (int64, error)
	// AttemptErrors returns the last n errors of a job (all when n <= 0),
	// oldest first, and how many there are in all.
	AttemptErrors(ctx context.Context, job string, n int) ([]sluice.AttemptError, int64, error)

	SetSummary(ctx context.Context, job string, s *sluice.JobSummary) error
	// FinishJob moves a job from merging to done (guarded) and records its
	// summary, in one transaction.
	FinishJob(ctx context.Context, job string, s *sluice.JobSummary) error
	// Summary returns the last merge's summary, or nil.
	Summary(ctx context.Context, job string) (*sluice.JobSummary, error)

	ReuseSources(ctx context.Context, job string) (map[string]int64, error)
	Learned(ctx context.Context) (map[string]sluice.Learned, error)
	SetMaxCost(ctx context.Context, job string, usd *float64) error
	MaxCost(ctx context.Context, job string) (*float64, error)

	// BeginPlan records job in state planning and returns the sink for
	// its plan.
	BeginPlan(ctx context.Context, job *sluice.Job) (PlanWriter, error)

	// LockJob takes the job's exclusive lock without waiting (a
	// *LockedError when another live process holds it). The lock is freed
	// when the process dies, however it dies.
	LockJob(job string) (*Lock, error)
	// LockHolder returns the pid of the live process holding the job's
	// lock, or 0.
	LockHolder(ctx context.Context, job string) int
	// LockJobShared takes the job's lock shared with the other workers of
	// the job; TryLockPlan takes its plan lock (leases.go).
	LockJobShared(job string) (*Lock, error)
	TryLockPlan(job string) (*Lock, bool, error)

	// Many workers on one job (leases.go): the worker registry, chunk
	// leases and job roles, and one chunk's read.
	Chunk(ctx context.Context, job string, id int64) (*sluice.Chunk, error)
	RegisterWorker(ctx context.Context, job string, w sluice.Worker) error
	UnregisterWorker(ctx context.Context, job, worker string) error
	ForgetWorkers(ctx context.Context, job string) error
	PruneWorkers(ctx context.Context, job string, before time.Time) (int, error)
	Heartbeat(ctx context.Context, job, worker string, ttl time.Duration) error
	ClaimChunk(ctx context.Context, job string, chunk int64, worker string, ttl time.Duration) (bool, error)
	ReleaseChunk(ctx context.Context, job string, chunk int64, worker string) error
	ClaimRole(ctx context.Context, job, role, worker string, ttl time.Duration) (bool, error)
	ReleaseRole(ctx context.Context, job, role, worker string) error
	Workers(ctx context.Context, job string) ([]sluice.Worker, error)
}

// PlanWriter records one job's plan (Backend.BeginPlan). Beside the
// splitter's sluice.PlanSink it records many requests at once
// (splitter.BatchSink) and looks answers up in the ledger
// (splitter.ReuseSink).
type PlanWriter interface {
	sluice.PlanSink
	AddRequests(rs []sluice.Request) error
	LookupReuse(keys [][]byte, fn func(i int, a sluice.Answer) error) error
	// SetReused records, before Commit, that the plan's requests of chunk 0
	// were answered from earlier jobs.
	SetReused(n int64, sources map[string]int64) error
	// Commit records the input's fingerprint and counts and moves the job
	// to planned.
	Commit(ctx context.Context, fp sluice.Fingerprint, requests, rejected int64) error
	// Abort throws the plan away: the job and every row of it.
	Abort(ctx context.Context) error
}

var (
	_ Backend    = (*DB)(nil)
	_ Backend    = (*Postgres)(nil)
	_ PlanWriter = (*Plan)(nil)
	_ PlanWriter = (*pgPlan)(nil)
)

// Describe implements Backend.
func (d *DB) Describe() string { return "sqlite " + d.path() }

func (d *DB) path() string { return filepath.Join(d.dir, DBName) }
