package tracker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/migrations"
	"github.com/sluice-batch/sluice/tracker"
)

func open(t *testing.T) *tracker.DB {
	t.Helper()
	db, err := tracker.Open(context.Background(), filepath.Join(t.TempDir(), "state"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestOpenPrivateWALForeignKeys(t *testing.T) {
	t.Parallel()
	db := open(t)
	st, err := os.Stat(filepath.Join(db.Dir(), tracker.DBName))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("database mode %v, want 0600", st.Mode().Perm())
	}
	dst, _ := os.Stat(db.Dir())
	if dst.Mode().Perm() != 0o700 {
		t.Errorf("state dir mode %v, want 0700", dst.Mode().Perm())
	}
	var mode string
	var fk int
	if err := db.SQL().QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal_mode %q (%v), want wal", mode, err)
	}
	if err := db.SQL().QueryRow(`PRAGMA foreign_keys`).Scan(&fk); err != nil || fk != 1 {
		t.Errorf("foreign_keys %d (%v), want 1", fk, err)
	}
	// Reopening applies nothing twice.
	db2, err := tracker.Open(context.Background(), db.Dir())
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	var n int
	db2.SQL().QueryRow(`SELECT COUNT(*) FROM schema_version`).Scan(&n)
	ms, _ := migrations.All()
	if n != len(ms) {
		t.Errorf("schema_version has %d rows, want %d", n, len(ms))
	}
}

func TestMigrationsDuplicateFailsGapLands(t *testing.T) {
	t.Parallel()
	// A gap is allowed (numbers are handed out ahead; see package
	// migrations), and the missing version is applied when it lands.
	gap := fstest.MapFS{"0001_a.sql": {Data: []byte("CREATE TABLE a (x);")}, "0003_c.sql": {Data: []byte("CREATE TABLE c (x);")}}
	ms, err := migrations.Load(gap)
	if err != nil || len(ms) != 2 {
		t.Fatalf("gap: %v, %v", ms, err)
	}
	dir := t.TempDir()
	db, err := tracker.OpenWith(context.Background(), dir, ms)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	gap["0002_b.sql"] = &fstest.MapFile{Data: []byte("CREATE TABLE b (x);")}
	ms, _ = migrations.Load(gap)
	db, err = tracker.OpenWith(context.Background(), dir, ms)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	db.SQL().QueryRow(`SELECT COUNT(*) FROM sqlite_master WHERE name IN ('a','b','c')`).Scan(&n)
	db.Close()
	if n != 3 {
		t.Errorf("%d of tables a, b, c exist, want 3 (the late 0002 applied)", n)
	}
	if _, err := tracker.OpenWith(context.Background(), dir, ms[:1]); err == nil || !strings.Contains(err.Error(), "newer than this sluice") {
		t.Errorf("older binary on a newer database: %v", err)
	}
	dup := fstest.MapFS{"0001_a.sql": {Data: []byte("SELECT 1;")}, "0001_b.sql": {Data: []byte("SELECT 1;")}}
	if _, err := migrations.Load(dup); err == nil || !strings.Contains(err.Error(), "same version 1") {
		t.Errorf("duplicate: err = %v, want same version", err)
	}
	bad := fstest.MapFS{"init.sql": {Data: []byte("SELECT 1;")}}
	if _, err := migrations.Load(bad); err == nil {
		t.Error("unnumbered migration accepted")
	}
	ok := fstest.MapFS{"0002_b.sql": {Data: []byte("B")}, "0001_a.sql": {Data: []byte("A")}}
	ms, err = migrations.Load(ok)
	if err != nil || len(ms) != 2 || ms[0].SQL != "A" || ms[1].Version != 2 {
		t.Errorf("ordered load = %+v, %v", ms, err)
	}
}

func planJob(t *testing.T, db tracker.Backend, id string, n int) *sluice.Job {
	t.Helper()
	ctx := context.Background()
	job := &sluice.Job{ID: id, Provider: "openai", Input: "/in.jsonl", Dir: t.TempDir(), MaxAttempts: 3}
	p, err := db.BeginPlan(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if err := p.AddRequest(&sluice.Request{Ordinal: int64(i), Line: int64(i + 1), CustomID: "id-" + string(rune('a'+i)), Chunk: 1, Index: i}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.AddChunk(&sluice.Chunk{ID: 1, URL: "/v1/chat/completions", Model: "m", Path: "chunks/c1", Requests: n, Bytes: 10}); err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(ctx, sluice.Fingerprint{Size: 10, ModTime: time.Unix(5, 0), Hash: "h"}, int64(n), 0); err != nil {
		t.Fatal(err)
	}
	return job
}

func testPlanCommitAndDuplicate(t *testing.T, db *testDB) {
	ctx := context.Background()
	job := &sluice.Job{ID: "j", Provider: "openai", Input: "/in", Dir: t.TempDir()}
	p, err := db.BeginPlan(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AddRequest(&sluice.Request{Ordinal: 0, Line: 7, CustomID: "x", Chunk: 1}); err != nil {
		t.Fatal(err)
	}
	line, found, err := p.FindCustomID("x")
	if err != nil || !found || line != 7 {
		t.Errorf("FindCustomID(x) = %d, %v, %v; want line 7", line, found, err)
	}
	if _, found, _ := p.FindCustomID("y"); found {
		t.Error("FindCustomID(y) found a request never added")
	}
	if err := p.AddRequest(&sluice.Request{Ordinal: 1, Line: 8, CustomID: "x", Chunk: 1}); err == nil {
		t.Error("a duplicate custom_id was recorded")
	}
	got, err := db.Job(ctx, "j")
	if err != nil || got.State != sluice.JobPlanning {
		t.Fatalf("job before commit: %+v, %v; want planning", got, err)
	}
	if err := p.Abort(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Job(ctx, "j"); !errors.Is(err, tracker.ErrNotFound) {
		t.Errorf("aborted job still there: %v", err)
	}
	n := db.count(t, `SELECT COUNT(*) FROM requests`) // the only job's
	if n != 0 {
		t.Errorf("%d request rows survive an abort", n)
	}
}

func testGuardedTransitions(t *testing.T, db *testDB) {
	ctx := context.Background()
	planJob(t, db, "j", 3)
	cs, err := db.Chunks(ctx, "j")
	if err != nil || len(cs) != 1 {
		t.Fatalf("chunks = %v, %v", cs, err)
	}
	c := cs[0]
	c.State, c.FileID = sluice.ChunkUploading, ""
	if err := db.UpdateChunk(ctx, c, sluice.ChunkPending); err != nil {
		t.Fatal(err)
	}
	// A stale view (still thinking pending) conflicts, for a move the
	// table allows.
	c.State = sluice.ChunkCreating
	if err := db.UpdateChunk(ctx, c, sluice.ChunkPending); !errors.Is(err, tracker.ErrConflict) {
		t.Errorf("stale transition: err = %v, want ErrConflict", err)
	}
	// Unknown states are refused: by the table, and by the CHECK
	// constraint under it.
	c.State = "bogus"
	if err := db.UpdateChunk(ctx, c, sluice.ChunkUploading); err == nil {
		t.Error("unknown chunk state accepted")
	}
	if err := db.exec(`UPDATE chunks SET state = 'bogus' WHERE job_id = 'j'`); err == nil {
		t.Error("unknown chunk state accepted by the database")
	}
	if err := db.SetJobState(ctx, "j", sluice.JobRunning, sluice.JobMerging); !errors.Is(err, tracker.ErrConflict) {
		t.Errorf("job transition from the wrong state: %v", err)
	}
	if err := db.exec(`UPDATE jobs SET state = 'nope' WHERE id = 'j'`); err == nil {
		t.Error("unknown job state accepted")
	}
}

func testFinishChunkIsAtomic(t *testing.T, db *testDB) {
	ctx := context.Background()
	planJob(t, db, "j", 3)
	cs, _ := db.Chunks(ctx, "j")
	c := cs[0]
	c.State = sluice.ChunkDone
	fin := &sluice.Finish{Chunk: c, From: sluice.ChunkPending,
		Outcomes:  []sluice.Outcome{{Ordinal: 0, State: sluice.RequestSucceeded}, {Ordinal: 99, State: sluice.RequestFailed}},
		NewChunks: []*sluice.Chunk{{ID: 2, Attempt: 2, URL: "u", Model: "m", Path: "p", State: sluice.ChunkPending}}}
	if err := db.FinishChunk(ctx, fin); !errors.Is(err, tracker.ErrConflict) {
		t.Fatalf("finish with an unknown request: %v, want conflict", err)
	}
	// Nothing of it landed.
	cs, _ = db.Chunks(ctx, "j")
	st, _ := db.RequestStates(ctx, "j")
	if len(cs) != 1 || cs[0].State != sluice.ChunkPending || st[sluice.RequestPending] != 3 {
		t.Fatalf("partial finish landed: chunks %d state %s, requests %v", len(cs), cs[0].State, st)
	}
	fin.Outcomes = fin.Outcomes[:1]
	fin.Moved = []sluice.Request{{Ordinal: 1, Chunk: 2, Index: 0, Offset: 0, Length: 5, Attempt: 2}, {Ordinal: 2, Chunk: 2, Index: 1, Offset: 6, Length: 5, Attempt: 2}}
	if err := db.FinishChunk(ctx, fin); err != nil {
		t.Fatal(err)
	}
	st, _ = db.RequestStates(ctx, "j")
	if st[sluice.RequestSucceeded] != 1 || st[sluice.RequestPending] != 2 {
		t.Errorf("states after finish: %v", st)
	}
	var ids []string
	db.ChunkRequests(ctx, "j", 2, func(r *sluice.Request) error { ids = append(ids, r.CustomID); return nil })
	if strings.Join(ids, ",") != "id-b,id-c" {
		t.Errorf("requests moved to chunk 2: %v", ids)
	}
	var seen []int64
	db.Expected(ctx, "j", func(o int64, id string) bool { seen = append(seen, o); return true })
	if len(seen) != 3 || seen[0] != 0 || seen[2] != 2 {
		t.Errorf("Expected order: %v", seen)
	}
}

// testLockHeldByOtherProcess: a second run fails fast naming the holder's
// pid, and the lock is freed when the holder is SIGKILLed (the kernel
// frees a flock, the server a dead session's advisory lock).
func testLockHeldByOtherProcess(t *testing.T, db *testDB) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockHelper$")
	cmd.Env = append(os.Environ(), "TRACKER_LOCK_HELPER="+db.Dir(), "TRACKER_LOCK_DSN="+db.dsn)
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	buf := make([]byte, 7)
	if _, err := io.ReadFull(out, buf); err != nil || string(buf) != "locked\n" {
		t.Fatalf("helper did not lock: %q %v", buf, err)
	}
	if pid := db.LockHolder(context.Background(), "j"); pid != cmd.Process.Pid {
		t.Errorf("LockHolder = %d, want the helper's pid %d", pid, cmd.Process.Pid)
	}
	_, err := db.LockJob("j")
	var le *tracker.LockedError
	if !errors.As(err, &le) || le.PID != cmd.Process.Pid {
		t.Fatalf("LockJob while held: %v, want LockedError with pid %d", err, cmd.Process.Pid)
	}
	if !strings.Contains(err.Error(), "pid") {
		t.Errorf("message does not name the pid: %v", err)
	}
	other, err := db.LockJob("other-job")
	if err != nil {
		t.Fatalf("another job's lock: %v", err)
	}
	other.Unlock()
	cmd.Process.Kill()
	cmd.Wait()
	// The server notices a dead client's socket at once on loopback;
	// allow a loaded machine some time.
	deadline := time.Now().Add(30 * time.Second)
	for {
		l, err := db.LockJob("j")
		if err == nil {
			l.Unlock()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lock not freed after SIGKILL of its holder: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if pid := db.LockHolder(context.Background(), "j"); pid != 0 {
		t.Errorf("LockHolder after the holder died = %d, want 0", pid)
	}
}

// TestLockHelper is the other process of testLockHeldByOtherProcess: it
// takes job j's lock and holds it until killed.
func TestLockHelper(t *testing.T) {
	dir := os.Getenv("TRACKER_LOCK_HELPER")
	if dir == "" {
		return // only as a helper process
	}
	ctx := context.Background()
	var db tracker.Backend
	var err error
	if dsn := os.Getenv("TRACKER_LOCK_DSN"); dsn != "" {
		db, err = tracker.OpenPostgres(ctx, dsn, dir)
	} else {
		db, err = tracker.Open(ctx, dir)
	}
	if err != nil {
		os.Exit(3)
	}
	if _, err := db.LockJob("j"); err != nil {
		os.Exit(4)
	}
	os.Stdout.WriteString("locked\n")
	time.Sleep(time.Minute)
	os.Exit(0)
}

func testAddRequestsBatchedNamesDuplicate(t *testing.T, db *testDB) {
	ctx := context.Background()
	p, err := db.BeginPlan(ctx, &sluice.Job{ID: "j", Provider: "openai", Input: "/in", Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	var rs []sluice.Request
	for i := 0; i < 200; i++ {
		rs = append(rs, sluice.Request{Ordinal: int64(i), Line: int64(i + 1), CustomID: fmt.Sprintf("id-%d", i), Chunk: 1, Index: i})
	}
	rs[150].CustomID = "id-3" // a duplicate inside the second 64-row insert
	if db.name == "sqlite" {
		// SQLite keeps no index of a plan's custom_ids until the splitter
		// first asks about one, which it does whenever its filter has seen
		// an id's hash before, so before any duplicate reaches the plan
		// (tracker/plan.go, FindCustomID). Ask as the splitter would.
		if _, found, err := p.FindCustomID("id-3"); found || err != nil {
			t.Fatalf("FindCustomID before any request: %v %v", found, err)
		}
	}
	err = p.AddRequests(rs)
	if db.name != "sqlite" {
		// PostgreSQL checks custom_ids when the plan commits (or at the
		// splitter's first FindCustomID), with one index build instead of
		// an index insert per row; the plan is then refused and thrown
		// away (the splitter stops at the first error and aborts the plan
		// on either backend).
		if err == nil {
			err = p.Commit(ctx, sluice.Fingerprint{}, 200, 0)
		}
		if err == nil || !strings.Contains(err.Error(), `"id-3" (line 151)`) || !strings.Contains(err.Error(), "first at line 4") {
			p.Abort(ctx)
			t.Fatalf("a plan with a duplicate: %v; want it to name id-3 on line 151, first at line 4", err)
		}
		if err := p.AddRequests(rs[151:]); err == nil {
			t.Error("a plan took rows after a failed write")
		}
		if err := p.Abort(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Job(ctx, "j"); !errors.Is(err, tracker.ErrNotFound) {
			t.Errorf("aborted job still there: %v", err)
		}
		return
	}
	if err == nil || !strings.Contains(err.Error(), `"id-3" (line 151)`) || !strings.Contains(err.Error(), "first seen on line 4") {
		t.Fatalf("AddRequests with a duplicate: %v; want it to name id-3 on line 151, first seen on line 4", err)
	}
	// SQLite keeps the rows before the one at fault and goes on.
	if line, found, _ := p.FindCustomID("id-3"); !found || line != 4 {
		t.Errorf("FindCustomID(id-3) = %d %v, want line 4", line, found)
	}
	if err := p.AddRequests(rs[151:]); err != nil {
		t.Fatalf("rows after the duplicate: %v", err)
	}
	if err := p.Commit(ctx, sluice.Fingerprint{}, 199, 1); err != nil {
		t.Fatal(err)
	}
	st, _ := db.RequestStates(ctx, "j")
	if st[sluice.RequestPending] != 199 {
		t.Errorf("%d rows recorded, want 199", st[sluice.RequestPending])
	}
}

// TestKilledDuringMigration: a migration runs in its own transaction, so a
// process SIGKILLed in the middle of one leaves the schema at the previous
// version, and the next open applies it again from the start.
func TestKilledDuringMigration(t *testing.T) {
	t.Parallel()
	base, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	next := base[len(base)-1].Version + 1
	slow := append(append([]migrations.Migration{}, base...), migrations.Migration{Version: next, Name: "slow.sql",
		SQL: `CREATE TABLE filler (x INTEGER);
WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 200000000) INSERT INTO filler SELECT i FROM c;`})
	if dir := os.Getenv("TRACKER_MIGRATE_HELPER"); dir != "" {
		os.Stdout.WriteString("migrating\n")
		tracker.OpenWith(context.Background(), dir, slow)
		os.Exit(0)
	}
	dir := filepath.Join(t.TempDir(), "state")
	db, err := tracker.Open(context.Background(), dir) // at the current version
	if err != nil {
		t.Fatal(err)
	}
	planJob(t, db, "j", 3)
	db.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledDuringMigration$")
	cmd.Env = append(os.Environ(), "TRACKER_MIGRATE_HELPER="+dir)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 10)
	out.Read(buf)
	// Well inside the migration: its rows are reaching the write-ahead log.
	wal := filepath.Join(dir, tracker.DBName+"-wal")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if st, err := os.Stat(wal); err == nil && st.Size() > 8<<20 {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("the migration wrote no 8 MB of log in 30 s")
		}
	}
	cmd.Process.Kill()
	if err := cmd.Wait(); err == nil {
		t.Fatal("the migration finished before the kill: make it slower")
	}
	fast := append(append([]migrations.Migration{}, base...), migrations.Migration{Version: next, Name: "fast.sql",
		SQL: `CREATE TABLE filler (x INTEGER); INSERT INTO filler VALUES (1);`})
	db, err = tracker.OpenWith(context.Background(), dir, fast)
	if err != nil {
		t.Fatalf("open after a killed migration: %v", err)
	}
	defer db.Close()
	if err := db.IntegrityCheck(context.Background()); err != nil {
		t.Fatal(err)
	}
	var v, rows int
	db.SQL().QueryRow(`SELECT MAX(version) FROM schema_version`).Scan(&v)
	db.SQL().QueryRow(`SELECT COUNT(*) FROM filler`).Scan(&rows)
	if v != next || rows != 1 {
		t.Errorf("after re-applying: version %d (want %d), filler rows %d (want 1: the killed run's rows rolled back)", v, next, rows)
	}
	if st, _ := db.RequestStates(context.Background(), "j"); st[sluice.RequestPending] != 3 {
		t.Errorf("the job's rows did not survive: %v", st)
	}
}

// TestMigrationLeanRequests: a state directory written before migration
// 0003 (request rows keyed by the job's text id) opens with its requests
// intact under the packed ids: per chunk in order, per job in input order,
// states and retry attempts kept, and a new job's rows apart from them.
func TestMigrationLeanRequests(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "state")
	all, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	old, err := tracker.OpenWith(ctx, dir, all[:2])
	if err != nil {
		t.Fatal(err)
	}
	for _, job := range []string{"a", "b"} {
		if _, err := old.SQL().Exec(`INSERT INTO jobs (id, provider, input, dir, state, created_at, updated_at)
			VALUES (?, 'openai', '/in', '/d', 'running', 1, 1)`, job); err != nil {
			t.Fatal(err)
		}
		if _, err := old.SQL().Exec(`INSERT INTO chunks (job_id, id, attempt, url, model, path, requests, bytes, state)
			VALUES (?, 1, 1, '/v1/embeddings', 'm', 'c1', 3, 30, 'submitted')`, job); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			state, attempt := "pending", 1
			if job == "a" && i == 1 {
				state, attempt = "succeeded", 2
			}
			if _, err := old.SQL().Exec(`INSERT INTO requests (job_id, ordinal, line, custom_id, chunk_id, idx, offset,
				length, tokens, attempt, state) VALUES (?, ?, ?, ?, 1, ?, ?, 10, 5, ?, ?)`,
				job, i, i+2, fmt.Sprintf("%s-%d", job, i), 2-i, 10*(2-i), attempt, state); err != nil {
				t.Fatal(err)
			}
		}
	}
	old.Close()

	db, err := tracker.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var got []string
	if err := db.ChunkRequests(ctx, "a", 1, func(r *sluice.Request) error {
		got = append(got, fmt.Sprintf("%d:%d:%s:%d:%d:%d:%s", r.Ordinal, r.Line, r.CustomID, r.Index, r.Offset, r.Attempt, r.State))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := "2:4:a-2:0:0:1:pending 1:3:a-1:1:10:2:succeeded 0:2:a-0:2:20:1:pending"; strings.Join(got, " ") != want {
		t.Errorf("chunk 1 of a after the migration: %s, want %s", strings.Join(got, " "), want)
	}
	got = nil
	db.Expected(ctx, "b", func(o int64, id string) bool { got = append(got, fmt.Sprintf("%d %s", o, id)); return true })
	if strings.Join(got, ",") != "0 b-0,1 b-1,2 b-2" {
		t.Errorf("expected of b: %v", got)
	}
	if n, err := db.RetriedRequests(ctx, "a"); n != 1 || err != nil {
		t.Errorf("retried requests of a: %d %v", n, err)
	}
	// A new job gets a key of its own; its custom_ids may repeat another job's.
	p, err := db.BeginPlan(ctx, &sluice.Job{ID: "c", Provider: "openai", Input: "/in", Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AddRequests([]sluice.Request{{Ordinal: 0, Line: 1, CustomID: "a-0", Chunk: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(ctx, sluice.Fingerprint{}, 1, 0); err != nil {
		t.Fatal(err)
	}
	if err := db.DeleteJob(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	for job, want := range map[string]int64{"a": 0, "b": 3, "c": 1} {
		st, _ := db.RequestStates(ctx, job)
		if n := st[sluice.RequestPending] + st[sluice.RequestSucceeded]; n != want {
			t.Errorf("job %s: %d requests, want %d", job, n, want)
		}
	}
	if err := db.IntegrityCheck(ctx); err != nil {
		t.Error(err)
	}
}

// TestNewJobNeverInheritsRows: a job deleted by hand (not through
// DeleteJob) leaves its request rows behind; the next job's key is past
// them, so it neither sees them nor collides with them, and a job that is
// gone reads as empty.
func testNewJobNeverInheritsRows(t *testing.T, db *testDB) {
	ctx := context.Background()
	plan := func(job string) {
		p, err := db.BeginPlan(ctx, &sluice.Job{ID: job, Provider: "openai", Input: "/in", Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.AddRequests([]sluice.Request{{Ordinal: 0, Line: 1, CustomID: "x", Chunk: 1}, {Ordinal: 1, Line: 2, CustomID: "y", Chunk: 1}}); err != nil {
			t.Fatalf("job %s: %v", job, err)
		}
		if err := p.Commit(ctx, sluice.Fingerprint{}, 2, 0); err != nil {
			t.Fatal(err)
		}
	}
	plan("a")
	if err := db.exec(`DELETE FROM jobs WHERE id = 'a'`); err != nil {
		t.Fatal(err)
	}
	plan("b")
	st, err := db.RequestStates(ctx, "b")
	if err != nil || st[sluice.RequestPending] != 2 || len(st) != 1 {
		t.Errorf("job b: %v %v, want 2 pending", st, err)
	}
	if st, err := db.RequestStates(ctx, "a"); err != nil || len(st) != 0 {
		t.Errorf("deleted job a: %v %v, want no rows and no error", st, err)
	}
}
