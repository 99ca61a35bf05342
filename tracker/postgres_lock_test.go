package tracker_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/internal/testsrv"
	"github.com/sluice-batch/sluice/tracker"
)

// TestPostgresJobLockFence: a process whose job lock's session was cut,
// and which has not seen it yet, can record nothing more about the job's
// chunks once another process took the job's lock: the lock's epoch
// (job_locks) fences every chunk write, intent and outcome alike. The new
// holder writes as usual.
func TestPostgresJobLockFence(t *testing.T) {
	// Not parallel: it sets the package's PGLockCheckEvery, which every
	// PostgreSQL job lock reads.
	defer func(d time.Duration) { *tracker.PGLockCheckEvery = d }(*tracker.PGLockCheckEvery)
	*tracker.PGLockCheckEvery = time.Hour // the watcher never looks: the fence alone
	ctx := context.Background()
	dsn := testsrv.Postgres(t)
	a, b := openPostgres(t, dsn), openPostgres(t, dsn)
	planJob(t, a, "j", 2)
	la, err := a.LockJob("j")
	if err != nil {
		t.Fatal(err)
	}
	defer la.Unlock()
	move := func(db tracker.Backend, from, to sluice.ChunkState) error {
		cs, err := db.Chunks(ctx, "j")
		if err != nil {
			t.Fatal(err)
		}
		c := cs[0]
		c.State = to
		return db.UpdateChunk(ctx, c, from)
	}
	if err := move(a, sluice.ChunkPending, sluice.ChunkUploading); err != nil {
		t.Fatalf("the holder's intent: %v", err)
	}
	app := fmt.Sprintf("sluice lock pid %d", os.Getpid())
	if n := pgCount(t, a, `SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = $1`, app); n != 1 {
		t.Fatalf("%d lock sessions cut, want 1", n)
	}
	deadline := time.Now().Add(20 * time.Second)
	for a.LockHolder(ctx, "j") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the cut session still holds the lock")
		}
		time.Sleep(20 * time.Millisecond)
	}
	lb, err := b.LockJob("j")
	if err != nil {
		t.Fatalf("another process takes the freed lock: %v", err)
	}
	defer lb.Unlock()
	err = move(a, sluice.ChunkUploading, sluice.ChunkUploaded)
	var lost *tracker.LockLostError
	if !errors.Is(err, tracker.ErrLockLost) || !errors.As(err, &lost) {
		t.Fatalf("the old holder's write after the new one took the lock: %v, want a lost lock", err)
	}
	t.Log(err)
	c, err := a.Chunk(ctx, "j", 1)
	if err != nil || c.State != sluice.ChunkUploading {
		t.Fatalf("chunk after the refused write: %+v, %v", c, err)
	}
	if err := move(b, sluice.ChunkUploading, sluice.ChunkUploaded); err != nil {
		t.Fatalf("the new holder's write: %v", err)
	}
}

func pgCount(t *testing.T, p *tracker.Postgres, q string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := p.Pool().QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// TestPostgresVerifyCountsTheDropItSees: when Verify finds the lock's
// session gone, the drop is counted by the time Verify returns. A run
// whose dispatch failed on the dead connections of a quick server restart
// asks Verify, then compares Drops to decide to ride on
// (lifecycle.Worker.Ride): a drop counted after Verify returned made the
// run fail with the driver's error instead of taking the lock back.
func TestPostgresVerifyCountsTheDropItSees(t *testing.T) {
	// Not parallel: it sets the package's PGLockCheckEvery.
	defer func(d time.Duration) { *tracker.PGLockCheckEvery = d }(*tracker.PGLockCheckEvery)
	*tracker.PGLockCheckEvery = time.Hour // only Verify looks
	ctx := context.Background()
	a := openPostgres(t, testsrv.Postgres(t))
	planJob(t, a, "j", 1)
	l, err := a.LockJob("j")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock()
	app := fmt.Sprintf("sluice lock pid %d", os.Getpid())
	for i := 1; i <= 20; i++ {
		if n := pgCount(t, a, `SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = $1`, app); n != 1 {
			t.Fatalf("round %d: %d lock sessions cut, want 1", i, n)
		}
		if cause := l.Verify(ctx); cause == "" {
			t.Fatalf("round %d: Verify found the cut session holding the lock", i)
		}
		if d := l.Drops(); d != i {
			t.Fatalf("round %d: Verify saw the drop, Drops says %d, want %d", i, d, i)
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := l.Wait(wctx)
		cancel()
		if err != nil {
			t.Fatalf("round %d: the lock was not taken back: %v", i, err)
		}
	}
}
