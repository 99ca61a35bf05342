// Package lifecycle owns a job's life between the command line and the
// parts: it prepares a job (plans the input, or reuses the plan of the
// same unchanged input), runs it (moves it to running and drives the
// dispatcher until every request is final or the run is told to stop),
// cancels it, merges its results into the output, settles its files at the
// provider, and reads where it stands. Every state change goes through the
// table of job transitions in the root package (sluice.JobState.
// CanTransition), which the tracker enforces.
//
// The package prints nothing and knows no flags: cmd/sluice maps flags to
// the options here, prints progress and summaries, and maps errors to exit
// codes (errors the user's input or arguments caused wrap ErrBadInput).
// The defaults of a job's life are sluice.Default* (defaults.go).
// docs/architecture.md says who owns what.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/tracker"
)

// Store is the tracker as a job's life uses it; tracker.Backend is one.
type Store interface {
	sluice.Store
	// Dir is the state directory: job directories go under Dir()/jobs.
	Dir() string
	Jobs(ctx context.Context) ([]*sluice.Job, error)
	BeginPlan(ctx context.Context, job *sluice.Job) (tracker.PlanWriter, error)
	DeleteJob(ctx context.Context, id string) error
	UpdateFingerprint(ctx context.Context, id string, fp sluice.Fingerprint) error
	SetJobOutput(ctx context.Context, id, output string) error
	CancelJob(ctx context.Context, id string, from sluice.JobState) (time.Time, error)
	FinishJob(ctx context.Context, job string, s *sluice.JobSummary) error
	SetSummary(ctx context.Context, job string, s *sluice.JobSummary) error
	Summary(ctx context.Context, job string) (*sluice.JobSummary, error)
	RetriedRequests(ctx context.Context, job string) (int64, error)
	SetProviderFiles(ctx context.Context, id, state string) error
	Learned(ctx context.Context) (map[string]sluice.Learned, error)
	AttemptErrors(ctx context.Context, job string, n int) ([]sluice.AttemptError, int64, error)
	SetMaxCost(ctx context.Context, job string, usd *float64) error
	LockHolder(ctx context.Context, job string) int
}

var (
	_ Store = (*tracker.DB)(nil)
	_ Store = (*tracker.Postgres)(nil)
)

// ErrBadInput is wrapped by errors that the user's input or arguments
// caused (a changed input, a directory given as input, a bad model map, a
// job in a state the command does not apply to); the command exits 2 on
// them (its code is sluice.CodeInvalid).
var ErrBadInput error = &sluice.Error{Code: sluice.CodeInvalid, Err: errors.New("bad input")}

type badInput struct{ err error }

func (e *badInput) Error() string   { return e.err.Error() }
func (e *badInput) Unwrap() []error { return []error{e.err, ErrBadInput} }

func (e *badInput) ErrorCode() sluice.ErrorCode { return sluice.CodeInvalid }

// BadInput marks err as caused by the user's input or arguments.
func BadInput(err error) error {
	if err == nil {
		return nil
	}
	return &badInput{err}
}

func badInputf(format string, args ...any) error { return BadInput(fmt.Errorf(format, args...)) }
