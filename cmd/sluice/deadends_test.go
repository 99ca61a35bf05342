package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// TestWrongBaseURLCanBeCorrected (issue 21, item 5): a run against a dead
// --base-url fails (exit 1) with nothing at the provider; the same command
// with the right URL then runs the input to the end, and so does --job
// with the right URL on the job the dead run planned. The dead run's job
// does not linger holding the output.
func TestWrongBaseURLCanBeCorrected(t *testing.T) {
	t.Parallel()
	emu := startEmulator(t)
	dead := "http://" + refusingAddr(t) + "/v1"
	right := "http://" + emu.addr + "/v1"
	for _, how := range []string{"same command", "--job"} {
		t.Run(strings.ReplaceAll(how, " ", "_"), func(t *testing.T) {
			dir := t.TempDir()
			in, ids := writeInput(t, dir, 12)
			out := filepath.Join(dir, "out.jsonl")
			env := append(stateEnv(dir), "OPENAI_API_KEY=sk-x")
			args := []string{"run", in, "--out", out, "--provider", "openai", "--rate", "-1",
				"--poll-interval", "50ms", "--max-poll-interval", "100ms", "--http-max-wait", "1s"}
			r := runSluiceFor(t, 90e9, env, append(args, "--base-url", dead)...)
			if r.code != exitError {
				t.Fatalf("run against a dead --base-url: exit %d, want 1\n%s", r.code, tail(r.stderr, 2000))
			}
			deadJob := onlyJob(t, statusOf(t, env)).ID
			again := append(args, "--base-url", right)
			if how == "--job" {
				again = append(again, "--job", deadJob)
			}
			r = runSluiceFor(t, 90e9, env, again...)
			if r.code != 0 {
				t.Fatalf("run with the right --base-url (%s): exit %d, want 0\n%s", how, r.code, tail(r.stderr, 2000))
			}
			checkOutput(t, out, ids)
			job := onlyJob(t, statusOf(t, env))
			if how == "--job" && job.ID != deadJob {
				t.Errorf("ran job %s, want %s", job.ID, deadJob)
			}
			if job.State != "done" {
				t.Errorf("job %s is %s, want done", job.ID, job.State)
			}
		})
	}
	if st := emu.stats(t); st["requests_processed_more_than_once"] != 0 {
		t.Errorf("emulator: %v", st)
	}
}

// TestPlanFlagChangeWithBatchesRefused (issue 21, item 5): once a job has
// batches at the provider, a command that says otherwise about what shaped
// its plan (here --model-map, --default-max-tokens, --base-url and
// --max-batch-requests), whether the same command or with --job, is
// refused (exit 2) naming the flag, its value and the plan's, the job's
// batches, and the ways out (sluice cancel, --job NEW_NAME); nothing more
// is bought.
func TestPlanFlagChangeWithBatchesRefused(t *testing.T) {
	t.Parallel()
	emu := startEmulator(t, "--batch-time", "60s")
	other := startEmulator(t)
	dir := t.TempDir()
	in, _ := writeInput(t, dir, 12)
	out := filepath.Join(dir, "out.jsonl")
	env := append(stateEnv(dir), "OPENAI_API_KEY=sk-x")
	base := []string{"run", in, "--out", out, "--provider", "openai", "--rate", "-1", "--once",
		"--base-url", "http://" + emu.addr + "/v1"}
	if r := runSluice(t, env, append(base, "--model-map", "gpt-4o-mini=gpt-4o")...); r.code != exitStopped {
		t.Fatalf("first run --once: exit %d, want 3\n%s", r.code, tail(r.stderr, 2000))
	}
	job := onlyJob(t, statusOf(t, env))
	if len(job.Live) == 0 {
		t.Fatal("the first run left no live batch")
	}
	created := emu.stats(t)["batches_created"]
	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"same command, another --model-map", []string{"--model-map", "gpt-4o-mini=gpt-4.1"},
			[]string{"--model-map gpt-4o-mini=gpt-4.1", "planned with --model-map gpt-4o-mini=gpt-4o"}},
		{"--job, another --model-map", []string{"--job", job.ID, "--model-map", "gpt-4o-mini=gpt-4.1"},
			[]string{"--model-map gpt-4o-mini=gpt-4.1", "planned with --model-map gpt-4o-mini=gpt-4o"}},
		{"--job, --default-max-tokens", []string{"--job", job.ID, "--default-max-tokens", "99"},
			[]string{"--default-max-tokens 99", "no --default-max-tokens"}},
		{"--job, another --base-url", []string{"--job", job.ID, "--base-url", "http://" + other.addr + "/v1"},
			[]string{"--base-url http://" + other.addr + "/v1", "the endpoint http://" + emu.addr + "/v1"}},
		{"--job, --max-batch-requests", []string{"--job", job.ID, "--max-batch-requests", "2"},
			[]string{"--max-batch-requests 2", "--max-batch-requests 50000"}},
	} {
		r := runSluice(t, env, append(append([]string{}, base...), c.args...)...)
		want := append(c.want, job.Live[0].BatchID, "sluice cancel "+job.ID, "--job NEW_NAME")
		bad := r.code != exitUsage || strings.Contains(r.stderr, "is the output of job")
		for _, w := range want {
			bad = bad || !strings.Contains(r.stderr, w)
		}
		if bad {
			t.Errorf("%s: exit %d, want 2 naming %q\n%s", c.name, r.code, want, tail(r.stderr, 2000))
		}
	}
	if got := emu.stats(t)["batches_created"]; got != created {
		t.Errorf("%d batches created, want %d: a refused run bought", got, created)
	}
	if n := other.stats(t)["batches_created"]; n != 0 {
		t.Errorf("%d batches created at the other endpoint", n)
	}
	if n := len(statusOf(t, env).Jobs); n != 1 {
		t.Errorf("%d jobs after the refused runs, want 1", n)
	}
}

// TestPlanFlagChangeWithNothingSubmittedReplans (issue 21, item 5): a job
// with nothing at the provider takes what the command says: a planned job
// run with --job and another --model-map answers from the new model (it
// was silently the old one), and the same command with another
// --model-map after a run that reached nothing replaces that job.
func TestPlanFlagChangeWithNothingSubmittedReplans(t *testing.T) {
	t.Parallel()
	emu := startEmulator(t)
	right := "http://" + emu.addr + "/v1"
	modelOf := func(t *testing.T, out string, ids []string) map[string]int {
		models := map[string]int{}
		for _, l := range checkOutput(t, out, ids) {
			if l.Response == nil {
				t.Fatalf("%s failed: %+v", l.CustomID, l.Error)
			}
			var b struct{ Model string }
			json.Unmarshal(l.Response.Body, &b)
			models[b.Model]++
		}
		return models
	}
	t.Run("plan_then_job", func(t *testing.T) {
		dir := t.TempDir()
		in, ids := writeInput(t, dir, 12)
		out := filepath.Join(dir, "out.jsonl")
		env := append(stateEnv(dir), "OPENAI_API_KEY=sk-x", "OPENAI_BASE_URL="+right)
		if r := runSluice(t, env, "plan", in, "--provider", "openai", "--model-map", "gpt-4o-mini=gpt-4o", "--max-batch-requests", "3"); r.code != 0 {
			t.Fatalf("plan: exit %d\n%s", r.code, r.stderr)
		}
		job := onlyJob(t, statusOf(t, env)).ID
		r := runSluice(t, env, "run", in, "--out", out, "--provider", "openai", "--job", job, "--rate", "-1",
			"--poll-interval", "50ms", "--model-map", "gpt-4o-mini=gpt-4.1")
		if r.code != 0 || !strings.Contains(r.stderr, "planning it again") {
			t.Fatalf("run --job with another --model-map: exit %d, want 0 planning again\n%s", r.code, tail(r.stderr, 2000))
		}
		if m := modelOf(t, out, ids); m["gpt-4.1"] != 4 || m["gpt-4o"] != 0 || m["gpt-4o-mini"] != 0 {
			t.Errorf("answers by model %v, want the 4 gpt-4o-mini lines answered by gpt-4.1", m)
		}
		// What the command left out keeps the plan's value: 3 requests a batch.
		if got := emu.stats(t)["batches_created"]; got < 6 {
			t.Errorf("%d batches for 12 requests, want at least 6: --max-batch-requests 3 was lost", got)
		}
	})
	t.Run("same_command", func(t *testing.T) {
		dir := t.TempDir()
		in, ids := writeInput(t, dir, 12)
		out := filepath.Join(dir, "out.jsonl")
		env := append(stateEnv(dir), "OPENAI_API_KEY=sk-x")
		args := []string{"run", in, "--out", out, "--provider", "openai", "--rate", "-1", "--poll-interval", "50ms", "--http-max-wait", "1s"}
		r := runSluiceFor(t, 90e9, env, append(args, "--base-url", "http://"+refusingAddr(t)+"/v1", "--model-map", "gpt-4o-mini=gpt-4o")...)
		if r.code != exitError {
			t.Fatalf("run against a dead endpoint: exit %d, want 1\n%s", r.code, tail(r.stderr, 2000))
		}
		r = runSluice(t, env, append(args, "--base-url", right, "--model-map", "gpt-4o-mini=gpt-4.1")...)
		if r.code != 0 {
			t.Fatalf("the command with the right endpoint and another --model-map: exit %d, want 0\n%s", r.code, tail(r.stderr, 2000))
		}
		if m := modelOf(t, out, ids); m["gpt-4.1"] != 4 {
			t.Errorf("answers by model %v, want 4 from gpt-4.1", m)
		}
		if n := len(statusOf(t, env).Jobs); n != 1 {
			t.Errorf("%d jobs, want 1: the replaced job lingers", n)
		}
	})
}
