package tracker_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/tracker"
)

// clock is a settable clock for lease expiry: no test waits out a TTL.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func withClock(db interface{ SetClock(func() time.Time) }) *clock {
	c := &clock{t: time.Unix(1_800_000_000, 0)}
	db.SetClock(c.now)
	return c
}

func register(t *testing.T, db tracker.Backend, job string, ids ...string) {
	t.Helper()
	for i, id := range ids {
		if err := db.RegisterWorker(context.Background(), job, sluice.Worker{ID: id, Host: "h", PID: 100 + i}); err != nil {
			t.Fatal(err)
		}
	}
}

func claim(t *testing.T, db tracker.Backend, job string, chunk int64, worker string, ttl time.Duration) bool {
	t.Helper()
	ok, err := db.ClaimChunk(context.Background(), job, chunk, worker, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

func testClaimChunkIsExclusiveUntilItExpires(t *testing.T, db *testDB) {
	clk := withClock(db)
	planJob(t, db, "j", 2)
	register(t, db, "j", "a", "b")
	ttl := 30 * time.Second
	for _, step := range []struct {
		after  time.Duration // on the clock before the claim
		job    string
		chunk  int64
		worker string
		want   bool
		whyNot string // the failure when the claim does not answer want
	}{
		{0, "j", 1, "a", true, "a could not claim a free chunk"},
		{0, "j", 1, "b", false, "b claimed a chunk a holds"},
		{0, "j", 2, "b", true, "b could not claim another chunk"},
		{20 * time.Second, "j", 1, "a", true, "a could not renew its own lease"},
		{29 * time.Second, "j", 1, "b", false, "b claimed a renewed lease before it expired"}, // 49s: a's renewed lease runs to 50s
		{time.Second, "j", 1, "b", true, "b could not claim an expired lease"},                // 50s: expired
		{0, "j", 1, "a", false, "a took back a lease b holds now"},
		// Another job's chunk 1 is another lease.
		{0, "other", 1, "a", true, "a chunk of another job with the same id was refused"},
	} {
		clk.add(step.after)
		if claim(t, db, step.job, step.chunk, step.worker, ttl) != step.want {
			t.Fatal(step.whyNot)
		}
	}
}

func testHeartbeatExtendsEveryLeaseOfTheWorker(t *testing.T, db *testDB) {
	ctx := context.Background()
	clk := withClock(db)
	planJob(t, db, "j", 2)
	register(t, db, "j", "a", "b")
	ttl := 30 * time.Second
	claim(t, db, "j", 1, "a", ttl)
	claim(t, db, "j", 2, "a", ttl)
	if ok, _ := db.ClaimRole(ctx, "j", sluice.RoleMerge, "a", ttl); !ok {
		t.Fatal("a could not take the merge role")
	}
	clk.add(20 * time.Second)
	if err := db.Heartbeat(ctx, "j", "a", ttl); err != nil {
		t.Fatal(err)
	}
	beat := clk.now()
	clk.add(25 * time.Second) // 45s: past the first TTL, inside the extended one
	for _, ch := range []int64{1, 2} {
		if claim(t, db, "j", ch, "b", ttl) {
			t.Fatalf("b claimed chunk %d whose lease a's heartbeat extended", ch)
		}
	}
	if ok, _ := db.ClaimRole(ctx, "j", sluice.RoleMerge, "b", ttl); ok {
		t.Fatal("b took the merge role a's heartbeat extended")
	}
	ws, err := db.Workers(ctx, "j")
	if err != nil || len(ws) != 2 {
		t.Fatalf("workers = %v, %v", ws, err)
	}
	if ws[0].ID != "a" || ws[0].Leases != 2 || !ws[0].Heartbeat.Equal(beat) || ws[0].Host != "h" || ws[0].PID != 100 {
		t.Errorf("worker a = %+v, want 2 leases and heartbeat %v", ws[0], beat)
	}
	if ws[1].ID != "b" || ws[1].Leases != 0 {
		t.Errorf("worker b = %+v, want no leases", ws[1])
	}
	clk.add(5 * time.Second) // 50s: a stopped beating; everything it held expired
	if ws, _ := db.Workers(ctx, "j"); ws[0].Leases != 0 {
		t.Errorf("expired leases still counted: %+v", ws[0])
	}
	if !claim(t, db, "j", 1, "b", ttl) {
		t.Fatal("b could not claim a chunk after a's heartbeats stopped")
	}
	if ok, _ := db.ClaimRole(ctx, "j", sluice.RoleMerge, "b", ttl); !ok {
		t.Fatal("b could not take the merge role after a's heartbeats stopped")
	}
	// a's late heartbeat does not take back what b holds now.
	if err := db.Heartbeat(ctx, "j", "a", ttl); err != nil {
		t.Fatal(err)
	}
	if ws, _ := db.Workers(ctx, "j"); ws[0].Leases != 1 || ws[1].Leases != 1 {
		t.Errorf("after a's late heartbeat: %+v", ws)
	}
	if err := db.Heartbeat(ctx, "j", "nobody", ttl); !errors.Is(err, tracker.ErrNotFound) {
		t.Errorf("heartbeat of an unregistered worker: %v, want ErrNotFound", err)
	}
}

func testReleaseAndUnregisterFreeLeasesAtOnce(t *testing.T, db *testDB) {
	ctx := context.Background()
	withClock(db)
	planJob(t, db, "j", 2)
	register(t, db, "j", "a", "b")
	ttl := time.Minute
	claim(t, db, "j", 1, "a", ttl)
	if err := db.ReleaseChunk(ctx, "j", 1, "b"); err != nil {
		t.Fatal(err)
	}
	if claim(t, db, "j", 1, "b", ttl) {
		t.Fatal("a release by a worker that does not hold the lease freed it")
	}
	if err := db.ReleaseChunk(ctx, "j", 1, "a"); err != nil {
		t.Fatal(err)
	}
	if !claim(t, db, "j", 1, "b", ttl) {
		t.Fatal("a released chunk could not be claimed")
	}
	claim(t, db, "j", 2, "b", ttl)
	db.ClaimRole(ctx, "j", sluice.RolePlan, "b", ttl)
	if err := db.UnregisterWorker(ctx, "j", "b"); err != nil {
		t.Fatal(err)
	}
	if !claim(t, db, "j", 1, "a", ttl) || !claim(t, db, "j", 2, "a", ttl) {
		t.Fatal("the chunks of an unregistered worker were not freed")
	}
	if ok, _ := db.ClaimRole(ctx, "j", sluice.RolePlan, "a", ttl); !ok {
		t.Fatal("the role of an unregistered worker was not freed")
	}
	if ws, _ := db.Workers(ctx, "j"); len(ws) != 1 || ws[0].ID != "a" || ws[0].Leases != 2 {
		t.Errorf("workers after b left: %+v", ws)
	}
	if err := db.ForgetWorkers(ctx, "j"); err != nil {
		t.Fatal(err)
	}
	if ws, _ := db.Workers(ctx, "j"); len(ws) != 0 {
		t.Errorf("workers after ForgetWorkers: %+v", ws)
	}
	register(t, db, "j", "c")
	if !claim(t, db, "j", 1, "c", ttl) {
		t.Fatal("ForgetWorkers left a lease")
	}
}

func testClaimRoleBeforeTheJobExists(t *testing.T, db *testDB) {
	ctx := context.Background()
	clk := withClock(db)
	ttl := 30 * time.Second
	// No job "new" yet: the plan role is what decides who plans it.
	if ok, err := db.ClaimRole(ctx, "new", sluice.RolePlan, "a", ttl); !ok || err != nil {
		t.Fatalf("claim plan of a job not planned yet: %v %v", ok, err)
	}
	if ok, _ := db.ClaimRole(ctx, "new", sluice.RolePlan, "b", ttl); ok {
		t.Fatal("two workers hold the plan role")
	}
	if ok, _ := db.ClaimRole(ctx, "new", sluice.RoleMerge, "b", ttl); !ok {
		t.Fatal("roles are not independent")
	}
	if ok, _ := db.ClaimRole(ctx, "other", sluice.RolePlan, "b", ttl); !ok {
		t.Fatal("jobs are not independent")
	}
	clk.add(ttl)
	if ok, _ := db.ClaimRole(ctx, "new", sluice.RolePlan, "b", ttl); !ok {
		t.Fatal("an expired role could not be taken")
	}
	if err := db.ReleaseRole(ctx, "new", sluice.RolePlan, "a"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := db.ClaimRole(ctx, "new", sluice.RolePlan, "a", ttl); ok {
		t.Fatal("a's release freed a role b holds")
	}
	if err := db.ReleaseRole(ctx, "new", sluice.RolePlan, "b"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := db.ClaimRole(ctx, "new", sluice.RolePlan, "a", ttl); !ok {
		t.Fatal("a released role could not be taken")
	}
}

// testClaimRacesAcrossConnections: many claimers on separate database
// handles (as separate processes are) race for one chunk and one role:
// exactly one wins each.
func testClaimRacesAcrossConnections(t *testing.T, db *testDB) {
	ctx := context.Background()
	planJob(t, db, "j", 2)
	const n = 8
	var handles []tracker.Backend
	for i := 0; i < n; i++ {
		handles = append(handles, db.reopen(t))
	}
	var mu sync.Mutex
	chunkWins, roleWins := 0, 0
	var wg sync.WaitGroup
	for i, h := range handles {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := fmt.Sprintf("w%d", i)
			ok, err := h.ClaimChunk(ctx, "j", 1, w, time.Minute)
			if err != nil {
				t.Error(err)
			}
			rok, err := h.ClaimRole(ctx, "j", sluice.RoleMerge, w, time.Minute)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if ok {
				chunkWins++
			}
			if rok {
				roleWins++
			}
		}()
	}
	wg.Wait()
	if chunkWins != 1 || roleWins != 1 {
		t.Errorf("%d claimers won the chunk and %d the role, want 1 each", chunkWins, roleWins)
	}
}

// testFinishChunkAllocatesIDs: new chunks without ids get theirs from the
// store, in the finishing transaction, so two workers finishing chunks of
// one job never hand out the same id; moved requests follow the chunk
// they name by sluice.NewChunkRef.
func testFinishChunkAllocatesIDs(t *testing.T, db *testDB) {
	ctx := context.Background()
	job := &sluice.Job{ID: "j", Provider: "openai", Input: "/in", Dir: t.TempDir(), MaxAttempts: 3}
	p, err := db.BeginPlan(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		if err := p.AddRequest(&sluice.Request{Ordinal: int64(i), Line: int64(i + 1), CustomID: fmt.Sprintf("id-%d", i), Chunk: int64(1 + i/2), Index: i % 2}); err != nil {
			t.Fatal(err)
		}
	}
	for id := int64(1); id <= 2; id++ {
		if err := p.AddChunk(&sluice.Chunk{ID: id, URL: "u", Model: "m", Path: fmt.Sprintf("chunks/c%d", id), Requests: 2, Bytes: 10}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Commit(ctx, sluice.Fingerprint{Size: 1}, 4, 0); err != nil {
		t.Fatal(err)
	}
	cs, _ := db.Chunks(ctx, "j")
	var got []int64
	for _, c := range cs {
		c.State = sluice.ChunkDone
		first := int64(c.ID-1) * 2
		fin := &sluice.Finish{Chunk: c, From: sluice.ChunkPending,
			NewChunks: []*sluice.Chunk{
				{Attempt: 2, URL: "u", Model: "m", Path: fmt.Sprintf("p%d-1", c.ID), Requests: 1, State: sluice.ChunkPending},
				{Attempt: 2, URL: "u", Model: "m", Path: fmt.Sprintf("p%d-2", c.ID), Requests: 1, State: sluice.ChunkPending}},
			Moved: []sluice.Request{{Ordinal: first, Chunk: sluice.NewChunkRef(1), Attempt: 2},
				{Ordinal: first + 1, Chunk: sluice.NewChunkRef(0), Attempt: 2}}}
		if err := db.FinishChunk(ctx, fin); err != nil {
			t.Fatal(err)
		}
		got = append(got, fin.NewChunks[0].ID, fin.NewChunks[1].ID)
	}
	if fmt.Sprint(got) != "[3 4 5 6]" {
		t.Fatalf("allocated ids %v, want [3 4 5 6]", got)
	}
	// Each request is in the chunk its placeholder named.
	for _, c := range []struct {
		chunk int64
		id    string
	}{{3, "id-1"}, {4, "id-0"}, {5, "id-3"}, {6, "id-2"}} {
		var ids []string
		db.ChunkRequests(ctx, "j", c.chunk, func(r *sluice.Request) error { ids = append(ids, r.CustomID); return nil })
		if len(ids) != 1 || ids[0] != c.id {
			t.Errorf("chunk %d holds %v, want %s", c.chunk, ids, c.id)
		}
	}
}

// TestOpenAtOnce: workers started together open one fresh state database
// at the same moment; each migration is applied once and every open
// succeeds.
func TestOpenAtOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db, err := tracker.Open(context.Background(), dir)
			if err == nil {
				db.Close()
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// testPlanLock: one holder of a job's plan lock at a time on a machine;
// another job's is another lock; unlocking frees it.
func testPlanLock(t *testing.T, db *testDB) {
	l, ok, err := db.TryLockPlan("j")
	if err != nil || !ok {
		t.Fatalf("first TryLockPlan: %v %v", ok, err)
	}
	if _, ok, err := db.TryLockPlan("j"); ok || err != nil {
		t.Fatalf("second TryLockPlan while held: %v %v, want refused", ok, err)
	}
	o, ok, err := db.TryLockPlan("other")
	if err != nil || !ok {
		t.Fatalf("another job's plan lock: %v %v", ok, err)
	}
	o.Unlock()
	l.Unlock()
	l, ok, err = db.TryLockPlan("j")
	if err != nil || !ok {
		t.Fatalf("TryLockPlan after unlock: %v %v", ok, err)
	}
	l.Unlock()
}

// testPruneWorkers removes workers silent since a time whose leases and
// roles have run out, and only those.
func testPruneWorkers(t *testing.T, db *testDB) {
	ctx := context.Background()
	clk := withClock(db)
	planJob(t, db, "j", 2)
	ttl := 10 * time.Second
	register(t, db, "j", "dead", "holder", "alive")
	claim(t, db, "j", 1, "holder", time.Hour) // a long lease, still running
	clk.add(time.Minute)
	if err := db.Heartbeat(ctx, "j", "alive", ttl); err != nil {
		t.Fatal(err)
	}
	n, err := db.PruneWorkers(ctx, "j", clk.now().Add(-3*ttl))
	if err != nil || n != 1 {
		t.Fatalf("pruned %d (%v), want 1", n, err)
	}
	ws, _ := db.Workers(ctx, "j")
	if len(ws) != 2 || ws[0].ID != "alive" || ws[1].ID != "holder" { // same start: by id
		t.Errorf("workers after pruning: %+v, want holder and alive", ws)
	}
	if err := db.Heartbeat(ctx, "j", "dead", ttl); !errors.Is(err, tracker.ErrNotFound) {
		t.Errorf("a pruned worker's heartbeat: %v, want ErrNotFound", err)
	}
}
