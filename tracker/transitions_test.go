package tracker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/tracker"
)

// TestJobTransitionTable drives every (from, to) pair of job states through
// a real SQLite tracker: each pair the table allows moves the job, each
// other pair is refused with an error naming both states, and a refused
// move leaves the job where it was.
func TestJobTransitionTable(t *testing.T) {
	ctx := context.Background()
	db := open(t)
	planJob(t, db, "j", 1)
	legal, illegal := 0, 0
	for _, from := range sluice.JobStates {
		for _, to := range sluice.JobStates {
			// Put the job in state from (no guarded path leads everywhere).
			if _, err := db.SQL().ExecContext(ctx, `UPDATE jobs SET state = ? WHERE id = 'j'`, from); err != nil {
				t.Fatal(err)
			}
			err := db.SetJobState(ctx, "j", from, to)
			got, jerr := db.Job(ctx, "j")
			if jerr != nil {
				t.Fatal(jerr)
			}
			if from.CanTransition(to) {
				legal++
				if err != nil {
					t.Errorf("%s -> %s is in the table but was refused: %v", from, to, err)
				}
				if got.State != to {
					t.Errorf("%s -> %s: job is %s after the move", from, to, got.State)
				}
				continue
			}
			illegal++
			var te *sluice.TransitionError
			if !errors.As(err, &te) || !errors.Is(err, sluice.ErrIllegalTransition) {
				t.Errorf("%s -> %s is not in the table but SetJobState returned %v", from, to, err)
				continue
			}
			if te.From != from || te.To != to || !strings.Contains(err.Error(), fmt.Sprintf("%s -> %s", from, to)) {
				t.Errorf("%s -> %s refused with %q: does not name the transition", from, to, err)
			}
			if got.State != from {
				t.Errorf("refused %s -> %s moved the job to %s", from, to, got.State)
			}
		}
	}
	n := len(sluice.JobStates)
	if legal+illegal != n*n || legal != 7 {
		t.Errorf("%d legal and %d illegal pairs of %d states; want 7 legal (the table of state.go)", legal, illegal, n)
	}
}

// TestCancelAndFinishFollowTheTable: the tracker's other state changes
// (a cancel, a job's finish) are refused from states the table does not
// allow them from, before any row changes.
func TestCancelAndFinishFollowTheTable(t *testing.T) {
	ctx := context.Background()
	db := open(t)
	planJob(t, db, "j", 1)
	for _, from := range sluice.JobStates {
		if _, err := db.SQL().ExecContext(ctx, `UPDATE jobs SET state = ? WHERE id = 'j'`, from); err != nil {
			t.Fatal(err)
		}
		_, err := db.CancelJob(ctx, "j", from)
		if from.CanTransition(sluice.JobCancelled) != (err == nil) {
			t.Errorf("CancelJob from %s: %v; the table says allowed=%v", from, err, from.CanTransition(sluice.JobCancelled))
		}
		if err != nil && !errors.Is(err, sluice.ErrIllegalTransition) {
			t.Errorf("CancelJob from %s: %v, want an illegal transition", from, err)
		}
	}
	for _, from := range sluice.JobStates {
		if _, err := db.SQL().ExecContext(ctx, `UPDATE jobs SET state = ? WHERE id = 'j'`, from); err != nil {
			t.Fatal(err)
		}
		err := db.FinishJob(ctx, "j", &sluice.JobSummary{Output: "/out"})
		if (from == sluice.JobMerging) != (err == nil) {
			t.Errorf("FinishJob from %s: %v", from, err)
		}
		if err != nil && !errors.Is(err, tracker.ErrConflict) && !errors.Is(err, sluice.ErrIllegalTransition) {
			t.Errorf("FinishJob from %s: %v", from, err)
		}
	}
}
