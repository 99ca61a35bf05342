package main

// End-to-end tests of unattended operation: status, cancel, progress on a
// terminal, --deadline, and the state directory under cron's environment.

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-batch/sluice"
)

// statusOf runs `sluice status [JOB] --json` (with extra args) and decodes it.
func statusOf(t *testing.T, env []string, args ...string) statusDoc {
	t.Helper()
	r := runSluice(t, env, append([]string{"status", "--json"}, args...)...)
	if r.code != 0 {
		t.Fatalf("status --json %v: exit %d\n%s", args, r.code, r.stderr)
	}
	var doc statusDoc
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		t.Fatalf("status --json: %v\n%s", err, r.stdout)
	}
	return doc
}

func onlyJob(t *testing.T, doc statusDoc) statusJob {
	t.Helper()
	if len(doc.Jobs) != 1 {
		t.Fatalf("status lists %d jobs, want 1", len(doc.Jobs))
	}
	return doc.Jobs[0]
}

// TestStatusChunksShowLastErrorVerbatim: every batch fails validation at
// the emulator; `status JOB --chunks` shows each chunk's last provider
// error exactly as recorded, and a finished job shows its outcome, output
// and errors paths.
func TestStatusChunksShowLastErrorVerbatim(t *testing.T) {
	t.Parallel() // its own state directory (and emulator)
	_, _, in, ids, out, env := openAIJob(t, 30, "out.jsonl", "--validation-fail-rate", "1")
	r := runSluice(t, env, "run", in, "--out", out, "--provider", "openai", "--max-attempts", "1",
		"--poll-interval", "50ms", "--max-poll-interval", "100ms", "--rate", "-1")
	if r.code != exitFailures {
		t.Fatalf("run: exit %d, want %d\n%s", r.code, exitFailures, r.stderr)
	}
	checkOutput(t, out, ids)
	job := onlyJob(t, statusOf(t, env))

	withChunks := onlyJob(t, statusOf(t, env, job.ID, "--chunks"))
	if len(withChunks.ChunkList) == 0 {
		t.Fatal("status --chunks --json lists no chunks")
	}
	text := runSluice(t, env, "status", job.ID, "--chunks")
	if text.code != 0 {
		t.Fatalf("status --chunks: exit %d\n%s", text.code, text.stderr)
	}
	for _, c := range withChunks.ChunkList {
		if c.State != sluice.ChunkFailed || !strings.Contains(c.LastError, "failed validation") {
			t.Errorf("chunk %d: %s, last error %q; want failed with the emulator's validation error", c.ID, c.State, c.LastError)
		}
		if !strings.Contains(text.stdout, c.LastError) {
			t.Errorf("status --chunks does not show chunk %d's last error verbatim (%q):\n%s", c.ID, c.LastError, text.stdout)
		}
		if !strings.Contains(text.stdout, c.BatchID) {
			t.Errorf("status --chunks does not show chunk %d's batch id %s", c.ID, c.BatchID)
		}
	}

	// The finished job: state, counts, paths and the merge summary.
	if job.State != sluice.JobDone || job.Requests[sluice.RequestFailed] != 30 || job.Chunks[sluice.ChunkFailed] != len(withChunks.ChunkList) {
		t.Errorf("status = %+v, want done with 30 failed requests and every chunk failed", job)
	}
	s := job.Summary
	if s == nil || s.Failed != 30 || s.Succeeded != 0 || s.Lines != 30 || s.Output != out || s.Errors != errorsPathFor(out) || s.Wall == "" {
		t.Fatalf("status summary = %+v, want 30 failed, output and errors paths, wall time", s)
	}
	if b, err := os.ReadFile(s.Errors); err != nil || strings.Count(string(b), "\n") != 30 {
		t.Errorf("errors file %s: %v, %d lines; want 30", s.Errors, err, strings.Count(string(b), "\n"))
	}
	for _, want := range []string{"output:   " + out, "errors:   " + s.Errors, "result:   0 succeeded, 30 failed", "wall time"} {
		if !strings.Contains(text.stdout, want) {
			t.Errorf("status text lacks %q:\n%s", want, text.stdout)
		}
	}
}

// TestCancelKeepsCompletedLines submits with --once to an emulator whose
// batches take 5s, cancels the job midway, and checks: the provider shows
// every batch cancelled, the output has one line per request (the lines done
// by the cancel as successes, the others as cancelled errors), the errors
// file has the cancelled ones, and the exit code is 4.
func TestCancelKeepsCompletedLines(t *testing.T) {
	t.Parallel()
	emu, dir, in, ids, out := emulatorJob(t, 60, "out.jsonl", "--batch-time", "5s")
	base := "http://" + emu.addr + "/v1"
	env := append(stateEnv(dir), "OPENAI_API_KEY=sk-x")
	r := runSluice(t, env, "run", in, "--out", out, "--provider", "openai", "--base-url", base, "--once", "--rate", "-1")
	if r.code != exitStopped {
		t.Fatalf("run --once: exit %d, want 3\n%s", r.code, r.stderr)
	}
	job := onlyJob(t, statusOf(t, env))
	if job.State != sluice.JobRunning || len(job.Live) != 3 {
		t.Fatalf("after --once: %s with %d live batches, want running with 3", job.State, len(job.Live))
	}
	// Cancel once every batch has completed some of its lines (in_progress
	// runs from 0.5s to 4.5s after create), so that the cancel keeps some.
	var created time.Time
	for _, b := range job.Live {
		if c := time.Unix(getBatch(t, base, b.BatchID).CreatedAt, 0); c.After(created) {
			created = c
		}
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		started := 0
		for _, b := range job.Live {
			if rc := getBatch(t, base, b.BatchID).RequestCounts; rc.Completed > 0 {
				started++
			}
		}
		if started == len(job.Live) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s, %d of %d batches have completed a line", started, len(job.Live))
		}
	}

	// The base URL from the flag; the provider from the database.
	r = runSluice(t, env, "cancel", job.ID, "--base-url", base, "--poll-interval", "100ms", "--max-poll-interval", "200ms")
	if r.code != exitFailures {
		t.Fatalf("cancel: exit %d, want 4 (some requests cancelled)\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "cancel requested for 3 of 3 live batches") || !strings.Contains(r.stdout, "cancelled: 60 requests") {
		t.Errorf("cancel says:\n%s", r.stdout)
	}
	for _, b := range job.Live {
		if st := getBatch(t, base, b.BatchID).Status; st != "cancelled" {
			t.Errorf("batch %s is %q at the provider, want cancelled", b.BatchID, st)
		}
	}
	n := outcomes(t, checkOutput(t, out, ids), sluice.CodeBatchCancelled, sluice.CodeCancelled)
	ok, cancelled := n["ok"], n[string(sluice.CodeBatchCancelled)]+n[string(sluice.CodeCancelled)]
	if ok == 0 || cancelled == 0 {
		t.Errorf("%d succeeded, %d cancelled: want the completed lines kept and the rest cancelled", ok, cancelled)
	}
	if b, _ := os.ReadFile(errorsPathFor(out)); strings.Count(string(b), "\n") != cancelled {
		t.Errorf("errors file has %d lines, want the %d cancelled", strings.Count(string(b), "\n"), cancelled)
	}
	job = onlyJob(t, statusOf(t, env))
	if job.State != sluice.JobDone || job.Summary == nil || !job.Summary.Cancelled || job.Summary.Succeeded != int64(ok) {
		t.Errorf("status after cancel = %s, summary %+v; want done, cancelled, %d succeeded", job.State, job.Summary, ok)
	}
	// The cancel is a fact of the job in the database, not a marker file.
	if job.CancelRequestedAt.IsZero() || job.CancelRequestedAt.After(time.Now()) || job.CancelRequestedAt.Before(created) {
		t.Errorf("status cancel_requested_at = %v, want the time of the cancel", job.CancelRequestedAt)
	}
	// Nothing was bought twice, and the cancelled lines were not retried.
	if st := emu.stats(t); st["batches_created"] != 3 || st["requests_processed_more_than_once"] != 0 {
		t.Errorf("emulator stats %v: want 3 batches, nothing processed twice", st)
	}
}

type batchInfo struct {
	ID            string `json:"id"`
	Status        string `json:"status"`
	CreatedAt     int64  `json:"created_at"`
	RequestCounts struct {
		Total     int `json:"total"`
		Completed int `json:"completed"`
	} `json:"request_counts"`
}

func getBatch(t *testing.T, base, id string) batchInfo {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/batches/"+id, nil)
	req.Header.Set("Authorization", "Bearer sk-x")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b batchInfo
	if err := json.NewDecoder(resp.Body).Decode(&b); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET batch %s: %d %v", id, resp.StatusCode, err)
	}
	return b
}

var ansi = regexp.MustCompile(`\x1b\[[0-9;?]*[A-Za-z]`)

// TestRunProgressOnTerminal runs sluice under a pseudo-terminal on a job
// slow enough to watch: the planning line, the batches/requests lines with
// their counts and a bar are drawn in place, logs are console lines, not
// JSON, and the summary ends it.
func TestRunProgressOnTerminal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out := filepath.Join(dir, "results.jsonl")
	cmd := sluiceCmd(stateEnv(dir), "run", "../../examples/requests.jsonl", "--out", out,
		"--local-batch-time", "2s", "--max-batch-requests", "40")
	ptmx, err := startOnPTY(cmd, 40, 160)
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	var raw bytes.Buffer
	copied := make(chan struct{})
	go func() {
		io.Copy(&raw, ptmx) // ends with EIO when the process exits
		close(copied)
	}()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run on a terminal: %v\n%s", err, raw.String())
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatal("run on a terminal did not finish")
	}
	select {
	case <-copied:
	case <-time.After(5 * time.Second):
	}
	screen := raw.String()
	text := ansi.ReplaceAllString(screen, "")
	if !strings.Contains(text, "planning: ") {
		t.Errorf("no planning progress:\n%s", text)
	}
	live := regexp.MustCompile(`batches: +(\d+) submitted: (\d+) live, (\d+) done; (\d+) waiting`)
	sawLive := false
	for _, m := range live.FindAllStringSubmatch(text, -1) {
		if n, _ := strconv.Atoi(m[2]); n > 0 {
			sawLive = true
		}
		// Live batches are submitted ones that have not ended.
		if sub, _ := strconv.Atoi(m[1]); atoiOr0(m[2])+atoiOr0(m[3]) > sub {
			t.Errorf("batches line counts more live and done than submitted: %q", m[0])
		}
	}
	// 100% only once every request is final.
	for _, m := range regexp.MustCompile(`requests: +(\d+) of 240 done[^\n]*\n[^\n]*?(\d+)%`).FindAllStringSubmatch(text, -1) {
		if m[2] == "100" && m[1] != "240" {
			t.Errorf("100%% with %s of 240 requests done", m[1])
		}
	}
	if !sawLive {
		t.Errorf("no batches line with live batches:\n%s", text)
	}
	if !regexp.MustCompile(`requests: +\d+ of 240 done: \d+ succeeded, \d+ failed, \d+ retried`).MatchString(text) {
		t.Errorf("no requests line:\n%s", text)
	}
	if !regexp.MustCompile(`\[#*-*\] +\d+%`).MatchString(text) {
		t.Errorf("no progress bar:\n%s", text)
	}
	if !strings.Contains(screen, "\x1b[1A\x1b[K") {
		t.Error("the progress lines are not redrawn in place")
	}
	if strings.Contains(text, `{"level"`) {
		t.Errorf("JSON logs on a terminal:\n%s", text)
	}
	if !strings.Contains(text, "INF") || !strings.Contains(text, "batch submitted") {
		t.Errorf("no console log lines:\n%s", text)
	}
	if !strings.Contains(text, "240 requests: 240 succeeded, 0 failed") || !strings.Contains(text, "output: "+out) {
		t.Errorf("no final summary:\n%s", text)
	}
	// After the summary the progress lines are gone for good.
	tail := text[strings.LastIndex(text, "240 succeeded"):]
	if live.MatchString(tail) {
		t.Errorf("progress drawn after the summary:\n%s", tail)
	}
}

// TestDeadlineStopsThenResumes: --deadline 1s against batches that take
// longer stops with exit 3 soon after the deadline, leaving the batches
// running; the same command without it then finishes the job.
func TestDeadlineStopsThenResumes(t *testing.T) {
	t.Parallel()
	emu, _, in, ids, out, env := openAIJob(t, 30, "out.jsonl", "--batch-time", "5s")
	args := []string{"run", in, "--out", out, "--provider", "openai", "--poll-interval", "200ms", "--max-poll-interval", "500ms", "--rate", "-1"}
	start := time.Now()
	r := runSluice(t, env, append(args, "--deadline", "1s")...)
	took := time.Since(start)
	if r.code != exitStopped {
		t.Fatalf("--deadline 1s: exit %d, want 3\n%s", r.code, r.stderr)
	}
	if took > 4*time.Second { // the batches take 5s: it did not wait for them
		t.Errorf("--deadline 1s took %v to stop", took)
	}
	if !strings.Contains(r.stderr, "--deadline reached") {
		t.Errorf("the log does not say the deadline stopped the run:\n%s", r.stderr)
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("output written before the job finished")
	}
	job := onlyJob(t, statusOf(t, env))
	if job.State != sluice.JobRunning || len(job.Live) != 3 || job.RunningPID != 0 {
		t.Errorf("after the deadline: %s, %d live batches, pid %d; want running, 3 live, no process", job.State, len(job.Live), job.RunningPID)
	}
	r = runSluice(t, env, args...)
	if r.code != 0 {
		t.Fatalf("re-run: exit %d\n%s", r.code, r.stderr)
	}
	checkOutput(t, out, ids)
	if st := emu.stats(t); st["batches_created"] != 3 {
		t.Errorf("%d batches created, want 3 (the re-run adopts the running ones)", st["batches_created"])
	}
}

func TestParseDeadline(t *testing.T) {
	now := time.Date(2025, 3, 1, 22, 30, 0, 0, time.Local)
	for in, want := range map[string]time.Time{
		"07:00":    time.Date(2025, 3, 2, 7, 0, 0, 0, time.Local),
		"23:15:30": time.Date(2025, 3, 1, 23, 15, 30, 0, time.Local),
		"8h":       now.Add(8 * time.Hour),
		"90m":      now.Add(90 * time.Minute),
	} {
		got, err := parseDeadline(in, now)
		if err != nil || !got.Equal(want) {
			t.Errorf("parseDeadline(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"7", "-1h", "0s", "tomorrow", "25:00"} {
		if _, err := parseDeadline(bad, now); err == nil {
			t.Errorf("parseDeadline(%q) accepted", bad)
		}
	}
}

// TestStateDirUnderCron: with cron's bare environment (no HOME, no
// SLUICE_STATE, no XDG_STATE_HOME) the state directory is found from the
// password database; XDG_STATE_HOME, SLUICE_STATE and --state override in
// that order. status only reads, so this touches nothing in the real home.
func TestStateDirUnderCron(t *testing.T) {
	t.Parallel()
	u, err := user.Current()
	if err != nil || u.HomeDir == "" {
		t.Skipf("no home directory in the password database: %v", err)
	}
	dir := t.TempDir()
	bare := []string{"PATH=/usr/bin:/bin"}
	cases := []struct {
		env  []string
		args []string
		want string
	}{
		{bare, nil, filepath.Join(u.HomeDir, ".local", "state", "sluice")},
		{append(bare, "XDG_STATE_HOME="+dir+"/xdg"), nil, filepath.Join(dir, "xdg", "sluice")},
		{append(bare, "XDG_STATE_HOME="+dir+"/xdg", "SLUICE_STATE="+dir+"/env"), nil, filepath.Join(dir, "env")},
		{append(bare, "SLUICE_STATE="+dir+"/env"), []string{"--state", dir + "/flag"}, filepath.Join(dir, "flag")},
	}
	for _, c := range cases {
		cmd := sluiceCmd(nil, append([]string{"status", "--json"}, c.args...)...)
		cmd.Env = c.env // exactly these variables
		cmd.Dir = dir
		b, err := cmd.Output()
		if err != nil {
			t.Fatalf("env %v: %v", c.env, err)
		}
		var doc statusDoc
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatalf("env %v: %v\n%s", c.env, err, b)
		}
		if doc.StateDir != c.want {
			t.Errorf("env %v %v: state dir %q, want %q", c.env, c.args, doc.StateDir, c.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "xdg")); err == nil {
		t.Error("status created a state directory")
	}

	// A whole run under that bare environment, as the README's crontab line
	// runs it (the state directory given, as it can be in the crontab).
	in, ids := writeInput(t, dir, 12)
	out := filepath.Join(dir, "out.jsonl")
	cmd := sluiceCmd(nil, "run", in, "--out", out, "--once")
	cmd.Env = append(bare, "SLUICE_STATE="+dir+"/env")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("run under a bare environment: %v\n%s", err, stderr.String())
	}
	checkOutput(t, out, ids)
}

// TestRerunOfDoneJobLeavesOutput: a timer keeps running a finished job's
// command; that must neither rewrite the output nor change the exit code,
// and a deleted output is written again from the kept results.
func TestRerunOfDoneJobLeavesOutput(t *testing.T) {
	t.Parallel() // its own state directory (and emulator)
	dir := t.TempDir()
	in, ids := writeInput(t, dir, 20)
	out := filepath.Join(dir, "out.jsonl")
	env := stateEnv(dir)
	if r := runSluice(t, env, "run", in, "--out", out, "--once"); r.code != 0 {
		t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
	}
	before, _ := os.Stat(out)
	r := runSluice(t, env, "run", in, "--out", out, "--once")
	after, _ := os.Stat(out)
	// Outputs are written to a temp file renamed over the name: a rewrite
	// is a new file, whatever the clock's resolution.
	rewritten := !os.SameFile(before, after) || !after.ModTime().Equal(before.ModTime())
	if r.code != 0 || rewritten {
		t.Errorf("re-run of a done job: exit %d, output rewritten %v", r.code, rewritten)
	}
	if !strings.Contains(r.stdout, "20 succeeded") {
		t.Errorf("re-run does not repeat the summary:\n%s", r.stdout)
	}
	os.Remove(out)
	if r := runSluice(t, env, "run", in, "--out", out, "--once"); r.code != 0 {
		t.Fatalf("re-run after deleting the output: exit %d\n%s", r.code, r.stderr)
	}
	checkOutput(t, out, ids)
}

func atoiOr0(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
