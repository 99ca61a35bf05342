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

// testJobTransitionTable drives every (from, to) pair of job states through
// a real tracker: each pair the table allows moves the job, each
// other pair is refused with an error naming both states, and a refused
// move leaves the job where it was.
func testJobTransitionTable(t *testing.T, db *testDB) {
	ctx := context.Background()
	planJob(t, db, "j", 1)
	legal, illegal := 0, 0
	for _, from := range sluice.JobStates {
		for _, to := range sluice.JobStates {
			// Put the job in state from (no guarded path leads everywhere).
			if err := db.exec(fmt.Sprintf(`UPDATE jobs SET state = '%s' WHERE id = 'j'`, from)); err != nil {
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

// testCancelAndFinishFollowTheTable: the tracker's other state changes
// (a cancel, a job's finish) are refused from states the table does not
// allow them from, before any row changes.
func testCancelAndFinishFollowTheTable(t *testing.T, db *testDB) {
	ctx := context.Background()
	planJob(t, db, "j", 1)
	for _, from := range sluice.JobStates {
		if err := db.exec(fmt.Sprintf(`UPDATE jobs SET state = '%s' WHERE id = 'j'`, from)); err != nil {
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
		if err := db.exec(fmt.Sprintf(`UPDATE jobs SET state = '%s' WHERE id = 'j'`, from)); err != nil {
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

// testChunkTransitionTable drives every (from, to) pair of chunk states
// through UpdateChunk: each pair the table (sluice.ChunkState.CanTransition)
// allows moves the chunk, each other pair is refused with a
// *sluice.ChunkTransitionError naming both states before anything is
// written (no move, no attempt error recorded). A chunk's finish follows
// the same table.
func testChunkTransitionTable(t *testing.T, db *testDB) {
	ctx := context.Background()
	planJob(t, db, "j", 1)
	put := func(s sluice.ChunkState) *sluice.Chunk {
		t.Helper()
		if err := db.exec(fmt.Sprintf(`UPDATE chunks SET state = '%s' WHERE job_id = 'j' AND id = 1`, s)); err != nil {
			t.Fatal(err)
		}
		c, err := db.Chunk(ctx, "j", 1)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	legal, illegal := 0, 0
	for _, from := range sluice.ChunkStates {
		for _, to := range sluice.ChunkStates {
			c := put(from)
			errsBefore := db.count(t, `SELECT COUNT(*) FROM attempt_errors WHERE job_id = 'j'`)
			c.State = to
			c.SetError(sluice.CodeBatchFailed, fmt.Sprintf("%s to %s", from, to))
			err := db.UpdateChunk(ctx, c, from)
			got, gerr := db.Chunk(ctx, "j", 1)
			if gerr != nil {
				t.Fatal(gerr)
			}
			errsAfter := db.count(t, `SELECT COUNT(*) FROM attempt_errors WHERE job_id = 'j'`)
			if from.CanTransition(to) {
				legal++
				if err != nil {
					t.Errorf("%s -> %s is in the table but was refused: %v", from, to, err)
				}
				if got.State != to || errsAfter != errsBefore+1 {
					t.Errorf("%s -> %s: chunk is %s with %d attempt errors after the move (%d before)", from, to, got.State, errsAfter, errsBefore)
				}
				continue
			}
			illegal++
			var te *sluice.ChunkTransitionError
			if !errors.As(err, &te) || !errors.Is(err, sluice.ErrIllegalChunkTransition) {
				t.Errorf("%s -> %s is not in the table but UpdateChunk returned %v", from, to, err)
				continue
			}
			if te.From != from || te.To != to || te.Chunk != 1 || !strings.Contains(err.Error(), fmt.Sprintf("%s -> %s", from, to)) {
				t.Errorf("%s -> %s refused with %q: does not name the transition", from, to, err)
			}
			if got.State != from || errsAfter != errsBefore {
				t.Errorf("refused %s -> %s left the chunk %s with %d attempt errors (%d before)", from, to, got.State, errsAfter, errsBefore)
			}
		}
	}
	n := len(sluice.ChunkStates)
	if legal+illegal != n*n || legal != 26 {
		t.Errorf("%d legal and %d illegal pairs of %d states; want 26 legal (the table of chunkstate.go)", legal, illegal, n)
	}
	// A finish ends the chunk: refused from a terminal state by the table,
	// before its requests are touched.
	for _, from := range sluice.ChunkStates {
		c := put(from)
		c.State = sluice.ChunkDone
		err := db.FinishChunk(ctx, &sluice.Finish{Chunk: c, From: from})
		if from.CanTransition(sluice.ChunkDone) != (err == nil) {
			t.Errorf("FinishChunk from %s: %v; the table says allowed=%v", from, err, from.CanTransition(sluice.ChunkDone))
		}
		if err != nil && !errors.Is(err, sluice.ErrIllegalChunkTransition) {
			t.Errorf("FinishChunk from %s: %v, want an illegal transition", from, err)
		}
	}
}
