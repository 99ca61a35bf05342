package main

import (
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
)

// TestSameJobWhicheverWayTheEndpointIsGiven (issue 11, item 2): a run with
// --base-url, then the same run with OPENAI_BASE_URL instead, is one job:
// nothing is bought twice. A plan made one way is the run's plan the
// other way. Another job may not write the same output.
func TestSameJobWhicheverWayTheEndpointIsGiven(t *testing.T) {
	t.Parallel()
	emu, dir, in, ids, out := emulatorJob(t, 30, "out.jsonl", "--batch-time", "3s")
	base := "http://" + emu.addr + "/v1"
	env := append(stateEnv(dir), "OPENAI_API_KEY=sk-x")
	args := []string{"run", in, "--out", out, "--provider", "openai", "--rate", "-1",
		"--poll-interval", "100ms", "--max-poll-interval", "300ms"}

	r := runSluice(t, env, append(args, "--base-url", base, "--once")...)
	if r.code != exitStopped {
		t.Fatalf("run --base-url --once: exit %d, want 3\n%s", r.code, r.stderr)
	}
	created := emu.stats(t)["batches_created"]
	if created == 0 {
		t.Fatal("the first run created no batch")
	}
	// The same endpoint from the environment, with a trailing slash.
	r = runSluice(t, append(env, "OPENAI_BASE_URL="+base+"/"), append(args, "--once")...)
	if r.code != exitStopped && r.code != 0 {
		t.Fatalf("run with OPENAI_BASE_URL --once: exit %d\n%s", r.code, r.stderr)
	}
	if n := len(statusOf(t, env).Jobs); n != 1 {
		t.Errorf("%d jobs after the same run with the endpoint given two ways, want 1", n)
	}
	if got := emu.stats(t)["batches_created"]; got != created {
		t.Errorf("%d batches created after the second run, want %d: the job was bought twice", got, created)
	}

	// Another input into the same output is refused, naming the job.
	other, _ := writeInput(t, t.TempDir(), 6)
	job := onlyJob(t, statusOf(t, env))
	r = runSluice(t, append(env, "OPENAI_BASE_URL="+base), "run", other, "--out", out, "--provider", "openai", "--once")
	if r.code != exitUsage || !strings.Contains(r.stderr, job.ID) {
		t.Errorf("a second job into the same --out: exit %d, want 2 naming %s\n%s", r.code, job.ID, r.stderr)
	}
	if n := len(statusOf(t, env).Jobs); n != 1 {
		t.Errorf("the refused run left %d jobs, want 1", n)
	}

	r = runSluice(t, append(env, "OPENAI_BASE_URL="+base), args...)
	if r.code != 0 {
		t.Fatalf("final run: exit %d\n%s", r.code, r.stderr)
	}
	checkOutput(t, out, ids)
	if st := emu.stats(t); st["batches_created"] != created || st["requests_processed_more_than_once"] != 0 {
		t.Errorf("emulator %v: want %d batches and nothing processed twice", st, created)
	}
	// Once that job is done, its output no longer holds the path.
	if r := runSluice(t, append(env, "OPENAI_BASE_URL="+base), "run", other, "--out", out, "--provider", "openai", "--rate", "-1",
		"--poll-interval", "100ms", "--max-poll-interval", "300ms"); r.code != 0 {
		t.Errorf("a new job into a done job's output: exit %d, want 0\n%s", r.code, r.stderr)
	}
}

// TestPlanThenRunReusesThePlan: `plan` with --base-url, then `run` with the
// endpoint from the environment, runs the planned job.
func TestPlanThenRunReusesThePlan(t *testing.T) {
	t.Parallel()
	emu := startEmulator(t)
	dir := t.TempDir()
	in, ids := writeInput(t, dir, 20)
	base := "http://" + emu.addr + "/v1"
	env := append(stateEnv(dir), "OPENAI_API_KEY=sk-x")
	if r := runSluice(t, env, "plan", in, "--provider", "openai", "--base-url", base, "--max-batch-requests", "5"); r.code != 0 {
		t.Fatalf("plan: exit %d\n%s", r.code, r.stderr)
	}
	out := filepath.Join(dir, "out.jsonl")
	r := runSluice(t, append(env, "OPENAI_BASE_URL="+base), "run", in, "--out", out, "--provider", "openai", "--rate", "-1",
		"--poll-interval", "50ms", "--max-poll-interval", "100ms")
	if r.code != 0 {
		t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "resuming job") {
		t.Errorf("run did not resume the planned job:\n%s", r.stderr)
	}
	checkOutput(t, out, ids)
	if n := len(statusOf(t, env).Jobs); n != 1 {
		t.Errorf("%d jobs, want the planned one only", n)
	}
	if got := emu.stats(t)["batches_created"]; got != 6 { // 3 (url, model) groups of 7, 7, 6 lines by 5
		t.Errorf("%d batches, want the plan's 6", got)
	}
}

// TestResumedRunRefusesPlanFlags (issue 11, item 9; issue 21, item 5):
// what shaped a plan cannot change on a job with batches at the provider:
// exit 2 naming the flag and --job NEW_NAME. (A job with nothing there is
// planned again: TestPlanFlagChangeWithNothingSubmittedReplans.)
func TestResumedRunRefusesPlanFlags(t *testing.T) {
	t.Parallel()
	emu, _, in, _, out, env := openAIJob(t, 30, "out.jsonl", "--batch-time", "30s")
	common := []string{"--provider", "openai", "--rate", "-1"}
	if r := runSluice(t, env, append([]string{"run", in, "--out", out, "--once", "--max-batch-requests", "5"}, common...)...); r.code != exitStopped {
		t.Fatalf("run --once: exit %d, want 3\n%s", r.code, r.stderr)
	}
	created := emu.stats(t)["batches_created"]
	for _, c := range [][]string{
		{"--max-batch-requests", "50"},
		{"--max-batch-bytes", "100000"},
		{"--max-batch-tokens", "1000"},
		{"--model", "gpt-4o"},
	} {
		r := runSluice(t, env, append(append([]string{"run", in, "--out", out, "--once"}, common...), c...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c[0]) || !strings.Contains(r.stderr, "--job NEW_NAME") {
			t.Errorf("run %s %s on a planned job: exit %d, want 2 naming the flag and --job NEW_NAME\n%s", c[0], c[1], r.code, r.stderr)
		}
		if c[0] == "--model" && !strings.Contains(r.stderr, "planned with no --model") {
			t.Errorf("run --model on a job planned without one: %s", r.stderr)
		}
	}
	if got := emu.stats(t)["batches_created"]; got != created {
		t.Errorf("refused runs created %d batches", got-created)
	}
}

// TestResumedRunAppliesLiveFlags (issue 11, item 9): a limit that may
// change on a live job (here --max-live-batches) takes effect on a later
// run of the same job; the plan's own value given again is no change.
func TestResumedRunAppliesLiveFlags(t *testing.T) {
	t.Parallel()
	emu, _, in, _, out, env := openAIJob(t, 30, "out.jsonl", "--batch-time", "30s")
	common := []string{"--provider", "openai", "--rate", "-1"}
	run := func(extra ...string) result {
		return runSluice(t, env, append(append([]string{"run", in, "--out", out, "--once", "--max-batch-requests", "5"}, common...), extra...)...)
	}
	if r := run("--max-live-batches", "2"); r.code != exitStopped {
		t.Fatalf("run --max-live-batches 2: exit %d, want 3\n%s", r.code, r.stderr)
	}
	if live := len(onlyJob(t, statusOf(t, env)).Live); live != 2 {
		t.Fatalf("%d live batches under --max-live-batches 2", live)
	}
	// A later run that raises the limit submits up to the new one.
	if r := run("--max-live-batches", "10"); r.code != exitStopped {
		t.Fatalf("run --max-live-batches 10: exit %d, want 3\n%s", r.code, r.stderr)
	}
	if live := len(onlyJob(t, statusOf(t, env)).Live); live != 6 {
		t.Errorf("%d live batches after --max-live-batches 10 on the resumed job, want all 6", live)
	}
	if got := emu.stats(t)["batches_created"]; got != 6 {
		t.Errorf("%d batches created, want 6", got)
	}
}

// TestJobOfEarlierVersionResumes: a job an earlier version planned with the
// endpoint from the environment had a name hashed without it; upgrading
// sluice mid-job resumes that job instead of starting (and buying) it
// again.
func TestJobOfEarlierVersionResumes(t *testing.T) {
	t.Parallel()
	emu := startEmulator(t)
	dir := t.TempDir()
	in, ids := writeInput(t, dir, 12)
	env := append(stateEnv(dir), "OPENAI_API_KEY=sk-x", "OPENAI_BASE_URL=http://"+emu.addr+"/v1")
	legacy := derivedJobName(in, "openai", "") // what earlier versions named it
	if r := runSluice(t, env, "plan", in, "--provider", "openai", "--job", legacy); r.code != 0 {
		t.Fatalf("plan: exit %d\n%s", r.code, r.stderr)
	}
	// Earlier versions recorded no endpoint.
	db, err := sql.Open("sqlite3", filepath.Join(dir, "state", "sluice.db"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE jobs SET endpoint = ''`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	out := filepath.Join(dir, "out.jsonl")
	r := runSluice(t, env, "run", in, "--out", out, "--provider", "openai", "--rate", "-1", "--poll-interval", "50ms")
	if r.code != 0 || !strings.Contains(r.stderr, "resuming job") {
		t.Fatalf("run after the upgrade: exit %d, want 0 resuming the job\n%s", r.code, r.stderr)
	}
	checkOutput(t, out, ids)
	if job := onlyJob(t, statusOf(t, env)); job.ID != legacy {
		t.Errorf("ran job %s, want the earlier version's %s", job.ID, legacy)
	}
}
