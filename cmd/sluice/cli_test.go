package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"
)

func stateEnv(dir string) []string { return []string{"SLUICE_STATE=" + filepath.Join(dir, "state")} }

// TestReadmeFirstRun is the README's first command on the bundled example:
// the local emulator, no key, exit 0, one line per input line in order.
func TestReadmeFirstRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out := filepath.Join(dir, "results.jsonl")
	r := runSluice(t, stateEnv(dir), "run", "../../examples/requests.jsonl", "--out", out)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	b, _ := os.ReadFile("../../examples/requests.jsonl")
	checkOutput(t, out, customIDs(t, b))
	if !strings.Contains(r.stdout, "240 succeeded") {
		t.Errorf("summary does not say 240 succeeded:\n%s", r.stdout)
	}
	// Re-running a finished job rewrites the same output and exits 0.
	before, _ := os.ReadFile(out)
	r = runSluice(t, stateEnv(dir), "run", "../../examples/requests.jsonl", "--out", out)
	after, _ := os.ReadFile(out)
	if r.code != 0 || string(before) != string(after) {
		t.Errorf("re-run of a done job: exit %d, output changed %v", r.code, string(before) != string(after))
	}
}

func TestBadInputExit2WithLine(t *testing.T) {
	t.Parallel() // its own state directory (and emulator)
	dir := t.TempDir()
	in := filepath.Join(dir, "bad.jsonl")
	writeFile(t, in, []byte(`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m"}}
{"custom_id":"b","method":"GET","url":"/v1/chat/completions","body":{"model":"m"}}
`))
	r := runSluice(t, stateEnv(dir), "run", in, "--out", filepath.Join(dir, "o.jsonl"))
	if r.code != 2 {
		t.Fatalf("exit %d, want 2\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "bad.jsonl:2") || !strings.Contains(r.stderr, `"b"`) {
		t.Errorf("error does not name file:line and custom_id: %s", r.stderr)
	}
	// No job was left behind.
	st := runSluice(t, stateEnv(dir), "status", "--json")
	var doc struct{ Jobs []any }
	json.Unmarshal([]byte(st.stdout), &doc)
	if len(doc.Jobs) != 0 {
		t.Errorf("a refused plan left %d jobs", len(doc.Jobs))
	}
	// --skip-invalid goes on and reports the rejects.
	r = runSluice(t, stateEnv(dir), "plan", in, "--skip-invalid", "--json")
	if r.code != 0 {
		t.Fatalf("plan --skip-invalid: exit %d\n%s", r.code, r.stderr)
	}
	var plan struct {
		Requests, Rejected int64
		Chunks             []struct {
			URL, Model string
			Requests   int
			Bytes      int64
			EstTokens  int64 `json:"est_tokens"`
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &plan); err != nil {
		t.Fatalf("plan --json: %v\n%s", err, r.stdout)
	}
	if plan.Requests != 1 || plan.Rejected != 1 || len(plan.Chunks) != 1 || plan.Chunks[0].Bytes == 0 {
		t.Errorf("plan = %+v, want 1 request, 1 rejected, 1 chunk", plan)
	}
}

func TestChangedInputRefused(t *testing.T) {
	t.Parallel() // its own state directory (and emulator)
	dir := t.TempDir()
	in, _ := writeInput(t, dir, 12)
	env := stateEnv(dir)
	if r := runSluice(t, env, "plan", in); r.code != 0 {
		t.Fatalf("plan: exit %d %s", r.code, r.stderr)
	}
	// Touching without changing the content is fine.
	future := time.Now().Add(time.Hour)
	os.Chtimes(in, future, future)
	if r := runSluice(t, env, "plan", in, "--json"); r.code != 0 || !strings.Contains(r.stdout, `"reused": true`) {
		t.Fatalf("touched input: exit %d %s %s", r.code, r.stdout, r.stderr)
	}
	b, _ := os.ReadFile(in)
	b[len(b)-3] = 'X'
	writeFile(t, in, b)
	os.Chtimes(in, future.Add(time.Hour), future.Add(time.Hour))
	r := runSluice(t, env, "run", in, "--out", filepath.Join(dir, "o.jsonl"))
	if r.code != 2 || !strings.Contains(r.stderr, "changed since job") {
		t.Errorf("changed input: exit %d, stderr %q; want 2 and a clear message", r.code, r.stderr)
	}
}

// TestCronOnceFlow runs --once repeatedly against a slow emulator, as a
// timer would, until it exits 0; the output is then complete.
func TestCronOnceFlow(t *testing.T) {
	t.Parallel() // its own state directory (and emulator)
	_, dir, in, ids, out, env := openAIJob(t, 50, "out.jsonl.zst", "--batch-time", "400ms")
	var codes []int
	for i := 0; i < 50; i++ {
		r := runSluice(t, env, "run", in, "--out", out, "--provider", "openai", "--once", "--max-batch-requests", "10", "--rate", "-1")
		codes = append(codes, r.code)
		if r.code == 0 {
			break
		}
		if r.code != 3 {
			t.Fatalf("--once exit %d, want 3 or 0\n%s", r.code, r.stderr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if codes[0] != 3 || codes[len(codes)-1] != 0 {
		t.Fatalf("exit codes %v: want 3 first (batches running) and 0 last", codes)
	}
	plain := filepath.Join(dir, "out.jsonl")
	decompressZstd(t, out, plain)
	checkOutput(t, plain, ids)
}

// TestLogsAreJSONWhenNotATerminal: with stderr redirected every log line is
// a JSON object, and events carry job, chunk and batch ids.
func TestLogsAreJSONWhenNotATerminal(t *testing.T) {
	t.Parallel() // its own state directory (and emulator)
	dir := t.TempDir()
	in, _ := writeInput(t, dir, 30)
	r := runSluice(t, stateEnv(dir), "run", in, "--out", filepath.Join(dir, "o.jsonl"), "--max-batch-requests", "10")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	events := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(r.stderr))
	n := 0
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", sc.Text())
		}
		n++
		msg, _ := m["message"].(string)
		events[msg] = true
		if msg == "batch submitted" && (m["job"] == nil || m["chunk"] == nil || m["batch_id"] == nil) {
			t.Errorf("batch submitted without job/chunk/batch_id: %v", m)
		}
	}
	for _, want := range []string{"batch submitted", "batch finished", "job done"} {
		if !events[want] {
			t.Errorf("no %q event among %d log lines", want, n)
		}
	}
}

// TestSecretsNeverWritten runs with a key and greps every log line, the
// output and the database for it.
func TestSecretsNeverWritten(t *testing.T) {
	t.Parallel() // its own emulator and state directory
	const key = "sk-SECRET-d0c5a3b1e8f7"
	emu := startEmulator(t, "--http-fault-rate", "0.2", "--retry-after", "20ms", "--seed", "3")
	dir := t.TempDir()
	in, _ := writeInput(t, dir, 20)
	env := append(stateEnv(dir), "OPENAI_API_KEY="+key, "OPENAI_BASE_URL=http://"+emu.addr+"/v1")
	r := runSluice(t, env, "run", in, "--out", filepath.Join(dir, "o.jsonl"), "--provider", "openai", "--log-level", "debug", "--rate", "-1",
		"--poll-interval", "20ms", "--max-poll-interval", "100ms")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	// A refused key's 401 echoes part of it: still never printed whole.
	strict := startEmulatorEnv(t, []string{"SLUICE_EMULATOR_API_KEY=sk-the-right-one"})
	bad := runSluice(t, append(stateEnv(dir), "OPENAI_API_KEY="+key, "OPENAI_BASE_URL=http://"+strict.addr+"/v1"),
		"run", in, "--out", filepath.Join(dir, "o2.jsonl"), "--provider", "openai", "--job", "other", "--log-level", "debug")
	if bad.code != 1 || !strings.Contains(bad.stderr, "401") {
		t.Errorf("a refused key: exit %d, %q; want 1 and the 401", bad.code, bad.stderr)
	}
	for name, s := range map[string]string{"stdout": r.stdout + bad.stdout, "stderr": r.stderr + bad.stderr} {
		if strings.Contains(s, key) || strings.Contains(s, key[3:]) {
			t.Errorf("the key appears in %s", name)
		}
	}
	filepath.Walk(filepath.Join(dir, "state"), func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return nil
		}
		b, _ := os.ReadFile(p)
		if strings.Contains(string(b), key) {
			t.Errorf("the key is stored in %s", p)
		}
		return nil
	})
	db, err := sql.Open("sqlite3", filepath.Join(dir, "state", "sluice.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var hits int
	db.QueryRowContext(context.Background(), `SELECT
		(SELECT COUNT(*) FROM jobs WHERE id||provider||input||model||limits||dir||output LIKE '%'||?||'%') +
		(SELECT COUNT(*) FROM chunks WHERE file_id||batch_id||batch_status||last_error||path LIKE '%'||?||'%')`, key, key).Scan(&hits)
	if hits != 0 {
		t.Errorf("the key is in %d database rows", hits)
	}
}

func TestSecondRunOnLockedJobFailsFast(t *testing.T) {
	emu := startEmulator(t, "--batch-time", "3s")
	dir := t.TempDir()
	in, _ := writeInput(t, dir, 10)
	env := append(stateEnv(dir), "OPENAI_API_KEY=sk-x", "OPENAI_BASE_URL=http://"+emu.addr+"/v1")
	first := sluiceCmd(env, "run", in, "--out", filepath.Join(dir, "o.jsonl"), "--provider", "openai")
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { first.Process.Kill(); first.Wait() }()
	// Wait until the first run holds the job's lock (its pid is in the file).
	deadline := time.Now().Add(10 * time.Second)
	for {
		locks, _ := filepath.Glob(filepath.Join(dir, "state", "locks", "*.lock"))
		if len(locks) == 1 {
			if b, _ := os.ReadFile(locks[0]); strings.TrimSpace(string(b)) == itoa(first.Process.Pid) {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the first run never took the lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	r := runSluice(t, env, "run", in, "--out", filepath.Join(dir, "o.jsonl"), "--provider", "openai")
	if r.code != 1 || !strings.Contains(r.stderr, "pid "+itoa(first.Process.Pid)) {
		t.Fatalf("second run: exit %d, %q; want 1 naming pid %d", r.code, r.stderr, first.Process.Pid)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the locked run took %v to fail", d)
	}
}

func TestStatusJSON(t *testing.T) {
	t.Parallel() // its own state directory (and emulator)
	dir := t.TempDir()
	in, _ := writeInput(t, dir, 30)
	if r := runSluice(t, stateEnv(dir), "run", in, "--out", filepath.Join(dir, "o.jsonl"), "--max-batch-requests", "10"); r.code != 0 {
		t.Fatalf("run: %d %s", r.code, r.stderr)
	}
	// From another directory, with only the environment to find the state.
	cmd := sluiceCmd(stateEnv(dir), "status", "--json")
	cmd.Dir = os.TempDir()
	b, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Jobs []struct {
			ID       string
			State    string
			Requests map[string]int64
			Chunks   map[string]int
		}
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("status --json: %v\n%s", err, b)
	}
	if len(doc.Jobs) != 1 || doc.Jobs[0].State != "done" || doc.Jobs[0].Requests["succeeded"] != 30 || doc.Jobs[0].Chunks["done"] < 3 {
		t.Errorf("status = %+v", doc)
	}
}

func itoa(n int) string { return fmtInt(n) }
