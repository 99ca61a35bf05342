package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-batch/sluice/internal/testsrv"
	"github.com/sluice-batch/sluice/tracker"
)

// workerProc is one `sluice run --join` process of a multi-worker test.
type workerProc struct {
	cmd            *exec.Cmd
	stdout, stderr *lockedBuffer
	done           chan struct{}
	code           int
	killed         bool
}

// lockedBuffer is a bytes.Buffer safe to read while the process writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func startWorkerProc(t *testing.T, env []string, args ...string) *workerProc {
	t.Helper()
	return startProc(t, sluiceCmd(env, args...))
}

// startProc starts cmd with its stdout and stderr kept, to be read while it
// runs; the test's end kills it.
func startProc(t *testing.T, cmd *exec.Cmd) *workerProc {
	t.Helper()
	w := &workerProc{cmd: cmd, stdout: &lockedBuffer{}, stderr: &lockedBuffer{}, done: make(chan struct{})}
	w.cmd.Stdout, w.cmd.Stderr = w.stdout, w.stderr
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		w.code, _ = procExit(w.cmd.Wait())
		close(w.done)
	}()
	t.Cleanup(func() { w.cmd.Process.Kill(); <-w.done })
	return w
}

func (w *workerProc) exited() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

func (w *workerProc) kill() {
	w.killed = true
	w.cmd.Process.Signal(syscall.SIGKILL)
	<-w.done
}

// emulatorBatches lists every batch the emulator was asked to create,
// with the chunk and attempt its metadata names.
func emulatorBatches(t *testing.T, addr string) map[string][2]int64 {
	t.Helper()
	out := map[string][2]int64{}
	after := ""
	for {
		url := "http://" + addr + "/v1/batches?limit=100"
		if after != "" {
			url += "&after=" + after
		}
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("Authorization", "Bearer sk-x")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var page struct {
			Data []struct {
				ID       string            `json:"id"`
				Metadata map[string]string `json:"metadata"`
			} `json:"data"`
			HasMore bool `json:"has_more"`
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range page.Data {
			c, err1 := strconv.ParseInt(b.Metadata["sluice_chunk"], 10, 64)
			a, err2 := strconv.ParseInt(b.Metadata["sluice_attempt"], 10, 64)
			if err1 != nil || err2 != nil {
				t.Fatalf("batch %s: metadata %v names no chunk and attempt", b.ID, b.Metadata)
			}
			out[b.ID] = [2]int64{c, a}
			after = b.ID
		}
		if !page.HasMore || len(page.Data) == 0 {
			return out
		}
	}
}

// checkOneBatchPerAttempt: every batch the emulator created belongs to a
// chunk attempt the tracker records with that batch id, and no chunk
// attempt has two.
func checkOneBatchPerAttempt(t *testing.T, db tracker.Backend, addr string) {
	t.Helper()
	batches := emulatorBatches(t, addr)
	jobs, err := db.Jobs(context.Background())
	if err != nil || len(jobs) != 1 {
		t.Fatalf("jobs = %v, %v", jobs, err)
	}
	chunks, err := db.Chunks(context.Background(), jobs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	byAttempt := map[[2]int64]string{}
	for id, ca := range batches {
		if other, ok := byAttempt[ca]; ok {
			t.Errorf("chunk %d attempt %d has two batches: %s and %s", ca[0], ca[1], other, id)
		}
		byAttempt[ca] = id
	}
	submitted := 0
	for _, c := range chunks {
		id, ok := byAttempt[[2]int64{c.ID, int64(c.Attempt)}]
		if c.BatchID == "" {
			if ok {
				t.Errorf("chunk %d attempt %d (%s) records no batch, the emulator has %s", c.ID, c.Attempt, c.State, id)
			}
			continue
		}
		submitted++
		if id != c.BatchID {
			t.Errorf("chunk %d attempt %d records batch %s, the emulator has %q", c.ID, c.Attempt, c.BatchID, id)
		}
	}
	if submitted != len(batches) {
		t.Errorf("the tracker records %d batches, the emulator created %d", submitted, len(batches))
	}
	t.Logf("%d chunks, %d batches", len(chunks), len(batches))
}

// workersJob is one job of a multi-worker test as its workers see it:
// where the input and output are, the environment of each worker started
// (the same state directory for all, or a fresh one for each, like a
// pod), and how the test reads the output and the tracker afterwards.
type workersJob struct {
	in, out   string
	args      []string        // run flags beyond the shared ones (--store, ...)
	workerEnv func() []string // the environment of the next worker started
	statusEnv []string        // the environment `sluice status` needs
	output    func(t *testing.T) string
	tracker   func(t *testing.T) tracker.Backend
}

// workersBackends are the ways workers share a job (docs/scale-out.md):
// one SQLite state directory on one machine, or PostgreSQL (--db) and S3
// (--store, input and output in the bucket) with every worker on a state
// directory of its own that it loses when killed.
var workersBackends = []struct {
	name  string
	setup func(t *testing.T, dir, in string) *workersJob
}{
	{"sqlite-shared-dir", func(t *testing.T, dir, in string) *workersJob {
		out := filepath.Join(dir, "o.jsonl")
		return &workersJob{
			in: in, out: out,
			workerEnv: func() []string { return stateEnv(dir) },
			statusEnv: stateEnv(dir),
			output:    func(*testing.T) string { return out },
			tracker: func(t *testing.T) tracker.Backend {
				db, err := openTracker(context.Background(), "", filepath.Join(dir, "state"))
				if err != nil {
					t.Fatal(err)
				}
				return db
			},
		}
	}},
	{"postgres-s3-own-dirs", func(t *testing.T, dir, in string) *workersJob {
		dsn := testsrv.Postgres(t)
		b := newS3Bucket(t)
		data, err := os.ReadFile(in)
		if err != nil {
			t.Fatal(err)
		}
		b.put(t, "in.jsonl", data)
		pods := 0
		return &workersJob{
			in: b.url("in.jsonl"), out: b.url("out.jsonl"),
			args: []string{"--store", b.url("state")},
			workerEnv: func() []string {
				pods++ // every worker a pod of its own, on an empty disk
				return append([]string{"SLUICE_DB=" + dsn, "SLUICE_STATE=" + filepath.Join(dir, fmt.Sprintf("pod%d", pods))}, b.env...)
			},
			statusEnv: append([]string{"SLUICE_DB=" + dsn, "SLUICE_STATE=" + filepath.Join(dir, "status")}, b.env...),
			output: func(t *testing.T) string {
				p, ok := b.download(t, "out.jsonl", dir)
				if !ok {
					t.Fatal("no output object")
				}
				return p
			},
			tracker: func(t *testing.T) tracker.Backend {
				db, err := openTracker(context.Background(), dsn, "")
				if err != nil {
					t.Fatal(err)
				}
				return db
			},
		}
	}},
}

// TestWorkersShareOneJobThroughKills is issue 13's proof of many workers
// on one job (docs/scale-out.md, "Many workers"): three `sluice run --join`
// processes of one job, on each backend of workersBackends; workers are
// SIGKILLed at random and restarted for a while (on PostgreSQL + S3 each
// restart on a fresh, empty state directory), then left to finish. The
// output has every custom_id once in input order, exactly one worker
// merged, the others exited 0, nothing was processed twice, and every
// chunk attempt has exactly one batch.
func TestWorkersShareOneJobThroughKills(t *testing.T) {
	t.Parallel()
	for _, be := range workersBackends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel() // its own directory, emulator, database and bucket
			dir := t.TempDir()
			in, ids := writeInput(t, dir, 400)
			workersThroughKills(t, be.setup(t, dir, in), ids)
		})
	}
}

func workersThroughKills(t *testing.T, job *workersJob, ids []string) {
	emu := startEmulator(t, "--batch-time", "1s", "--expire-rate", "0.2", "--seed", "7")
	common := []string{"OPENAI_API_KEY=sk-x", "OPENAI_BASE_URL=http://" + emu.addr + "/v1", "SLUICE_JOIN=1"}
	env := func() []string { return append(job.workerEnv(), common...) }
	statusEnv := append(append([]string{}, job.statusEnv...), common...)
	args := append([]string{"run", job.in, "--out", job.out, "--provider", "openai", "--max-batch-requests", "12",
		"--concurrency", "3", "--poll-interval", "100ms", "--max-poll-interval", "400ms",
		"--lease-ttl", "900ms", "--reconcile-grace", "1s", "--log-format", "json", "--max-attempts", "8",
		"--keep-provider-files"}, job.args...) // deleting ~100 files at the emulator takes long
	workers := make([]*workerProc, 3)
	for i := range workers {
		workers[i] = startWorkerProc(t, env(), args...)
	}
	// status lists the three workers with their pids while they run.
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := statusWorkers(t, statusEnv)
		want := map[int]bool{}
		for _, w := range workers {
			want[w.cmd.Process.Pid] = true
		}
		n := 0
		for _, w := range got {
			if want[w.PID] && w.Host != "" && !w.Heartbeat.IsZero() {
				n++
			}
		}
		if n == 3 {
			break
		}
		if time.Now().After(deadline) {
			for i, w := range workers {
				t.Logf("worker %d (exited %v, code %d) stderr:\n%s", i, w.exited(), w.code, w.stderr.String())
			}
			t.Fatalf("status never listed the 3 workers: %+v", got)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Chaos: kill a random worker and start another in its place.
	all, kills, chaosEnd := chaosKills(t, workers, func() *workerProc { return startWorkerProc(t, env(), args...) })
	if kills < 4 {
		for i, w := range append(all, workers...) {
			t.Logf("worker %d (exited %v, code %d) stderr:\n%s", i, w.exited(), w.code, w.stderr.String())
		}
		t.Fatalf("only %d kills landed before the job finished: make the job longer", kills)
	}
	// Let them finish.
	merged := 0
	for i, w := range workers {
		select {
		case <-w.done:
		case <-time.After(120 * time.Second):
			t.Fatalf("worker %d did not finish:\n%s", i, w.stderr.String())
		}
		if w.code != 0 {
			t.Errorf("worker %d exited %d:\n%s", i, w.code, w.stderr.String())
		}
		if strings.Contains(w.stdout.String(), " done: ") {
			merged++
		}
	}
	if merged != 1 {
		for i, w := range workers {
			t.Logf("worker %d stdout: %q", i, w.stdout.String())
		}
		t.Fatalf("%d workers merged, want exactly 1", merged)
	}
	checkOutput(t, job.output(t), ids)
	if n := emu.stats(t)["requests_processed_more_than_once"]; n != 0 {
		t.Errorf("the emulator processed %d requests more than once", n)
	}
	db := job.tracker(t)
	checkOneBatchPerAttempt(t, db, emu.addr)
	db.Close()
	// Workers that finished left; only killed ones can still be listed
	// (those killed within three lease lives of the end).
	killedPID := map[int]bool{}
	for _, w := range all {
		killedPID[w.cmd.Process.Pid] = true
	}
	left := statusWorkers(t, statusEnv)
	for _, w := range left {
		if !killedPID[w.PID] {
			t.Errorf("worker pid %d exited but is still listed", w.PID)
		}
	}
	if len(left) >= kills {
		t.Errorf("%d of %d killed workers still listed: dead workers are never removed", len(left), kills)
	}
	nrec := reconciled(append(all, workers...))
	if nrec == 0 {
		t.Errorf("no kill left a chunk mid-call for another worker to reconcile: the test did not exercise leases expiring")
	}
	t.Logf("%d kills; %d chunks a killed worker left mid-call reconciled by another; finished %s after the last kill",
		kills, nrec, time.Since(chaosEnd).Round(time.Millisecond))
}

// reconciled counts the chunks the workers' logs say they reconciled.
func reconciled(ws []*workerProc) (n int) {
	for _, w := range ws {
		n += strings.Count(w.stderr.String(), `"message":"reconciled: `)
	}
	return n
}

// chaosKills kills a random worker of workers every 250 to 850 ms and
// starts another in its place (start), for six seconds and on (up to a
// minute) until a kill has left a chunk mid-call that another worker
// reconciled: on a loaded machine the first kills may all land between
// calls. It returns the workers killed, how many, and when the six
// seconds ended; a worker that ended meanwhile ends it (the job is done).
func chaosKills(t *testing.T, workers []*workerProc, start func() *workerProc) (all []*workerProc, kills int, end time.Time) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	end, limit := time.Now().Add(6*time.Second), time.Now().Add(time.Minute)
	for time.Now().Before(end) || reconciled(append(all, workers...)) == 0 && time.Now().Before(limit) {
		time.Sleep(time.Duration(250+rng.IntN(600)) * time.Millisecond)
		i := rng.IntN(len(workers))
		w := workers[i]
		if w.exited() {
			if w.code != 0 {
				t.Fatalf("worker exited %d while the others ran:\n%s", w.code, w.stderr.String())
			}
			break // the job finished under the chaos: stop it
		}
		w.kill()
		kills++
		all = append(all, w)
		workers[i] = start()
	}
	return all, kills, end
}

// TestWorkersStartedAtOncePlanOnce: two workers started at the same moment
// on a job not planned yet: exactly one plans it, the other waits for that
// plan and reuses it; both exit 0 and exactly one merges.
func TestWorkersStartedAtOncePlanOnce(t *testing.T) {
	t.Parallel()
	emu, _, in, ids, out, env := openAIJob(t, 3000, "o.jsonl", "--batch-time", "200ms")
	args := []string{"run", in, "--out", out, "--provider", "openai", "--max-batch-requests", "500", "--join",
		"--poll-interval", "50ms", "--max-poll-interval", "200ms", "--lease-ttl", "900ms", "--log-format", "json"}
	a := startWorkerProc(t, env, args...)
	b := startWorkerProc(t, env, args...)
	planned, merged := waitWorkers(t, []*workerProc{a, b}, 90*time.Second)
	if planned != 1 || merged != 1 {
		t.Fatalf("%d workers planned and %d merged, want 1 and 1\nA:\n%s\nB:\n%s", planned, merged, a.stderr.String(), b.stderr.String())
	}
	checkOutput(t, out, ids)
	if n := emu.stats(t)["requests_processed_more_than_once"]; n != 0 {
		t.Errorf("the emulator processed %d requests more than once", n)
	}
}

type statusWorkerJSON struct {
	ID        string
	Host      string
	PID       int
	Heartbeat time.Time `json:"heartbeat_at"`
	Leases    int
}

func statusWorkers(t *testing.T, env []string) []statusWorkerJSON {
	t.Helper()
	cmd := sluiceCmd(env, "status", "--json")
	var se bytes.Buffer
	cmd.Stderr = &se
	b, err := cmd.Output()
	if err != nil {
		t.Logf("status: %v: %s", err, se.String())
		return nil // the state database may not exist yet
	}
	var doc struct {
		Jobs []struct {
			Workers []statusWorkerJSON
		}
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("status --json: %v\n%s", err, b)
	}
	var ws []statusWorkerJSON
	for _, j := range doc.Jobs {
		ws = append(ws, j.Workers...)
	}
	return ws
}

func hostname(t *testing.T) string {
	h, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestJoinKeepsTheLoneRunsLock: a run without --join still refuses while
// --join workers drive the job (and says how to join), and --join refuses
// --provider local, whose emulator lives inside each process.
func TestJoinKeepsTheLoneRunsLock(t *testing.T) {
	t.Parallel()
	_, dir, in, _, out, env := openAIJob(t, 20, "o.jsonl", "--batch-time", "3s")
	w := startWorkerProc(t, env, "run", in, "--out", out, "--provider", "openai", "--join", "--keep-provider-files",
		"--poll-interval", "200ms", "--max-poll-interval", "500ms")
	deadline := time.Now().Add(30 * time.Second)
	for len(statusWorkers(t, env)) == 0 {
		if time.Now().After(deadline) || w.exited() {
			t.Fatalf("the --join worker never registered:\n%s", w.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r := runSluice(t, env, "status"); r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("worker:   %s pid %d, last heartbeat ", hostname(t), w.cmd.Process.Pid)) {
		t.Errorf("status does not show the worker (exit %d):\n%s", r.code, r.stdout)
	}
	r := runSluice(t, env, "run", in, "--out", out, "--provider", "openai")
	if r.code != 1 || !strings.Contains(r.stderr, "--join") {
		t.Fatalf("lone run beside a --join worker: exit %d, %q; want 1 and a pointer to --join", r.code, r.stderr)
	}
	r = runSluice(t, stateEnv(dir), "run", in, "--out", filepath.Join(dir, "local.jsonl"), "--join")
	if r.code != 2 || !strings.Contains(r.stderr, "--provider local") {
		t.Fatalf("--join with --provider local: exit %d, %q; want 2", r.code, r.stderr)
	}
	<-w.done
	if w.code != 0 {
		t.Fatalf("the --join worker exited %d:\n%s", w.code, w.stderr.String())
	}
}

// TestWorkerKilledMidPlanIsReplanned: a worker SIGKILLed while it plans
// leaves the job in planning (and its plan role held until it expires); a
// worker started next plans it from scratch and drives it to the end.
func TestWorkerKilledMidPlanIsReplanned(t *testing.T) {
	t.Parallel()
	_, dir, in, ids, out, env := openAIJob(t, 20000, "o.jsonl")
	env = append(env, "SLUICE_JOIN=1")
	args := []string{"run", in, "--out", out, "--provider", "openai", "--poll-interval", "50ms",
		"--max-poll-interval", "200ms", "--lease-ttl", "600ms", "--log-format", "json", "--keep-provider-files"}
	planner := startWorkerProc(t, env, args...)
	deadline := time.Now().Add(60 * time.Second)
	for jobState(t, dir) != "planning" {
		if time.Now().After(deadline) || planner.exited() {
			t.Fatalf("never saw the job planning (state %q):\n%s", jobState(t, dir), planner.stderr.String())
		}
		time.Sleep(2 * time.Millisecond)
	}
	planner.kill()
	if st := jobState(t, dir); st != "planning" {
		t.Fatalf("the planner was killed with the job %s, want planning: make the input bigger", st)
	}
	next := startWorkerProc(t, env, args...)
	select {
	case <-next.done:
	case <-time.After(120 * time.Second):
		t.Fatalf("the next worker did not finish:\n%s", next.stderr.String())
	}
	if next.code != 0 {
		t.Fatalf("the next worker exited %d:\n%s", next.code, next.stderr.String())
	}
	if se := next.stderr.String(); !strings.Contains(se, "planning again from scratch") || !strings.Contains(se, `"message":"job planned"`) {
		t.Errorf("the next worker did not plan the job again:\n%s", se)
	}
	checkOutput(t, out, ids)
}

// jobState is the state of the only job in the state directory ("" when
// there is none yet), read straight from the database: fast enough to
// catch a plan in progress.
func jobState(t *testing.T, dir string) string {
	var st string
	queryState(t, dir, `SELECT state FROM jobs LIMIT 1`, &st)
	return st
}

func queryState(t *testing.T, dir, q string, dst any) {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(dir, "state", tracker.DBName)+"?mode=ro&_busy_timeout=5000")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.QueryRow(q).Scan(dst)
}
