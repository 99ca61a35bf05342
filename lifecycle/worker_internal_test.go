package lifecycle

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/tracker"
)

// mergingJob records a one-request job in state merging in dir.
func mergingJob(t *testing.T, dir string) {
	t.Helper()
	db, err := tracker.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	planMergingJob(t, db)
}

// planMergingJob records a one-request job "j" in state merging in db.
func planMergingJob(t *testing.T, db tracker.Backend) {
	t.Helper()
	ctx := context.Background()
	p, err := db.BeginPlan(ctx, &sluice.Job{ID: "j", Provider: "openai", Input: "/in", Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AddRequest(&sluice.Request{Ordinal: 0, Line: 1, CustomID: "a", Chunk: 1}); err != nil {
		t.Fatal(err)
	}
	if err := p.AddChunk(&sluice.Chunk{ID: 1, URL: "u", Model: "m", Path: "c", Requests: 1}); err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(ctx, sluice.Fingerprint{Size: 1}, 1, 0); err != nil {
		t.Fatal(err)
	}
	for _, s := range [][2]sluice.JobState{{sluice.JobPlanned, sluice.JobRunning}, {sluice.JobRunning, sluice.JobMerging}} {
		if err := db.SetJobState(ctx, "j", s[0], s[1]); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMergeOnceAcrossWorkers: workers (each on its own database handle,
// as separate processes are) reach the merge at once: exactly one merges,
// the others return once the job is done; the heartbeats run meanwhile.
func TestMergeOnceAcrossWorkers(t *testing.T) {
	// Not parallel: leases of about 100 ms on the wall clock.
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "state")
	mergingJob(t, dir)
	var merges atomic.Int32
	var wg sync.WaitGroup
	const n = 4
	merged := make([]bool, n)
	for i := 0; i < n; i++ {
		db, err := tracker.Open(ctx, dir)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		w, err := StartWorker(ctx, db, "j", 90*time.Millisecond, nil, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer w.Stop()
			ok, err := w.MergeOnce(ctx, nil, false, func(job *sluice.Job) error {
				merges.Add(1)
				time.Sleep(200 * time.Millisecond) // longer than a lease: heartbeats keep the role
				return db.FinishJob(ctx, job.ID, &sluice.JobSummary{Lines: 1})
			})
			if err != nil {
				t.Error(err)
			}
			merged[i] = ok
		}()
	}
	wg.Wait()
	if merges.Load() != 1 {
		t.Fatalf("%d workers merged, want 1", merges.Load())
	}
	count := 0
	for _, m := range merged {
		if m {
			count++
		}
	}
	if count != 1 {
		t.Errorf("%d workers say they merged, want 1", count)
	}
}

// TestWorkerLeasesLapseWithoutHeartbeats: a worker holding a chunk's lease
// (a step in flight) whose heartbeats have not landed for a lease's life
// may call the provider no more (its gate refuses, and stops the run); a
// heartbeat landing later does not give the leases back. Holding no
// lease, a silence stops nothing; a claim counts as a fresh lease.
func TestWorkerLeasesLapseWithoutHeartbeats(t *testing.T) {
	// Not parallel: leases of about 100 ms on the wall clock.
	ctx := context.Background()
	now := time.Now()
	stopped := false
	w := &Worker{ttl: 100 * time.Millisecond, landed: now.Add(-time.Second), claims: map[int64]time.Time{},
		stop: func() { stopped = true }}
	if err := w.gate(ctx); err != nil {
		t.Fatalf("no lease held: the gate says %v", err)
	}
	w.claimed(7, now)
	if err := w.gate(ctx); err != nil {
		t.Fatalf("a lease claimed just now: the gate says %v", err)
	}
	w.released(7)
	w.claimed(8, now.Add(-time.Second))
	err := w.gate(ctx)
	if !errors.Is(err, errLeasesLost) || !stopped {
		t.Fatalf("a lease a second old with no heartbeat since: gate %v, run stopped %v", err, stopped)
	}
	w.landedAt(time.Now())
	w.released(8)
	if err := w.gate(ctx); !errors.Is(err, errLeasesLost) {
		t.Fatalf("a heartbeat landing after the lapse gave the leases back: %v", err)
	}

	// Beats landing in time keep an old claim alive.
	w2 := &Worker{ttl: 100 * time.Millisecond, landed: now, claims: map[int64]time.Time{}}
	w2.claimed(1, now.Add(-time.Second))
	w2.landedAt(time.Now())
	if err := w2.leasesLost(); err != nil {
		t.Fatalf("a claim a second old, extended by a heartbeat just now: %v", err)
	}
}
