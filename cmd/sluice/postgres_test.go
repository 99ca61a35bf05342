package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-batch/sluice/internal/testsrv"
	"github.com/sluice-batch/sluice/migrations"
	"github.com/sluice-batch/sluice/tracker"
)

// The PostgreSQL tracker through the real binary (docs/scale-out.md,
// "PostgreSQL"): each test gets a fresh database on the test server
// (internal/testsrv) and a fresh state directory.

// pgQuery runs one query of one integer against dsn.
func pgQuery(t *testing.T, dsn, q string, args ...any) int64 {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int64
	if err := conn.QueryRow(ctx, q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// pgTry is pgQuery for polling: -1 while the query fails (no schema yet).
func pgTry(dsn, q string) int64 {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return -1
	}
	defer conn.Close(ctx)
	var n int64
	if conn.QueryRow(ctx, q).Scan(&n) != nil {
		return -1
	}
	return n
}

// TestPostgresExampleSameAsSQLite: the README's first run on the bundled
// example with --db on PostgreSQL gives the same output as on SQLite, the
// state directory holds no SQLite database, status reads the job from
// PostgreSQL without printing the password, and $SLUICE_DB selects the
// same database as --db.
func TestPostgresExampleSameAsSQLite(t *testing.T) {
	t.Parallel()
	dsn := testsrv.Postgres(t)
	dir := t.TempDir()
	sqliteOut, pgOut := filepath.Join(dir, "sqlite.jsonl"), filepath.Join(dir, "pg.jsonl")
	sqliteEnv := []string{"SLUICE_STATE=" + filepath.Join(dir, "s1")}
	pgEnv := []string{"SLUICE_STATE=" + filepath.Join(dir, "s2"), "SLUICE_DB="}
	if r := runSluice(t, sqliteEnv, "run", "../../examples/requests.jsonl", "--out", sqliteOut); r.code != 0 {
		t.Fatalf("sqlite run: exit %d\n%s", r.code, r.stderr)
	}
	r := runSluice(t, pgEnv, "run", "../../examples/requests.jsonl", "--out", pgOut, "--db", dsn)
	if r.code != 0 {
		t.Fatalf("postgres run: exit %d\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, "240 succeeded") {
		t.Errorf("summary does not say 240 succeeded:\n%s", r.stdout)
	}
	a, b := normalizedOutput(t, sqliteOut), normalizedOutput(t, pgOut)
	if len(a) != 240 || strings.Join(a, "\n") != strings.Join(b, "\n") {
		t.Fatalf("outputs differ: sqlite %d lines, postgres %d lines", len(a), len(b))
	}
	if _, err := os.Stat(filepath.Join(dir, "s2", "sluice.db")); !os.IsNotExist(err) {
		t.Errorf("a SQLite database in the state directory of the PostgreSQL run: %v", err)
	}
	if n := pgQuery(t, dsn, `SELECT COUNT(*) FROM requests WHERE state = 'succeeded'`); n != 240 {
		t.Errorf("PostgreSQL records %d succeeded requests, want 240", n)
	}
	if n := pgQuery(t, dsn, `SELECT COUNT(*) FROM jobs WHERE state = 'done'`); n != 1 {
		t.Errorf("PostgreSQL records %d done jobs, want 1", n)
	}

	// status through $SLUICE_DB: the job, the database named, no password.
	u, _ := url.Parse(dsn)
	pw, _ := u.User.Password()
	st := runSluice(t, []string{"SLUICE_STATE=" + filepath.Join(dir, "s2"), "SLUICE_DB=" + dsn}, "status", "--json")
	var doc struct {
		Database string `json:"database"`
		Jobs     []struct {
			State    string           `json:"state"`
			Requests map[string]int64 `json:"requests"`
		} `json:"jobs"`
	}
	if st.code != 0 || json.Unmarshal([]byte(st.stdout), &doc) != nil {
		t.Fatalf("status: exit %d\n%s\n%s", st.code, st.stdout, st.stderr)
	}
	if len(doc.Jobs) != 1 || doc.Jobs[0].State != "done" || doc.Jobs[0].Requests["succeeded"] != 240 {
		t.Errorf("status of the PostgreSQL job: %s", st.stdout)
	}
	if !strings.Contains(doc.Database, u.Host) || !strings.Contains(doc.Database, "xxxxx") {
		t.Errorf("status names the database as %q, want its host and a redacted password", doc.Database)
	}
	if pw != "" && strings.Contains(st.stdout+st.stderr+r.stdout+r.stderr, pw) {
		t.Error("the database password is printed")
	}

	// Re-running the done job through $SLUICE_DB merges the same output again.
	before, _ := os.ReadFile(pgOut)
	rr := runSluice(t, []string{"SLUICE_STATE=" + filepath.Join(dir, "s2"), "SLUICE_DB=" + dsn}, "run", "../../examples/requests.jsonl", "--out", pgOut)
	after, _ := os.ReadFile(pgOut)
	if rr.code != 0 || string(before) != string(after) {
		t.Errorf("re-run through $SLUICE_DB: exit %d, output changed %v\n%s", rr.code, string(before) != string(after), rr.stderr)
	}
}

// normalizedOutput reads an output file with the fields a provider makes
// up per batch (ids, timestamps) blanked, so two runs compare by content.
func normalizedOutput(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		var v any
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		blankVolatile(v)
		n, _ := json.Marshal(v)
		out = append(out, string(n))
	}
	return out
}

func blankVolatile(v any) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			switch k {
			case "id", "request_id", "created", "created_at", "system_fingerprint":
				x[k] = "*"
			default:
				blankVolatile(e)
			}
		}
	case []any:
		for _, e := range x {
			blankVolatile(e)
		}
	}
}

// TestPostgresBadConfigurationBeforeAnyWork: a database that cannot be
// used stops the run before anything is planned, with an error that says
// why and names the server, never the password.
func TestPostgresBadConfigurationBeforeAnyWork(t *testing.T) {
	t.Parallel()
	dsn := testsrv.Postgres(t)
	u, _ := url.Parse(dsn)
	const secret = "sekrit-pw-4b1d"
	closed := refusingAddr(t) // nothing listens there, nor will

	wrongCreds := *u
	wrongCreds.User = url.UserPassword("sluice_nosuchuser", secret)
	noDB := *u
	noDB.Path = "/sluice_no_such_database"
	for _, c := range []struct {
		name, db string
		code     int
		want     []string
	}{
		{"unreachable", "postgres://sluice:" + secret + "@" + closed + "/jobs?connect_timeout=5", 1,
			[]string{"cannot connect to 127.0.0.1:" + closed[strings.LastIndex(closed, ":")+1:], "connection refused", "postgres://sluice:xxxxx@" + closed}},
		{"wrong credentials", wrongCreds.String(), 1, []string{"refused the credentials", "sluice_nosuchuser"}},
		{"no such database", noDB.String(), 1, []string{"does not exist", "sluice_no_such_database"}},
		{"not postgres", "mysql://root:" + secret + "@localhost/x", 2, []string{"want a postgres:// (or postgresql://) URL", "xxxxx"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			in, _ := writeInput(t, dir, 5)
			r := runSluice(t, stateEnv(dir), "run", in, "--out", filepath.Join(dir, "o.jsonl"), "--db", c.db)
			if r.code != c.code {
				t.Fatalf("exit %d, want %d\n%s", r.code, c.code, r.stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr does not say %q:\n%s", w, r.stderr)
				}
			}
			if strings.Contains(r.stdout+r.stderr, secret) || strings.Contains(r.stdout+r.stderr, mustPassword(u)) {
				t.Errorf("the password is printed:\n%s", r.stderr)
			}
			if _, err := os.Stat(filepath.Join(dir, "state", "jobs")); !os.IsNotExist(err) {
				t.Errorf("work was done before the database was checked: %v", err)
			}
			if _, err := os.Stat(filepath.Join(dir, "o.jsonl")); !os.IsNotExist(err) {
				t.Errorf("an output was written: %v", err)
			}
		})
	}

	// A database without our schema gets it; one with a newer schema is
	// refused before any work, and left as it was.
	t.Run("schema", func(t *testing.T) {
		dir := t.TempDir()
		in, ids := writeInput(t, dir, 5)
		st := runSluice(t, stateEnv(dir), "status", "--db", dsn)
		if st.code != 0 || !strings.Contains(st.stdout, "no jobs in postgres "+strings.Replace(dsn, ":"+mustPassword(u)+"@", ":xxxxx@", 1)) {
			t.Fatalf("status of an empty database: exit %d\n%s%s", st.code, st.stdout, st.stderr)
		}
		if _, err := os.Stat(filepath.Join(dir, "state")); !os.IsNotExist(err) {
			t.Errorf("status created the state directory: %v", err)
		}
		ms, _ := migrations.Postgres()
		if n := pgQuery(t, dsn, `SELECT COUNT(*) FROM schema_migrations`); n != int64(len(ms)) || len(ms) == 0 {
			t.Errorf("%d schema versions recorded after the first open, want all %d", n, len(ms))
		}
		pgQuery(t, dsn, `WITH i AS (INSERT INTO schema_migrations (version, name, applied_at) VALUES (999, '0999_future.sql', 0) RETURNING 1) SELECT COUNT(*) FROM i`)
		r := runSluice(t, stateEnv(dir), "run", in, "--out", filepath.Join(dir, "o.jsonl"), "--db", dsn)
		if r.code != 1 || !strings.Contains(r.stderr, "database schema version 999 is newer than this sluice knows: upgrade sluice") {
			t.Fatalf("newer schema: exit %d, want 1 and upgrade sluice\n%s", r.code, r.stderr)
		}
		if n := pgQuery(t, dsn, `SELECT COUNT(*) FROM jobs`); n != 0 {
			t.Errorf("%d jobs planned into a database with a newer schema", n)
		}
		pgQuery(t, dsn, `WITH d AS (DELETE FROM schema_migrations WHERE version = 999 RETURNING 1) SELECT COUNT(*) FROM d`)
		if r := runSluice(t, stateEnv(dir), "run", in, "--out", filepath.Join(dir, "o.jsonl"), "--db", dsn); r.code != 0 {
			t.Fatalf("run once the schema is ours: exit %d\n%s", r.code, r.stderr)
		}
		checkOutput(t, filepath.Join(dir, "o.jsonl"), ids)
	})
}

func mustPassword(u *url.URL) string {
	pw, _ := u.User.Password()
	return pw
}

// TestPostgresLockAndCrashResume: on PostgreSQL a second run of a job
// being driven fails fast naming the driver's pid (the advisory lock);
// SIGKILLing the driver frees the job, and the next run reconciles and
// finishes it with nothing processed twice.
func TestPostgresLockAndCrashResume(t *testing.T) {
	t.Parallel()
	dsn := testsrv.Postgres(t)
	emu, _, in, ids, out, env := openAIJob(t, 30, "o.jsonl", "--batch-time", "2s")
	env = append(env, "SLUICE_DB="+dsn)
	args := []string{"run", in, "--out", out, "--provider", "openai", "--max-batch-requests", "10", "--rate", "-1",
		"--poll-interval", "50ms", "--max-poll-interval", "200ms"}
	first := sluiceCmd(env, args...)
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { first.Process.Kill(); first.Wait() }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		st := runSluice(t, env, "status", "--json")
		var doc struct {
			Jobs []struct {
				RunningPID int `json:"running_pid"`
			} `json:"jobs"`
		}
		json.Unmarshal([]byte(st.stdout), &doc)
		if len(doc.Jobs) == 1 && doc.Jobs[0].RunningPID == first.Process.Pid {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never showed the first run (pid %d) driving the job:\n%s%s", first.Process.Pid, st.stdout, st.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	r := runSluice(t, env, args...)
	if r.code != 1 || !strings.Contains(r.stderr, fmt.Sprintf("pid %d", first.Process.Pid)) {
		t.Fatalf("second run: exit %d, %q; want 1 naming pid %d", r.code, r.stderr, first.Process.Pid)
	}
	first.Process.Kill()
	first.Wait()
	var last result
	for i := 0; i < 100; i++ {
		if last = runSluice(t, env, args...); last.code == 0 {
			break
		}
		if !strings.Contains(last.stderr, "being driven by another sluice process") {
			t.Fatalf("run after the SIGKILL: exit %d\n%s", last.code, last.stderr)
		}
		time.Sleep(100 * time.Millisecond) // the server has not ended the dead session yet
	}
	if last.code != 0 {
		t.Fatalf("the job was never freed after its driver was killed:\n%s", last.stderr)
	}
	checkOutput(t, out, ids)
	if s := emu.stats(t); s["requests_processed_more_than_once"] != 0 {
		t.Errorf("requests processed more than once: %d", s["requests_processed_more_than_once"])
	}
}

// pgS3Job starts a private PostgreSQL server, an S3 bucket holding n
// requests under in.jsonl (written to a temporary directory too) and an
// emulator with emuArgs.
func pgS3Job(t *testing.T, n int, emuArgs ...string) (dsn string, b *s3Bucket, dir string, ids []string, emu *emulatorProc) {
	t.Helper()
	dsn = testsrv.Postgres(t)
	b = newS3Bucket(t)
	dir = t.TempDir()
	_, ids = b.putInput(t, dir, n)
	return dsn, b, dir, ids, startEmulator(t, emuArgs...)
}

// TestPostgresAndS3EphemeralPod: the disk-less machine of issue 13. A run
// with the tracker in PostgreSQL (--db) and input, output and job files in
// S3 (--store) is SIGKILLed mid-job; a run on another, empty state
// directory, with nothing carried over, finishes the job from the database
// and the store: every custom_id once in input order, no request processed
// twice, one batch per chunk.
func TestPostgresAndS3EphemeralPod(t *testing.T) {
	t.Parallel()
	dsn, b, dir, ids, emu := pgS3Job(t, 600, "--batch-time", "700ms")
	args := openAIRun(emu, b.url("in.jsonl"), b.url("out.jsonl"), "--store", b.url("state"),
		"--max-live-batches", "2", "--reconcile-grace", "300ms", "--db", dsn)
	first := filepath.Join(dir, "pod1")
	cmd := sluiceCmd(append([]string{"OPENAI_API_KEY=sk-test", "SLUICE_STATE=" + first, "SLUICE_DB="}, b.env...), args...)
	// Killed once a chunk has ended (its state in the database) and others
	// have not.
	killWhen(t, cmd, "a chunk done", func() bool {
		return pgTry(dsn, `SELECT COUNT(*) FROM chunks WHERE state = 'done'`) >= 1
	})
	if n := emu.stats(t)["batches_created"]; n >= 6 {
		t.Fatalf("every batch was created before the kill (%d)", n)
	}
	if err := os.RemoveAll(first); err != nil { // the pod is gone, and its disk
		t.Fatal(err)
	}
	second := filepath.Join(dir, "pod2")
	r := runSluice(t, append([]string{"OPENAI_API_KEY=sk-test", "SLUICE_STATE=" + second, "SLUICE_DB="}, b.env...), args...)
	if r.code != 0 {
		t.Fatalf("the run on an empty state directory: exit %d\n%s", r.code, r.stderr)
	}
	p, ok := b.download(t, "out.jsonl", dir)
	if !ok {
		t.Fatal("no output object after the second run")
	}
	checkOutput(t, p, ids)
	st := emu.stats(t)
	if st["requests_processed_more_than_once"] != 0 || st["batches_created"] != 6 || st["requests_processed"] != 600 {
		t.Fatalf("want 6 batches, 600 requests each processed once; emulator stats: %v", st)
	}
	if n := pgQuery(t, dsn, `SELECT COUNT(*) FROM jobs WHERE state = 'done'`); n != 1 {
		t.Errorf("%d done jobs in the database, want 1", n)
	}
	if _, err := os.Stat(filepath.Join(second, tracker.DBName)); !os.IsNotExist(err) {
		t.Errorf("a SQLite database in the second state directory: %v", err)
	}
}

// TestPostgresWorkersOnTwoMachines: two `sluice run --join` workers, each
// with a state directory of its own (two machines), share one job through
// PostgreSQL (--db) and S3 (--store, input and output): one plans, one
// merges, every custom_id once in input order, nothing processed twice.
func TestPostgresWorkersOnTwoMachines(t *testing.T) {
	t.Parallel()
	dsn, b, dir, ids, emu := pgS3Job(t, 3000, "--batch-time", "200ms")
	args := append(openAIRun(emu, b.url("in.jsonl"), b.url("out.jsonl"), "--store", b.url("state"), "--db", dsn),
		"--max-batch-requests", "500", "--join", "--lease-ttl", "900ms", "--log-format", "json")
	var ws []*workerProc
	for _, m := range []string{"m1", "m2"} {
		env := append([]string{"OPENAI_API_KEY=sk-x", "SLUICE_DB=", "SLUICE_STATE=" + filepath.Join(dir, m)}, b.env...)
		ws = append(ws, startWorkerProc(t, env, args...))
	}
	planned, merged := waitWorkers(t, ws, 2*time.Minute)
	if planned != 1 || merged != 1 {
		t.Fatalf("%d workers planned and %d merged, want 1 and 1\nA:\n%s\nB:\n%s", planned, merged, ws[0].stderr.String(), ws[1].stderr.String())
	}
	p, ok := b.download(t, "out.jsonl", dir)
	if !ok {
		t.Fatal("no output object")
	}
	checkOutput(t, p, ids)
	if n := emu.stats(t)["requests_processed_more_than_once"]; n != 0 {
		t.Errorf("the emulator processed %d requests more than once", n)
	}
}
