package tracker_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/internal/check"
	"github.com/sluice-batch/sluice/internal/testsrv"
	"github.com/sluice-batch/sluice/tracker"
)

// The conformance suite: every test of the tracker's contract
// (tracker.Backend) runs against each backend, SQLite in a temporary
// state directory and PostgreSQL in a fresh database on the test server
// (internal/testsrv), as TestConformance/<backend>/<test>. Tests of one
// backend's own mechanics (SQLite's file modes and migrations, PostgreSQL's
// migrations and connection errors) stay outside it.
var conformance = []struct {
	name string
	test func(*testing.T, *testDB)
}{
	{"PlanCommitAndDuplicate", testPlanCommitAndDuplicate},
	{"GuardedTransitions", testGuardedTransitions},
	{"FinishChunkIsAtomic", testFinishChunkIsAtomic},
	{"LockHeldByOtherProcess", testLockHeldByOtherProcess},
	{"AddRequestsBatchedNamesDuplicate", testAddRequestsBatchedNamesDuplicate},
	{"NewJobNeverInheritsRows", testNewJobNeverInheritsRows},
	{"AttemptErrorsRecorded", testAttemptErrorsRecorded},
	{"FinishJobRecordsSummary", testFinishJobRecordsSummary},
	{"LedgerLookupInBatches", testLedgerLookupInBatches},
	{"CancelAndSettings", testCancelAndSettings},
	{"ConcurrentGuardedTransition", testConcurrentGuardedTransition},
	{"JobTransitionTable", testJobTransitionTable},
	{"ChunkTransitionTable", testChunkTransitionTable},
	{"RealtimeCalls", testRealtimeCalls},
	{"CancelAndFinishFollowTheTable", testCancelAndFinishFollowTheTable},
	{"ClaimChunkIsExclusiveUntilItExpires", testClaimChunkIsExclusiveUntilItExpires},
	{"HeartbeatExtendsEveryLeaseOfTheWorker", testHeartbeatExtendsEveryLeaseOfTheWorker},
	{"ReleaseAndUnregisterFreeLeasesAtOnce", testReleaseAndUnregisterFreeLeasesAtOnce},
	{"ClaimRoleBeforeTheJobExists", testClaimRoleBeforeTheJobExists},
	{"ClaimRacesAcrossConnections", testClaimRacesAcrossConnections},
	{"FinishChunkAllocatesIDs", testFinishChunkAllocatesIDs},
	{"PlanLock", testPlanLock},
	{"PruneWorkers", testPruneWorkers},
	{"FinishChunkGivesNewChunkIDs", testFinishChunkGivesNewChunkIDs},
	{"FinishChunkAlso", testFinishChunkAlso},
	{"DigestRecordedWithTheIntent", testDigestRecordedWithTheIntent},
	{"PlanRecordsStoreKeyAndDigests", testPlanRecordsStoreKeyAndDigests},
	{"ResultsExpiryRoundTrips", testResultsExpiryRoundTrips},
}

// testDB is a backend under test, with what the tests need beyond the
// contract: plain SQL (statements both dialects read the same way) and
// the clock.
type testDB struct {
	tracker.Backend
	name string
	dsn  string // PostgreSQL's; "" for SQLite
	// exec runs a statement; count runs a query of one integer.
	exec     func(q string) error
	countQ   func(q string) (int64, error)
	setClock func(func() time.Time)
	// reopen opens the same database again: another handle, as another
	// process has (closed when the test ends).
	reopen func(t *testing.T) tracker.Backend
}

func (d *testDB) count(t *testing.T, q string) int {
	t.Helper()
	n, err := d.countQ(q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return int(n)
}

// SetClock replaces the backend's clock.
func (d *testDB) SetClock(now func() time.Time) { d.setClock(now) }

// backends opens each backend for one test.
var backends = []struct {
	name string
	open func(t *testing.T) *testDB
}{
	{"sqlite", func(t *testing.T) *testDB {
		db := open(t)
		return &testDB{Backend: db, name: "sqlite",
			exec: func(q string) error { _, err := db.SQL().Exec(q); return err },
			countQ: func(q string) (n int64, err error) {
				err = db.SQL().QueryRow(q).Scan(&n)
				return n, err
			},
			setClock: db.SetClock,
			reopen: func(t *testing.T) tracker.Backend {
				h, err := tracker.Open(context.Background(), db.Dir())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { h.Close() })
				return h
			}}
	}},
	{"postgres", func(t *testing.T) *testDB {
		dsn := testsrv.Postgres(t)
		db := openPostgres(t, dsn)
		ctx := context.Background()
		return &testDB{Backend: db, name: "postgres", dsn: dsn,
			exec: func(q string) error { _, err := db.Pool().Exec(ctx, q); return err },
			countQ: func(q string) (n int64, err error) {
				err = db.Pool().QueryRow(ctx, q).Scan(&n)
				return n, err
			},
			setClock: db.SetClock,
			reopen:   func(t *testing.T) tracker.Backend { return openPostgres(t, dsn) }}
	}},
}

func openPostgres(t *testing.T, dsn string) *tracker.Postgres {
	t.Helper()
	db, err := tracker.OpenPostgres(context.Background(), dsn, filepath.Join(t.TempDir(), "state"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestConformance(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel() // the backends side by side
			for _, c := range conformance {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel() // a state directory or database of its own
					c.test(t, b.open(t))
				})
			}
		})
	}
}

// testCancelAndSettings: the job-level writes the commands make, read back
// the same way on every backend.
func testCancelAndSettings(t *testing.T, db *testDB) {
	ctx := context.Background()
	planJob(t, db, "a", 3)
	time.Sleep(2 * time.Millisecond) // created_at orders Jobs
	planJob(t, db, "b", 2)
	js := check.Try(db.Jobs(ctx)).Must(t, "Jobs")
	check.Fatal(t, "Jobs, want b then a", js, len(js) == 2)
	check.Fatal(t, "Jobs, want b then a", js, js[0].ID == "b", js[1].ID == "a")
	check.Error(t, "job a as read back", js[1], js[1].Requests == 3, js[1].Fingerprint.Hash == "h", js[1].Fingerprint.ModTime.Equal(time.Unix(5, 0)),
		js[1].MaxAttempts == 3, js[1].ProviderFiles == sluice.ProviderFilesLive)
	if _, err := db.Job(ctx, "nope"); !errors.Is(err, tracker.ErrNotFound) {
		t.Errorf("Job(nope): %v, want ErrNotFound", err)
	}
	check.NoErr(t, "SetJobOutput", db.SetJobOutput(ctx, "a", "/out.jsonl"))
	fp := sluice.Fingerprint{Size: 11, ModTime: time.Unix(6, 7), Hash: "h2"}
	check.NoErr(t, "UpdateFingerprint", db.UpdateFingerprint(ctx, "a", fp))
	lim := sluice.Limits{MaxBatchRequests: 7, MaxBatchBytes: 1 << 20}
	check.NoErr(t, "SetJobSettings", db.SetJobSettings(ctx, "a", lim, 5))
	check.NoErr(t, "SetProviderFiles", db.SetProviderFiles(ctx, "a", sluice.ProviderFilesKept))
	if err := db.SetProviderFiles(ctx, "a", "bogus"); err == nil {
		t.Error("an unknown provider_files state was accepted")
	}
	usd := 12.5
	check.NoErr(t, "SetMaxCost", db.SetMaxCost(ctx, "a", &usd))
	v, err := db.MaxCost(ctx, "a")
	check.Error(t, "MaxCost, want 12.5", fmt.Sprint(v, err), err == nil, check.Deref(v) == 12.5)
	v, err = db.MaxCost(ctx, "b")
	check.Error(t, "MaxCost of b, want none", fmt.Sprint(v, err), err == nil, v == nil)
	a := check.Try(db.Job(ctx, "a")).Must(t, "job a after the writes")
	check.Fatal(t, "job a after the writes", a, a.Output == "/out.jsonl", a.Fingerprint.Size == 11, a.Fingerprint.ModTime.Equal(fp.ModTime),
		a.Fingerprint.Hash == "h2", a.Limits.MaxBatchRequests == 7, a.MaxAttempts == 5, a.ProviderFiles == sluice.ProviderFilesKept)
	if _, err := db.CancelJob(ctx, "a", sluice.JobRunning); !errors.Is(err, tracker.ErrConflict) {
		t.Errorf("cancel from the wrong state: %v, want a conflict", err)
	}
	at := check.Try(db.CancelJob(ctx, "a", sluice.JobPlanned)).Must(t, "CancelJob")
	a, _ = db.Job(ctx, "a")
	check.Error(t, fmt.Sprintf("after cancel, want cancelled at %v", at), a, a.State == sluice.JobCancelled, a.CancelRequestedAt.Equal(at))

	// A chunk's batch becomes known; usage teaches the estimates; a retry
	// counts.
	cs, _ := db.Chunks(ctx, "b")
	c := cs[0]
	if db.BatchKnown(ctx, "batch_1") {
		t.Error("BatchKnown before any chunk recorded it")
	}
	c.State = sluice.ChunkCreating // the intent, then the batch's id: the table's moves
	err = db.UpdateChunk(ctx, c, sluice.ChunkPending)
	c.State, c.BatchID = sluice.ChunkSubmitted, "batch_1"
	check.NoErr(t, "UpdateChunk", errors.Join(err, db.UpdateChunk(ctx, c, sluice.ChunkCreating)))
	if !db.BatchKnown(ctx, "batch_1") {
		t.Error("BatchKnown after a chunk recorded it")
	}
	c.State, c.InputTokens, c.OutputTokens, c.UsageEstTokens = sluice.ChunkDone, 90, 40, 100
	f := &sluice.Finish{Chunk: c, From: sluice.ChunkSubmitted,
		Outcomes:  []sluice.Outcome{{Ordinal: 0, State: sluice.RequestSucceeded}},
		Moved:     []sluice.Request{{Ordinal: 1, Chunk: 2, Index: 0, Offset: 0, Length: 5, Attempt: 2}},
		NewChunks: []*sluice.Chunk{{ID: 2, Attempt: 2, URL: "u", Model: "m", Path: "p2", Requests: 1, State: sluice.ChunkPending}}}
	check.NoErr(t, "FinishChunk", db.FinishChunk(ctx, f))
	n, err := db.RetriedRequests(ctx, "b")
	check.Error(t, "RetriedRequests, want 1", fmt.Sprint(n, err), n == 1, err == nil)
	l, err := db.Learned(ctx)
	check.Error(t, "Learned", fmt.Sprint(l, err), err == nil, l["m"] == (sluice.Learned{EstTokens: 100, InputTokens: 90, OutputTokens: 40}))
	cs, _ = db.Chunks(ctx, "b")
	check.Fatal(t, "chunks of b after the finish", cs, len(cs) == 2)
	check.Error(t, "chunks of b after the finish", cs, cs[0].State == sluice.ChunkDone, cs[0].InputTokens == 90, cs[1].Attempt == 2, cs[1].Path == "p2")
	var got []string
	db.ChunkRequests(ctx, "b", 2, func(r *sluice.Request) error {
		got = append(got, fmt.Sprintf("%d:%s:%d:%d:%s", r.Ordinal, r.CustomID, r.Attempt, r.Length, r.State))
		return nil
	})
	check.Error(t, "requests of chunk 2", got, strings.Join(got, " ") == "1:id-b:2:5:pending")

	// Reuse sources are recorded with a plan and go with its job.
	p := check.Try(db.BeginPlan(ctx, &sluice.Job{ID: "c", Provider: "openai", Input: "/c", Dir: t.TempDir(),
		ModelMap: "a=b,c=d", DefaultMaxTokens: 64, Bucket: "gs://b/one"})).Must(t, "BeginPlan")
	check.NoErr(t, "AddRequests", p.AddRequests([]sluice.Request{{Ordinal: 0, Line: 1, CustomID: "x", Chunk: 0}, {Ordinal: 1, Line: 2, CustomID: "y", Chunk: 1}}))
	check.NoErr(t, "SetReused", p.SetReused(1, map[string]int64{"b": 1}))
	check.NoErr(t, "Commit", p.Commit(ctx, sluice.Fingerprint{}, 2, 0))
	src, err := db.ReuseSources(ctx, "c")
	st, _ := db.RequestStates(ctx, "c")
	check.Error(t, "reuse of c: sources, error, states", fmt.Sprint(src, err, st), err == nil, src["b"] == 1, len(src) == 1,
		st[sluice.RequestSucceeded] == 1, st[sluice.RequestPending] == 1)
	j, _ := db.Job(ctx, "c")
	check.Error(t, "job c: reused, state", j, j.Reused == 1, j.State == sluice.JobPlanned)
	// What else shaped the plan reads back; a job planned before it was
	// recorded (NULL) reads as unknown.
	check.Error(t, "job c's plan flags", j, j.ModelMap == "a=b,c=d", j.DefaultMaxTokens == 64, j.PlanFlagsKnown, j.Bucket == "gs://b/one")
	// The bucket of a job planned before it was recorded (empty) is
	// recorded by its next run.
	check.NoErr(t, "clear the bucket", db.exec(`UPDATE jobs SET bucket = '' WHERE id = 'c'`))
	check.NoErr(t, "SetJobBucket", db.SetJobBucket(ctx, "c", "s3://b/two"))
	j, _ = db.Job(ctx, "c")
	check.Error(t, "job c's bucket recorded later", j, j.Bucket == "s3://b/two")
	check.NoErr(t, "clear the plan flags", db.exec(`UPDATE jobs SET model_map = NULL, default_max_tokens = NULL WHERE id = 'c'`))
	j, _ = db.Job(ctx, "c")
	check.Error(t, "job c planned before the flags were recorded", j, !j.PlanFlagsKnown, j.ModelMap == "")
	check.NoErr(t, "DeleteJob", db.DeleteJob(ctx, "c"))
	if src, _ := db.ReuseSources(ctx, "c"); len(src) != 0 {
		t.Errorf("reuse sources survive their job: %v", src)
	}
}

// testConcurrentGuardedTransition: of many writers moving one chunk out
// of the same state at once, exactly one wins; the others get ErrConflict.
func testConcurrentGuardedTransition(t *testing.T, db *testDB) {
	ctx := context.Background()
	planJob(t, db, "j", 2)
	const writers = 8
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cs, err := db.Chunks(ctx, "j")
			if err != nil {
				errs[i] = err
				return
			}
			c := cs[0]
			c.State, c.FileID = sluice.ChunkUploading, fmt.Sprint("writer-", i)
			errs[i] = db.UpdateChunk(ctx, c, sluice.ChunkPending)
		}()
	}
	wg.Wait()
	won := -1
	for i, err := range errs {
		switch {
		case err == nil && won >= 0:
			t.Errorf("writers %d and %d both moved the chunk", won, i)
		case err == nil:
			won = i
		case !errors.Is(err, tracker.ErrConflict):
			t.Errorf("writer %d: %v, want ErrConflict", i, err)
		}
	}
	cs, _ := db.Chunks(ctx, "j")
	if won < 0 || cs[0].FileID != fmt.Sprint("writer-", won) || cs[0].State != sluice.ChunkUploading {
		t.Errorf("winner %d, chunk %+v", won, cs[0])
	}
}
