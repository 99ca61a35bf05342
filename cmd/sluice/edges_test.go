package main

// End-to-end tests of the edges a new user hits first (issue 11): each one
// drives the real binary from a fresh state directory.

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runSluiceFor is runSluice with a time limit: a run still going after d
// is killed and the test fails (a run that never ends is the bug).
func runSluiceFor(t *testing.T, d time.Duration, env []string, args ...string) result {
	t.Helper()
	w := startWorkerProc(t, env, args...)
	select {
	case <-w.done:
		return result{code: w.code, stdout: w.stdout.String(), stderr: w.stderr.String()}
	case <-time.After(d):
		w.kill()
		t.Fatalf("sluice %s still running after %v; stderr (last 2000 bytes):\n%s", strings.Join(args, " "), d, tail(w.stderr.String(), 2000))
		return result{}
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// writeCloudflareInput writes n Workers AI requests.
func writeCloudflareInput(t *testing.T, dir string, n int) (string, []string) {
	t.Helper()
	return writeRequests(t, filepath.Join(dir, "cf.jsonl"), n, func(i int) (string, string) {
		id := fmt.Sprintf("cf-%04d", i)
		return id, fmt.Sprintf(`{"custom_id":%q,"method":"POST","url":"/ai/run/@cf/meta/llama-3.3-70b-instruct-fp8-fast","body":{"prompt":"hello %d","max_tokens":16}}`, id, i)
	})
}

func cloudflareEnv(dir string) []string {
	return append(stateEnv(dir), "CLOUDFLARE_API_TOKEN=cf-test-token", "CLOUDFLARE_ACCOUNT_ID=acct1")
}

// Item 1: the Cloudflare provider finishes from a fresh state directory.
func TestCloudflareFromFreshState(t *testing.T) {
	t.Parallel() // its own state directory (and emulator)
	emu := startEmulator(t, "--batch-time", "100ms")
	dir := t.TempDir()
	in, ids := writeCloudflareInput(t, dir, 12)
	out := filepath.Join(dir, "out.jsonl")
	r := runSluiceFor(t, 90*time.Second, cloudflareEnv(dir), "run", in, "--out", out, "--provider", "cloudflare",
		"--base-url", "http://"+emu.addr+"/client/v4", "--poll-interval", "20ms", "--max-poll-interval", "100ms", "--rate", "-1")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, tail(r.stderr, 3000))
	}
	checkOutput(t, out, ids)
}

// Item 1: a failure of our own disk while polling stops the run (exit 1)
// with a message naming the path, instead of retrying the poll for ever.
func TestLocalDiskFailureWhilePollingStops(t *testing.T) {
	t.Parallel() // its own state directory (and emulator)
	emu := startEmulator(t, "--batch-time", "50ms")
	dir := t.TempDir()
	in, _ := writeCloudflareInput(t, dir, 4)
	// STATE/tmp, where the Cloudflare client keeps a poll's answer, is a
	// regular file: nothing can be written under it.
	state := filepath.Join(dir, "state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(state, "tmp"), []byte("not a directory\n"))
	r := runSluiceFor(t, 90*time.Second, cloudflareEnv(dir), "run", in, "--out", filepath.Join(dir, "out.jsonl"),
		"--provider", "cloudflare", "--base-url", "http://"+emu.addr+"/client/v4", "--poll-interval", "20ms",
		"--max-poll-interval", "50ms", "--rate", "-1")
	if r.code != 1 {
		t.Fatalf("exit %d, want 1\n%s", r.code, tail(r.stderr, 3000))
	}
	if !strings.Contains(r.stderr, filepath.Join(state, "tmp")) {
		t.Errorf("the error does not name %s:\n%s", filepath.Join(state, "tmp"), tail(r.stderr, 2000))
	}
}

// Item 4: a base URL on a closed port ends with exit 1 once --http-max-wait
// is spent on connection failures, naming the URL and what failed.
func TestDeadEndpointExits1(t *testing.T) {
	t.Parallel() // its own state directory (and emulator)
	addr := refusingAddr(t)
	dir := t.TempDir()
	in, _ := writeInput(t, dir, 6)
	env := append(stateEnv(dir), "OPENAI_API_KEY=sk-test")
	r := runSluiceFor(t, 90*time.Second, env, "run", in, "--out", filepath.Join(dir, "out.jsonl"), "--provider", "openai",
		"--base-url", "http://"+addr+"/v1", "--http-max-wait", "1s", "--poll-interval", "50ms", "--max-poll-interval", "200ms")
	if r.code != 1 {
		t.Fatalf("exit %d, want 1\n%s", r.code, tail(r.stderr, 3000))
	}
	last := lastLine(r.stderr)
	if !strings.Contains(last, "http://"+addr+"/v1") || !strings.Contains(last, "connection refused") {
		t.Errorf("the last message does not name the URL and the failure: %s", last)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

// Item 3: --out naming the input, by any path, is refused before anything
// is written, and the input is left as it was.
func TestOutputIsInputRefused(t *testing.T) {
	t.Parallel() // its own state directory (and emulator)
	dir := t.TempDir()
	in, _ := writeInput(t, dir, 5)
	orig, _ := os.ReadFile(in)
	sym := filepath.Join(dir, "link.jsonl")
	if err := os.Symlink(in, sym); err != nil {
		t.Fatal(err)
	}
	hard := filepath.Join(dir, "hard.jsonl")
	if err := os.Link(in, hard); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "sub")
	os.Mkdir(sub, 0o700)
	for name, out := range map[string]string{
		"same path": in, "symlink": sym, "hard link": hard, "relative": "sub/../in.jsonl",
	} {
		t.Run(name, func(t *testing.T) {
			cmd := sluiceCmd(stateEnv(dir), "run", in, "--out", out)
			cmd.Dir = dir
			var se bytes.Buffer
			cmd.Stderr = &se
			code, _ := procExit(cmd.Run())
			if code != 2 {
				t.Errorf("exit %d, want 2\n%s", code, se.String())
			}
			if !strings.Contains(se.String(), "input") {
				t.Errorf("the error does not say the output is the input: %s", se.String())
			}
			if now, _ := os.ReadFile(in); !bytes.Equal(now, orig) {
				t.Fatalf("the input was changed")
			}
		})
	}
	if jobs := statusOf(t, stateEnv(dir)).Jobs; len(jobs) != 0 {
		t.Errorf("a refused run planned %d jobs", len(jobs))
	}
}

// Item 3: what can be checked before planning is checked before planning:
// the output's directory, the key, the account, the base URL.
func TestPreflightBeforePlanning(t *testing.T) {
	t.Parallel() // its own state directory (and emulator)
	dir := t.TempDir()
	in, _ := writeInput(t, dir, 5)
	notDir := filepath.Join(dir, "file")
	writeFile(t, notDir, []byte("x"))
	cf, _ := writeCloudflareInput(t, dir, 2)
	clean := func(env []string) []string {
		// The test process may have provider variables of its own.
		out := append([]string(nil), env...)
		for _, k := range []string{"OPENAI_API_KEY", "AZURE_OPENAI_API_KEY", "AZURE_OPENAI_BASE_URL", "CLOUDFLARE_API_TOKEN", "CLOUDFLARE_ACCOUNT_ID"} {
			out = append(out, k+"=")
		}
		return out
	}
	cases := []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"missing output dir", nil, []string{"run", in, "--out", filepath.Join(dir, "nope", "out.jsonl")}, filepath.Join(dir, "nope")},
		{"output dir is a file", nil, []string{"run", in, "--out", filepath.Join(notDir, "out.jsonl")}, notDir},
		{"output is a directory", nil, []string{"run", in, "--out", dir}, dir},
		{"missing key", nil, []string{"run", in, "--out", filepath.Join(dir, "o.jsonl"), "--provider", "openai"}, "OPENAI_API_KEY"},
		{"missing base URL", []string{"AZURE_OPENAI_API_KEY=k"}, []string{"run", in, "--out", filepath.Join(dir, "o.jsonl"), "--provider", "azure"}, "AZURE_OPENAI_BASE_URL"},
		{"missing account", []string{"CLOUDFLARE_API_TOKEN=t"}, []string{"run", cf, "--out", filepath.Join(dir, "o.jsonl"), "--provider", "cloudflare"}, "CLOUDFLARE_ACCOUNT_ID"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := append(clean(stateEnv(dir)), c.env...)
			r := runSluice(t, env, c.args...)
			if r.code != 2 {
				t.Errorf("exit %d, want 2\n%s", r.code, r.stderr)
			}
			if !strings.Contains(r.stderr, c.want) {
				t.Errorf("the error does not name %s:\n%s", c.want, r.stderr)
			}
			if strings.Contains(r.stderr, "job planned") {
				t.Errorf("the job was planned before the check:\n%s", r.stderr)
			}
			if jobs := statusOf(t, stateEnv(dir)).Jobs; len(jobs) != 0 {
				t.Errorf("a refused run left %d jobs", len(jobs))
			}
		})
	}
}

// Item 7: every way of misusing the command line, and bad input, exits 2.
func TestExitCodesMatchReadme(t *testing.T) {
	t.Parallel() // its own state directory (and emulator)
	dir := t.TempDir()
	in, _ := writeInput(t, dir, 3)
	empty := filepath.Join(dir, "empty.jsonl")
	writeFile(t, empty, nil)
	// A gzip stream cut in the middle.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	orig, _ := os.ReadFile(in)
	for i := 0; i < 200; i++ {
		zw.Write(orig)
	}
	zw.Close()
	cut := filepath.Join(dir, "cut.jsonl.gz")
	writeFile(t, cut, gz.Bytes()[:gz.Len()/2])
	out := filepath.Join(dir, "out.jsonl")
	for _, c := range []struct {
		name string
		args []string
	}{
		{"unknown flag", []string{"run", in, "--out", out, "--no-such-flag"}},
		{"unknown command", []string{"frobnicate"}},
		{"missing argument", []string{"run", "--out", out}},
		{"too many arguments", []string{"run", in, in, "--out", out}},
		{"missing --out", []string{"run", in}},
		{"bad flag value", []string{"run", in, "--out", out, "--concurrency", "many"}},
		{"missing input file", []string{"run", filepath.Join(dir, "nope.jsonl"), "--out", out}},
		{"empty input", []string{"run", empty, "--out", out}},
		{"truncated gzip", []string{"run", cut, "--out", out}},
		{"plan empty input", []string{"plan", empty}},
		{"status unknown flag", []string{"status", "--bogus"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := runSluice(t, stateEnv(dir), c.args...)
			if r.code != 2 {
				t.Errorf("exit %d, want 2\n%s", r.code, r.stderr)
			}
			if strings.Count(r.stderr, "Usage:") > 0 && !strings.Contains(r.stderr, "Error") {
				t.Errorf("usage shown without the error:\n%s", r.stderr)
			}
		})
	}
}

// Item 7: --version names the module version and the commit.
func TestVersion(t *testing.T) {
	r := runSluice(t, nil, "--version")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	if !strings.HasPrefix(r.stdout, "sluice ") || !(strings.Contains(r.stdout, "(devel)") || strings.Contains(r.stdout, "v")) {
		t.Errorf("--version: %q", r.stdout)
	}
	if !strings.Contains(r.stdout, "go1.") {
		t.Errorf("--version does not name the Go version: %q", r.stdout)
	}
	// The commit is the one the build info carries (go build stamps it
	// unless -buildvcs=false), else the version says it is unknown.
	info, err := exec.Command("go", "version", "-m", binary).Output()
	if err != nil {
		t.Fatal(err)
	}
	commit := ""
	for _, l := range strings.Split(string(info), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "build" && strings.HasPrefix(f[1], "vcs.revision=") {
			commit = strings.TrimPrefix(f[1], "vcs.revision=")
		}
	}
	if commit == "" && !strings.Contains(r.stdout, "commit unknown") {
		t.Errorf("no commit in the build info, but --version does not say so: %q", r.stdout)
	}
	if commit != "" && !strings.Contains(r.stdout, commit) {
		t.Errorf("--version does not name commit %s: %q", commit, r.stdout)
	}
}

// Item 7 and 11: run --help lists the exit codes; plan --help lists only
// the flags plan takes.
func TestHelpTexts(t *testing.T) {
	r := runSluice(t, nil, "run", "--help")
	for _, want := range []string{"Exit codes", "0 ", "1 ", "2 ", "3 ", "4 "} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("run --help lacks %q", want)
		}
	}
	p := runSluice(t, nil, "plan", "--help")
	if p.code != 0 {
		t.Fatalf("plan --help: exit %d", p.code)
	}
	for _, runOnly := range []string{"--max-live-batches", "--max-attempts", "--out", "--concurrency", "--deadline"} {
		if strings.Contains(p.stdout, runOnly+" ") {
			t.Errorf("plan --help lists the run-only flag %s", runOnly)
		}
	}
	for _, planFlag := range []string{"--provider", "--max-batch-bytes", "--skip-invalid", "--json"} {
		if !strings.Contains(p.stdout, planFlag) {
			t.Errorf("plan --help lacks %s", planFlag)
		}
	}
}

// Item 7: Ctrl-C twice stops with work left: exit 3, not 1 with "context
// canceled"; the same command then finishes.
func TestCtrlCTwiceExits3(t *testing.T) {
	t.Parallel() // its own state directory (and emulator)
	// Every call takes 1.5s: the second signal, 700ms after the first,
	// finds calls in flight to cancel.
	emu, dir, in, ids, out := emulatorJob(t, 24, "out.jsonl", "--batch-time", "500ms", "--slow-rate", "1", "--slow-delay", "1500ms")
	env := append(stateEnv(dir), "OPENAI_API_KEY=sk-test", "OPENAI_BASE_URL=http://"+emu.addr+"/v1")
	args := []string{"run", in, "--out", out, "--provider", "openai", "--max-batch-requests", "10", "--poll-interval", "50ms",
		"--max-poll-interval", "100ms", "--rate", "-1", "--reconcile-grace", "1s"}
	cmd := sluiceCmd(env, args...)
	var se lockedBuffer
	cmd.Stderr = &se
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	// Uploaded: the creates (1.5s each) are in flight.
	for !strings.Contains(se.String(), "chunk uploaded") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGINT)
	time.Sleep(700 * time.Millisecond) // a second signal counts after 500ms
	cmd.Process.Signal(syscall.SIGINT)
	code, _ := procExit(cmd.Wait())
	if code != 3 {
		t.Fatalf("exit %d after two Ctrl-C, want 3\n%s", code, tail(se.String(), 3000))
	}
	if strings.Contains(lastLine(se.String()), "context canceled") {
		t.Errorf("the last word is %q", lastLine(se.String()))
	}
	if !strings.Contains(se.String(), "cancelling calls in flight") {
		t.Errorf("the second signal did not cancel calls in flight:\n%s", tail(se.String(), 3000))
	}
	r := runSluiceFor(t, 120*time.Second, env, args...)
	if r.code != 0 {
		t.Fatalf("the re-run: exit %d\n%s", r.code, tail(r.stderr, 3000))
	}
	checkOutput(t, out, ids)
}

var _ = json.Marshal

// Item 8: --skip-invalid accounts for every input line. Each rejected line
// is in the errors file with its line number, custom_id (when readable)
// and reason; those with a custom_id are in the output too, in input
// order, as invalid_request errors; the summary counts them; exit 4. A
// later run without --skip-invalid says the plan was made with it.
func TestSkipInvalidAccountsForEveryLine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var b []byte
	type want struct {
		line     string
		id       string // "" when none can be read
		rejected bool
	}
	// The rejected lines by line number: the line, and the custom_id its
	// output line holds ("" when there is none).
	rejected := map[int]want{
		1: {`{"custom_id":"q01","method":"POST","url":"/v1/chat/completions"}`, "q01", true}, // rejected first: before any valid request
		5: {`{"custom_id":"q05","method":"GET","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini"}}`, "q05", true},
		9: {"this is not json", "", true},
		// A duplicate of line 2's custom_id: line 2 holds it in the output.
		14: {`{"custom_id":"q02","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[]}}`, "", true},
		20: {`{"custom_id":"q20","method":"POST","url":"/v1/nowhere","body":{"model":"gpt-4o-mini"}}`, "q20", true}, // rejected last: after every valid request
	}
	var wants []want
	for i := 1; i <= 20; i++ {
		w, bad := rejected[i]
		if !bad {
			w.id = fmt.Sprintf("q%02d", i)
			w.line = fmt.Sprintf(`{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi %d"}]}}`, w.id, i)
		}
		b = append(b, w.line+"\n"...)
		wants = append(wants, w)
	}
	in := filepath.Join(dir, "in.jsonl")
	writeFile(t, in, b)
	out := filepath.Join(dir, "out.jsonl")
	r := runSluiceFor(t, 90*time.Second, stateEnv(dir), "run", in, "--out", out, "--skip-invalid")
	if r.code != 4 {
		t.Fatalf("exit %d, want 4 (finished with rejected lines)\n%s", r.code, tail(r.stderr, 3000))
	}
	var ids []string
	for _, w := range wants {
		if w.id != "" {
			ids = append(ids, w.id)
		}
	}
	lines := checkOutput(t, out, ids) // every line with a custom_id, in input order
	k := 0
	for _, w := range wants {
		if w.id == "" {
			continue
		}
		o := lines[k]
		k++
		if w.rejected != (o.Error != nil && o.Error.Code == "invalid_request") {
			t.Errorf("output line for %s: rejected %v, got %+v", w.id, w.rejected, o.Error)
		}
		if !w.rejected && o.Response == nil {
			t.Errorf("output line for %s has no response", w.id)
		}
	}
	// The errors file has every rejected line, with its line number.
	errLines := readJSONL[errorsLine](t, filepath.Join(dir, "out.errors.jsonl"))
	wantLines := []int64{1, 5, 9, 14, 20}
	if len(errLines) != len(wantLines) {
		t.Fatalf("errors file has %d lines, want %d:\n%+v", len(errLines), len(wantLines), errLines)
	}
	for i, e := range errLines {
		w := wants[wantLines[i]-1]
		if e.Error.Line != wantLines[i] || e.CustomID != w.id || e.Error.Code != "invalid_request" || e.Error.Message == "" {
			t.Errorf("errors line %d: %+v (custom_id %q), want line %d custom_id %q", i+1, e.Error, e.CustomID, wantLines[i], w.id)
		}
	}
	if !strings.Contains(errLines[2].Error.Message, "column 1") || !strings.Contains(errLines[3].Error.Message, "duplicate") {
		t.Errorf("reasons: %q, %q", errLines[2].Error.Message, errLines[3].Error.Message)
	}
	if !strings.Contains(r.stdout, "20 input lines") || !strings.Contains(r.stdout, "15 succeeded") || !strings.Contains(r.stdout, "5 rejected") {
		t.Errorf("the summary does not count every line:\n%s", r.stdout)
	}
	// The same command without --skip-invalid reuses the plan, and says so.
	r = runSluiceFor(t, 60*time.Second, stateEnv(dir), "run", in, "--out", out)
	if r.code != 4 {
		t.Errorf("re-run without --skip-invalid: exit %d, want 4\n%s", r.code, tail(r.stderr, 2000))
	}
	if !strings.Contains(r.stderr, "planned with --skip-invalid") {
		t.Errorf("the re-run does not say the plan was made with --skip-invalid:\n%s", tail(r.stderr, 2000))
	}
	checkOutput(t, out, ids)
	if st := runSluice(t, stateEnv(dir), "status"); !strings.Contains(st.stdout, "5 rejected as invalid") {
		t.Errorf("status does not count the rejected lines:\n%s", st.stdout)
	}
}

// Item 11: the small things a new user reads first.
func TestFirstHourMessages(t *testing.T) {
	t.Parallel() // its own state directory (and emulator)
	dir := t.TempDir()
	// The plan of a one-chunk Cloudflare file: singular nouns, the exact
	// byte limit.
	cf, _ := writeCloudflareInput(t, dir, 1)
	r := runSluice(t, cloudflareEnv(dir), "plan", cf, "--provider", "cloudflare")
	if r.code != 0 {
		t.Fatalf("plan: exit %d\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, "1 request in 1 chunk,") {
		t.Errorf("plan does not say \"1 request in 1 chunk\":\n%s", r.stdout)
	}
	if !strings.Contains(r.stdout, "9,999,999 bytes") || strings.Contains(r.stdout, "10.00 MB") {
		t.Errorf("the 9,999,999-byte limit is not shown exactly:\n%s", r.stdout)
	}
	// A line that starts with a bare word: the column of the word.
	bad := filepath.Join(dir, "bad.jsonl")
	writeFile(t, bad, []byte("this is not json\n"))
	r = runSluice(t, stateEnv(dir), "plan", bad)
	if r.code != 2 || !strings.Contains(r.stderr, "bad.jsonl:1: invalid JSON at column 1: invalid literal \"this\"") {
		t.Errorf("exit %d: %s", r.code, r.stderr)
	}
	// An error names its path once.
	empty := filepath.Join(dir, "empty.jsonl")
	writeFile(t, empty, nil)
	r = runSluice(t, stateEnv(dir), "run", empty, "--out", filepath.Join(dir, "o.jsonl"))
	if r.code != 2 || strings.Count(r.stderr, empty) != 1 {
		t.Errorf("exit %d, the path should appear once: %s", r.code, r.stderr)
	}
}

// Item 11: the emulator's banner gives every family's base URL, one line
// each.
func TestEmulatorBannerNamesEveryFamily(t *testing.T) {
	cmd := exec.Command(binary, "emulate", "--addr", "127.0.0.1:0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var banner []string
	timeout := time.After(30 * time.Second)
	for len(banner) < 4 {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("emulate ended; banner so far: %q", banner)
			}
			banner = append(banner, l)
		case <-timeout:
			t.Fatalf("banner so far: %q", banner)
		}
	}
	addr := strings.Fields(banner[0][strings.Index(banner[0], "http://")+len("http://"):])[0]
	u := "http://" + addr
	for i, want := range []string{"OPENAI_BASE_URL=" + u + "/v1", "ANTHROPIC_BASE_URL=" + u, "CLOUDFLARE_BASE_URL=" + u + "/client/v4"} {
		if !strings.Contains(banner[i+1], want) {
			t.Errorf("banner line %d is %q, want %s", i+2, banner[i+1], want)
		}
	}
	// Each URL answers as its family's API.
	for path, wantStatus := range map[string]int{"/v1/batches": 200, "/v1/messages/batches": 200} {
		req, _ := http.NewRequest("GET", u+path, nil)
		req.Header.Set("Authorization", "Bearer x")
		req.Header.Set("x-api-key", "x")
		req.Header.Set("anthropic-version", "2023-06-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != wantStatus {
			t.Errorf("GET %s: %d", path, resp.StatusCode)
		}
	}
}

// Item 11: a batch cancelled while validating (it ran nothing, and its
// files have no line) gives its requests batch_cancelled, not
// missing_result.
func TestCancelWhileValidatingSaysCancelled(t *testing.T) {
	t.Parallel() // its own state directory (and emulator)
	emu, dir, in, ids, out := emulatorJob(t, 9, "out.jsonl", "--stuck-rate", "1", "--stuck-phase", "validating")
	base := "http://" + emu.addr + "/v1"
	env := append(stateEnv(dir), "OPENAI_API_KEY=sk-x")
	r := runSluiceFor(t, 60*time.Second, env, "run", in, "--out", out, "--provider", "openai", "--base-url", base, "--once", "--rate", "-1")
	if r.code != exitStopped {
		t.Fatalf("run --once: exit %d, want 3\n%s", r.code, r.stderr)
	}
	job := onlyJob(t, statusOf(t, env))
	r = runSluiceFor(t, 60*time.Second, env, "cancel", job.ID, "--base-url", base, "--poll-interval", "50ms", "--max-poll-interval", "100ms")
	if r.code != exitFailures {
		t.Fatalf("cancel: exit %d, want 4\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	for _, l := range checkOutput(t, out, ids) {
		if l.Error == nil || l.Error.Code != "batch_cancelled" {
			t.Errorf("%s: %+v, want error batch_cancelled", l.CustomID, l.Error)
		}
	}
}

// Item 11: --provider local takes the lines of every family its emulator
// serves (OpenAI, Anthropic, Cloudflare) in one job; a provider of one
// family names itself, and the one to use, when it refuses another's.
func TestLocalServesEveryFamily(t *testing.T) {
	t.Parallel() // its own state directory (and emulator)
	dir := t.TempDir()
	var b []byte
	var ids []string
	for i := 0; i < 40; i++ {
		id := fmt.Sprintf("mix_%03d", i)
		ids = append(ids, id)
		switch i % 4 {
		case 0:
			b = fmt.Appendf(b, `{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"q %d"}]}}`+"\n", id, i)
		case 1:
			b = fmt.Appendf(b, `{"custom_id":%q,"method":"POST","url":"/v1/messages","body":{"model":"claude-3-5-haiku-latest","max_tokens":16,"messages":[{"role":"user","content":"q %d"}]}}`+"\n", id, i)
		case 2:
			b = fmt.Appendf(b, `{"custom_id":%q,"method":"POST","url":"/v1beta/models/gemini-2.5-flash:generateContent","body":{"contents":[{"role":"user","parts":[{"text":"q %d"}]}]}}`+"\n", id, i)
		default:
			b = fmt.Appendf(b, `{"custom_id":%q,"method":"POST","url":"/ai/run/@cf/meta/llama-3.3-70b-instruct-fp8-fast","body":{"prompt":"q %d","max_tokens":16}}`+"\n", id, i)
		}
	}
	in := filepath.Join(dir, "mixed.jsonl")
	writeFile(t, in, b)
	out := filepath.Join(dir, "out.jsonl")
	r := runSluiceFor(t, 90*time.Second, stateEnv(dir), "run", in, "--out", out, "--max-batch-requests", "4", "--local-batch-time", "100ms")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, tail(r.stderr, 3000))
	}
	for _, l := range checkOutput(t, out, ids) {
		if l.Error != nil || l.Response == nil || l.Response.StatusCode != 200 {
			t.Errorf("%s: %+v", l.CustomID, l)
		}
	}
	// Every chunk's body is whole the first time: no create is refused and
	// nothing is retried (the emulator injects no faults here).
	if strings.Contains(r.stderr, "create batch refused") || strings.Contains(r.stdout, "retried") {
		t.Errorf("a chunk was refused or retried:\n%s\n%s", r.stdout, tail(r.stderr, 3000))
	}
	cf, _ := writeCloudflareInput(t, dir, 2)
	r = runSluice(t, stateEnv(dir), "plan", cf, "--provider", "openai")
	if r.code != 2 || !strings.Contains(r.stderr, "provider openai") || !strings.Contains(r.stderr, "--provider cloudflare") {
		t.Errorf("exit %d: %s", r.code, r.stderr)
	}
	gdir := t.TempDir()
	gm, _ := writeGeminiInput(t, gdir, 2)
	r = runSluice(t, stateEnv(gdir), "plan", gm, "--provider", "openai")
	if r.code != 2 || !strings.Contains(r.stderr, "--provider gemini") {
		t.Errorf("gemini lines on openai: exit %d: %s", r.code, r.stderr)
	}
	emb := filepath.Join(dir, "emb.jsonl")
	writeFile(t, emb, []byte(`{"custom_id":"e1","method":"POST","url":"/v1/embeddings","body":{"model":"text-embedding-3-small","input":"x"}}`+"\n"))
	for _, prov := range []string{"anthropic", "cloudflare", "gemini"} {
		r = runSluice(t, stateEnv(dir), "plan", emb, "--provider", prov)
		if r.code != 2 || !strings.Contains(r.stderr, "--provider openai") {
			t.Errorf("%s: exit %d: %s", prov, r.code, r.stderr)
		}
	}
}

// Item 11: a mixed-family job on --provider local survives SIGKILLs at
// random moments: the same command then finishes with every line once, in
// order.
func TestLocalMixedSurvivesKills(t *testing.T) {
	t.Parallel() // its own state directory (and emulator)
	dir := t.TempDir()
	var b []byte
	var ids []string
	for i := 0; i < 90; i++ {
		id := fmt.Sprintf("k_%03d", i)
		ids = append(ids, id)
		switch i % 3 {
		case 0:
			b = fmt.Appendf(b, `{"custom_id":%q,"method":"POST","url":"/v1/embeddings","body":{"model":"text-embedding-3-small","input":"d %d"}}`+"\n", id, i)
		case 1:
			b = fmt.Appendf(b, `{"custom_id":%q,"method":"POST","url":"/v1/messages","body":{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"q %d"}]}}`+"\n", id, i)
		default:
			b = fmt.Appendf(b, `{"custom_id":%q,"method":"POST","url":"/ai/run","body":{"model":"@cf/baai/bge-small-en-v1.5","text":["d %d"]}}`+"\n", id, i)
		}
	}
	in := filepath.Join(dir, "mixed.jsonl")
	writeFile(t, in, b)
	out := filepath.Join(dir, "out.jsonl")
	args := []string{"run", in, "--out", out, "--max-batch-requests", "6", "--local-batch-time", "3s", "--poll-interval", "20ms", "--max-poll-interval", "60ms"}
	// Every kill comes well before a batch made in the same run can end
	// (3 s), so the first runs cannot finish by themselves and the kills
	// land however fast or loaded the machine is.
	kills := killRuns(t, func() *exec.Cmd { return sluiceCmd(stateEnv(dir), args...) }, 12,
		func(i int) time.Duration { return time.Duration(100+(i%6)*110) * time.Millisecond })
	r := runSluiceFor(t, 120*time.Second, stateEnv(dir), args...)
	if r.code != 0 {
		t.Fatalf("final run after %d kills: exit %d\n%s", kills, r.code, tail(r.stderr, 3000))
	}
	for _, l := range checkOutput(t, out, ids) {
		if l.Error != nil {
			t.Errorf("%s: %+v", l.CustomID, l.Error)
		}
	}
	t.Logf("%d kills landed", kills)
	if kills < 4 {
		t.Errorf("only %d kills landed", kills)
	}
}
