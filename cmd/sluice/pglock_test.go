package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-batch/sluice/internal/testsrv"
)

// The database going away mid-run (issue 21, item 9; docs/scale-out.md,
// "The job lock when the database goes away"): the job lock is a session
// advisory lock, lost when its connection drops while the process lives.
// A run must see the loss, call the provider no more until it has the lock
// back, and stop (exit 1, naming the cause) when another run took the job.

// pgLockRunArgs is a plain run of in on the emulator: 6 chunks of 10, two
// live at a time, so that a run lasts a few batch times.
func pgLockRunArgs(emu *emulatorProc, in, out string, more ...string) []string {
	return append([]string{"run", in, "--out", out, "--provider", "openai", "--base-url", "http://" + emu.addr + "/v1",
		"--max-batch-requests", "10", "--max-live-batches", "2", "--rate", "-1", "--poll-interval", "50ms",
		"--max-poll-interval", "200ms", "--reconcile-grace", "1s", "--log-format", "json"}, more...)
}

// lockBackend is the backend pid of the session holding a job lock for the
// sluice process pid (its application_name names pid), or 0.
func lockBackend(dsn string, pid int) int64 {
	n := pgTry(dsn, fmt.Sprintf(`SELECT COALESCE(MIN(a.pid), 0) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = 'sluice lock pid %d'`, pid))
	return max(n, 0)
}

// waitUntil polls cond every 20 ms until it holds, failing the test after
// timeout or when one of the processes ends first.
func waitUntil(t *testing.T, what string, timeout time.Duration, cond func() bool, procs ...*workerProc) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		for _, p := range procs {
			if p.exited() {
				t.Fatalf("waiting for %s: pid %d exited %d:\n%s", what, p.cmd.Process.Pid, p.code, p.stderr.String())
			}
		}
		if time.Now().After(deadline) {
			for _, p := range procs {
				t.Logf("pid %d stderr:\n%s", p.cmd.Process.Pid, p.stderr.String())
			}
			t.Fatalf("no %s after %s", what, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitExit waits for p to end.
func waitExit(t *testing.T, p *workerProc, timeout time.Duration) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("pid %d did not finish within %s:\n%s", p.cmd.Process.Pid, timeout, p.stderr.String())
	}
}

// checkBoughtOnce: the emulator executed nothing twice, and each chunk
// attempt the tracker records has exactly one batch there.
func checkBoughtOnce(t *testing.T, emu *emulatorProc, dsn string) {
	t.Helper()
	if n := emu.stats(t)["requests_processed_more_than_once"]; n != 0 {
		t.Errorf("the emulator processed %d requests more than once", n)
	}
	db, err := openTracker(context.Background(), dsn, "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	checkOneBatchPerAttempt(t, db, emu.addr)
}

// TestPostgresLockBlipTakenBack: the job lock's connection alone is cut
// (pg_terminate_backend of its session, as a network blip or a pooler
// would) while a run drives the job: the run sees it, takes the lock back
// on a new session, and finishes: exit 0, every custom_id once in input
// order, nothing executed twice, one batch per chunk.
func TestPostgresLockBlipTakenBack(t *testing.T) {
	t.Parallel()
	dsn := testsrv.Postgres(t)
	emu, _, in, ids, out, env := openAIJob(t, 60, "o.jsonl", "--batch-time", "1s")
	env = append(env, "SLUICE_DB="+dsn)
	a := startWorkerProc(t, env, pgLockRunArgs(emu, in, out)...)
	pid := a.cmd.Process.Pid
	waitUntil(t, "a batch submitted", time.Minute, func() bool {
		return pgTry(dsn, `SELECT COUNT(*) FROM chunks WHERE state = 'submitted'`) >= 1
	}, a)
	old := lockBackend(dsn, pid)
	if old == 0 {
		t.Fatalf("no session holds the job lock for pid %d", pid)
	}
	if pgQuery(t, dsn, `SELECT pg_terminate_backend($1::int)::int`, old) != 1 {
		t.Fatal("could not terminate the lock's session")
	}
	if n := pgQuery(t, dsn, `SELECT COUNT(*) FROM chunks WHERE state = 'done'`); n == 6 {
		t.Fatal("the job ended before the blip: make it longer")
	}
	waitUntil(t, "the job lock taken back on a new session", 20*time.Second, func() bool {
		b := lockBackend(dsn, pid)
		return b != 0 && b != old
	}, a)
	waitExit(t, a, time.Minute)
	if a.code != 0 {
		t.Fatalf("the run exited %d:\n%s", a.code, a.stderr.String())
	}
	for _, want := range []string{"the job lock's PostgreSQL connection dropped", "took the job lock back"} {
		if !strings.Contains(a.stderr.String(), want) {
			t.Errorf("the run's log does not say %q:\n%s", want, a.stderr.String())
		}
	}
	checkOutput(t, out, ids)
	checkBoughtOnce(t, emu, dsn)
}

// TestPostgresSecondRunWhileFirstLostItsConnection: a run is frozen
// (SIGSTOP, as a long pause or a partition would) and its lock's session
// is cut; a second plain run of the job then takes the lock and drives the
// job, and the first one wakes beside it. The first must not drive the job
// beside the second: it sees that its lock is gone and another run has it,
// calls the provider no more, and exits 1 naming the cause; the second
// finishes: exit 0, every custom_id once in input order, nothing executed
// twice, one batch per chunk attempt.
func TestPostgresSecondRunWhileFirstLostItsConnection(t *testing.T) {
	t.Parallel()
	dsn := testsrv.Postgres(t)
	emu, _, in, ids, out, env := openAIJob(t, 60, "o.jsonl", "--batch-time", "1s")
	env = append(env, "SLUICE_DB="+dsn)
	args := pgLockRunArgs(emu, in, out)
	a := startWorkerProc(t, env, args...)
	apid := a.cmd.Process.Pid
	waitUntil(t, "a batch submitted", time.Minute, func() bool {
		return pgTry(dsn, `SELECT COUNT(*) FROM chunks WHERE state = 'submitted'`) >= 1
	}, a)
	a.cmd.Process.Signal(syscall.SIGSTOP)
	t.Cleanup(func() { a.cmd.Process.Signal(syscall.SIGCONT) })
	// Its lock's session is cut, and any other session of it inside a
	// statement or a transaction (which would hold the second run up on
	// its row locks); its idle pooled sessions live on, so that it could
	// drive the job beside the second run were it not fenced.
	pgQuery(t, dsn, `SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()
			AND (application_name = 'sluice lock pid '||$1 OR state <> 'idle')`, fmt.Sprint(apid))
	waitUntil(t, "the first run's lock freed", 20*time.Second, func() bool { return lockBackend(dsn, apid) == 0 })
	if n := pgQuery(t, dsn, `SELECT COUNT(*) FROM chunks WHERE state = 'done'`); n == 6 {
		t.Fatal("the job ended before the cut: make it longer")
	}
	b := startWorkerProc(t, env, args...)
	waitUntil(t, "the second run holding the job lock", 30*time.Second, func() bool {
		return lockBackend(dsn, b.cmd.Process.Pid) != 0
	}, b)
	a.cmd.Process.Signal(syscall.SIGCONT) // both alive now
	waitExit(t, a, time.Minute)
	waitExit(t, b, time.Minute)
	if a.code != 1 || !strings.Contains(a.stderr.String(), "lost the job lock") {
		t.Errorf("the first run: exit %d, want 1 saying it lost the job lock:\n%s", a.code, a.stderr.String())
	} else {
		t.Log(lastLine(a.stderr.String()))
	}
	if b.code != 0 {
		t.Fatalf("the second run exited %d:\n%s", b.code, b.stderr.String())
	}
	if strings.Contains(a.stdout.String(), " done: ") {
		t.Errorf("the first run merged the job too:\n%s", a.stdout.String())
	}
	checkOutput(t, out, ids)
	checkBoughtOnce(t, emu, dsn)
}

// restartableJob is openAIJob (n requests, the output o.jsonl) on a
// private PostgreSQL server that can be stopped and started again, named
// by SLUICE_DB in env.
func restartableJob(t *testing.T, n int, emuArgs ...string) (srv *testsrv.RestartablePostgres, emu *emulatorProc, in string, ids []string, out string, env []string) {
	t.Helper()
	srv = testsrv.NewRestartablePostgres(t)
	emu, _, in, ids, out, env = openAIJob(t, n, "o.jsonl", emuArgs...)
	return srv, emu, in, ids, out, append(env, "SLUICE_DB="+srv.DSN)
}

// TestPostgresRestartMidRun: the PostgreSQL server is stopped in immediate
// mode (every session cut, as a crash or a failover) and started again on
// the same port while a run drives a job. The run takes its lock back,
// starts its dispatch over from the tracker's state (what was mid-call is
// settled against the provider first, as after a crash) and finishes:
// exit 0, every custom_id once in input order, nothing executed twice, one
// batch per chunk attempt.
func TestPostgresRestartMidRun(t *testing.T) {
	t.Parallel()
	srv, emu, in, ids, out, env := restartableJob(t, 60, "--batch-time", "1s")
	dsn := srv.DSN
	a := startWorkerProc(t, env, pgLockRunArgs(emu, in, out)...)
	waitUntil(t, "a batch submitted", time.Minute, func() bool {
		return pgTry(dsn, `SELECT COUNT(*) FROM chunks WHERE state = 'submitted'`) >= 1
	}, a)
	srv.Stop(t)
	srv.Start(t)
	waitExit(t, a, time.Minute)
	if a.code != 0 || !strings.Contains(a.stderr.String(), "took the job lock back") {
		t.Fatalf("the run through the restart: exit %d, want 0 having taken its lock back:\n%s", a.code, a.stderr.String())
	}
	if n := pgQuery(t, dsn, `SELECT COUNT(*) FROM jobs WHERE state = 'done'`); n != 1 {
		t.Errorf("%d done jobs, want 1", n)
	}
	checkOutput(t, out, ids)
	checkBoughtOnce(t, emu, dsn)
}

// TestPostgresRestartUnderWorkers: three `--join` workers drive one job;
// workers are SIGKILLed and replaced, and the PostgreSQL server is stopped
// in immediate mode and started again in the middle. A worker the restart
// stops exits 1 naming the cause (its lock's connection dropped, its
// leases lapsed while its heartbeats could not land, or, started while the
// server was down, it cannot connect) and is replaced; in
// the end the workers finish: one merges, the others exit 0, every
// custom_id once in input order, nothing executed twice, one batch per
// chunk attempt.
func TestPostgresRestartUnderWorkers(t *testing.T) {
	t.Parallel()
	srv, emu, in, ids, out, env := restartableJob(t, 240, "--batch-time", "700ms")
	dsn := srv.DSN
	env = append(env, "SLUICE_JOIN=1")
	args := []string{"run", in, "--out", out, "--provider", "openai", "--base-url", "http://" + emu.addr + "/v1",
		"--max-batch-requests", "12", "--concurrency", "3", "--rate", "-1", "--poll-interval", "100ms",
		"--max-poll-interval", "300ms", "--lease-ttl", "900ms", "--reconcile-grace", "1s", "--log-format", "json",
		"--keep-provider-files"}
	workers := make([]*workerProc, 3)
	var all []*workerProc
	start := func(i int) {
		workers[i] = startWorkerProc(t, env, args...)
		all = append(all, workers[i])
	}
	for i := range workers {
		start(i)
	}
	submitted := func() bool { return pgTry(dsn, `SELECT COUNT(*) FROM chunks WHERE state = 'submitted'`) >= 1 }
	waitUntil(t, "a batch submitted", time.Minute, submitted, workers...)
	rng := rand.New(rand.NewPCG(3, 4))
	kill := func() {
		i := rng.IntN(len(workers))
		workers[i].kill()
		start(i)
	}
	// A kill, the restart, a kill. The worker started in the killed one's
	// place has registered before the server goes away (a worker still
	// connecting when it does fails as a run does against a server that
	// is down: "cannot connect", or a bare driver error before it holds
	// the job's lock).
	kill()
	waitUntil(t, "the new worker registered", time.Minute, func() bool {
		return pgTry(dsn, fmt.Sprintf(`SELECT COUNT(*) FROM workers WHERE pid = %d`, all[len(all)-1].cmd.Process.Pid)) == 1
	}, all[len(all)-1])
	srv.Stop(t)
	srv.Start(t)
	stoppedByRestart := 0
	replace := func() {
		for i, w := range workers {
			if !w.exited() || w.killed {
				continue
			}
			if w.code == 0 {
				continue
			}
			se := w.stderr.String()
			named := false
			for _, why := range []string{"PostgreSQL connection dropped", "heartbeats did not land", "cannot connect"} {
				named = named || strings.Contains(se, why)
			}
			if w.code != 1 || !named {
				t.Fatalf("a worker exited %d without naming the database's going away:\n%s", w.code, se)
			}
			stoppedByRestart++
			start(i)
		}
	}
	waitUntil(t, "the job going on after the restart", time.Minute, func() bool {
		replace()
		return pgTry(dsn, `SELECT COUNT(*) FROM chunks WHERE state IN ('submitted', 'done')`) >= 2
	})
	if pgTry(dsn, `SELECT COUNT(*) FROM jobs WHERE state = 'done'`) == 0 {
		kill()
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		replace()
		done := 0
		for _, w := range workers {
			if w.exited() && w.code == 0 {
				done++
			}
		}
		if done == len(workers) {
			break
		}
		if time.Now().After(deadline) {
			for _, w := range all {
				t.Logf("pid %d (exited %v, code %d):\n%s", w.cmd.Process.Pid, w.exited(), w.code, w.stderr.String())
			}
			t.Fatal("the workers did not finish")
		}
		time.Sleep(50 * time.Millisecond)
	}
	merged := 0
	for _, w := range all {
		if strings.Contains(w.stdout.String(), " done: ") {
			merged++
		}
	}
	if merged != 1 {
		t.Errorf("%d workers merged, want 1", merged)
	}
	checkOutput(t, out, ids)
	checkBoughtOnce(t, emu, dsn)
	t.Logf("%d workers in all, %d stopped by the restart", len(all), stoppedByRestart)
}

// TestPostgresWorkerSilentPastItsLeaseStops: a `--join` worker frozen
// (SIGSTOP) in the middle of a step, for longer than its leases live, while
// another worker takes its chunks over, wakes with its heartbeats never
// landed: it must call the provider no more and exit 1 naming the cause,
// while the other worker finishes the job alone: every custom_id once in
// input order, nothing executed twice, one batch per chunk attempt.
func TestPostgresWorkerSilentPastItsLeaseStops(t *testing.T) {
	t.Parallel()
	dsn := testsrv.Postgres(t)
	// Every API call takes 500 ms: a worker spends its steps waiting on
	// the emulator, not inside a database transaction.
	emu, _, in, ids, out, env := openAIJob(t, 36, "o.jsonl", "--batch-time", "500ms", "--slow-rate", "1", "--slow-delay", "500ms")
	env = append(env, "SLUICE_DB="+dsn, "SLUICE_JOIN=1")
	args := pgLockRunArgs(emu, in, out, "--lease-ttl", "600ms", "--max-batch-requests", "12", "--keep-provider-files")
	a := startWorkerProc(t, env, args...)
	apid := a.cmd.Process.Pid
	held := fmt.Sprintf(`SELECT COUNT(*) FROM chunk_leases WHERE worker_id LIKE '%%-%d-%%'`, apid)
	busy := `SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND state <> 'idle'`
	for try := 0; ; try++ {
		waitUntil(t, "the first worker holding a chunk's lease", time.Minute, func() bool { return pgTry(dsn, held) >= 1 }, a)
		a.cmd.Process.Signal(syscall.SIGSTOP)
		if pgTry(dsn, busy) == 0 && pgTry(dsn, held) >= 1 {
			break // frozen mid-step, outside any transaction
		}
		a.cmd.Process.Signal(syscall.SIGCONT)
		if try == 50 {
			t.Fatal("never caught the first worker mid-step outside a transaction")
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Cleanup(func() { a.cmd.Process.Signal(syscall.SIGCONT) })
	b := startWorkerProc(t, env, args...)
	bpid := b.cmd.Process.Pid
	waitUntil(t, "the second worker taking a chunk the first one held", 30*time.Second, func() bool {
		return pgTry(dsn, held) == 0 && pgTry(dsn, fmt.Sprintf(`SELECT COUNT(*) FROM chunk_leases WHERE worker_id LIKE '%%-%d-%%'`, bpid)) >= 1
	}, b)
	a.cmd.Process.Signal(syscall.SIGCONT)
	waitExit(t, a, time.Minute)
	waitExit(t, b, time.Minute)
	if a.code != 1 || !strings.Contains(a.stderr.String(), "heartbeats did not land") {
		t.Errorf("the frozen worker: exit %d, want 1 saying its heartbeats did not land:\n%s", a.code, a.stderr.String())
	}
	if b.code != 0 || !strings.Contains(b.stdout.String(), " done: ") {
		t.Fatalf("the other worker: exit %d, want 0 having merged:\n%s\n%s", b.code, b.stdout.String(), b.stderr.String())
	}
	checkOutput(t, out, ids)
	checkBoughtOnce(t, emu, dsn)
}
