package main

import (
	"errors"
	"fmt"
	"testing"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/lifecycle"
	"github.com/sluice-batch/sluice/splitter"
	"github.com/sluice-batch/sluice/tracker"
)

// TestExitCodeOfErrors: the errors of every package that ends a command
// get their documented exit status (docs/contract.md) from their code
// alone, however wrapped.
func TestExitCodeOfErrors(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int
	}{
		{nil, exitOK},
		{errors.New("disk full"), exitError},
		{&tracker.LockedError{Job: "j", PID: 7}, exitError},
		{fmt.Errorf("plan: %w", &splitter.LineError{File: "in", Line: 3, Reason: "bad"}), exitUsage},
		{fmt.Errorf("in: %w", splitter.ErrNoRequests), exitUsage},
		{fmt.Errorf("in: %w", splitter.ErrCorrupt), exitUsage},
		{lifecycle.BadInput(errors.New("input changed")), exitUsage},
		{usageErr("--order %q", "x"), exitUsage},
		{withCode(exitStopped, errors.New("spend cap")), exitStopped},
		{silent(sluice.CodeStopped), exitStopped},
		{fmt.Errorf("wrapped: %w", silent(sluice.CodeFailures)), exitFailures},
	} {
		if got := exitCode(c.err); got != c.want {
			t.Errorf("exitCode(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}
