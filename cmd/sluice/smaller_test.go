package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The small items of issue 21 (item 7), through the binary.

// asUnprivileged runs cmd as nobody when the tests run as root (whom file
// modes do not stop), from a copy of the binary nobody may execute.
func asUnprivileged(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if os.Geteuid() != 0 {
		return
	}
	dir := openTempDir(t)
	bin := filepath.Join(dir, "sluice")
	src, err := os.Open(binary)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	cmd.Path, cmd.Args[0] = bin, bin
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
}

// openTempDir is a temporary directory anyone may use (t.TempDir's parent
// is private to its owner).
func openTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sluice-open")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestUnreadableInputIsBadInput: an input the user may not read is named
// as the input and exits 2 (bad input), for plan and run.
func TestUnreadableInputIsBadInput(t *testing.T) {
	t.Parallel() // its own state directory (and emulator)
	dir := openTempDir(t)
	in, _ := writeInput(t, dir, 3)
	if err := os.Chmod(in, 0); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"plan", in}, {"run", in, "--out", filepath.Join(dir, "out.jsonl")}} {
		cmd := sluiceCmd(append(stateEnv(dir), "HOME="+dir), args...)
		asUnprivileged(t, cmd)
		var se strings.Builder
		cmd.Stderr = &se
		code, err := procExit(cmd.Run())
		if err != nil {
			t.Fatal(err)
		}
		if code != 2 || !strings.Contains(se.String(), "input: open "+in+": permission denied") {
			t.Errorf("%s: exit %d, want 2 naming the input\n%s", args[0], code, se.String())
		}
	}
}

// TestHTTPMaxWaitBoundsDeadURL: against a base URL that refuses every
// connection, --http-max-wait 3s ends the run (exit 1, the provider named
// unreachable) about 3 s after the first failed call, not after one call's
// retries, the dispatcher's later try and the rate limiter's queue on top
// (19.8 s for 5 s before). Mistral's preset has a rate limit; OpenAI's
// uploads three chunks at once. The bound (2x the flag) is generous: the
// run takes 3.05 s on an idle machine.
func TestHTTPMaxWaitBoundsDeadURL(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in, _ := writeInput(t, dir, 30)
	dead := "http://" + refusingAddr(t)
	for _, prov := range []string{"openai", "mistral"} {
		start := time.Now()
		r := runSluice(t, append(stateEnv(dir), "OPENAI_API_KEY=x", "MISTRAL_API_KEY=x"), "run", in,
			"--out", filepath.Join(dir, prov+".jsonl"), "--provider", prov, "--base-url", dead,
			"--http-max-wait", "3s", "--max-batch-requests", "10")
		took := time.Since(start)
		if r.code != 1 || !strings.Contains(r.stderr, "provider unreachable") {
			t.Fatalf("%s: exit %d\n%s", prov, r.code, r.stderr)
		}
		if took < 3*time.Second || took > 6*time.Second {
			t.Errorf("%s: --http-max-wait 3s returned after %s", prov, took.Round(time.Millisecond))
		}
	}
}

// TestCredentialsAndLocalURLsNamed: a missing key names every variable the
// provider reads (Gemini's two, DeepInfra's two); run --help lists every
// provider's credentials; the local provider's row and its bad-url error
// list the urls of every family it takes, not only OpenAI's.
func TestCredentialsAndLocalURLsNamed(t *testing.T) {
	t.Parallel() // its own state directory (and emulator)
	dir := t.TempDir()
	in, _ := writeInput(t, dir, 2)
	noKeys := append(stateEnv(dir), "GOOGLE_API_KEY=", "GEMINI_API_KEY=", "DEEPINFRA_API_KEY=", "DEEPINFRA_TOKEN=")
	for prov, want := range map[string]string{
		"gemini":    "needs a key in $GOOGLE_API_KEY or $GEMINI_API_KEY",
		"deepinfra": "needs a key in $DEEPINFRA_API_KEY or $DEEPINFRA_TOKEN",
	} {
		r := runSluice(t, noKeys, "run", in, "--out", filepath.Join(dir, prov+".jsonl"), "--provider", prov)
		if r.code != 2 || !strings.Contains(r.stderr, want) {
			t.Errorf("%s without a key: exit %d, want 2 and %q\n%s", prov, r.code, want, r.stderr)
		}
	}
	help := runSluice(t, nil, "run", "--help").stdout
	for _, want := range []string{"gemini      GOOGLE_API_KEY or GEMINI_API_KEY", "mistral     MISTRAL_API_KEY",
		"together    TOGETHER_API_KEY", "deepinfra   DEEPINFRA_API_KEY or DEEPINFRA_TOKEN",
		"cloudflare  CLOUDFLARE_API_TOKEN, and CLOUDFLARE_ACCOUNT_ID", "openai      OPENAI_API_KEY"} {
		if !strings.Contains(help, want) {
			t.Errorf("run --help does not list %q:\n%s", want, help)
		}
	}
	others := []string{"/v1/messages", "/ai/run/{model}", "/v1beta/models/{model}:generateContent"}
	provs := runSluice(t, nil, "providers").stdout
	_, local, _ := strings.Cut(provs, "\n  local ")
	local, _, _ = strings.Cut(local, "\n  mistral")
	bad := filepath.Join(dir, "bad.jsonl")
	writeFile(t, bad, []byte(`{"custom_id":"a","method":"POST","url":"/v2/nope","body":{"model":"m"}}`+"\n"))
	r := runSluice(t, stateEnv(dir), "run", bad, "--out", filepath.Join(dir, "bad.out"))
	for _, u := range others {
		if !strings.Contains(local, u) {
			t.Errorf("providers: the local row does not list %s:\n%s", u, local)
		}
		if r.code != 2 || !strings.Contains(r.stderr, u) {
			t.Errorf("bad url under local: exit %d, the accepted urls lack %s\n%s", r.code, u, r.stderr)
		}
	}
}

// TestProviderFileCleanupIsShown: deleting the job's files at the provider
// after the merge (rate-limited calls for every batch, which took 45 s of a
// run with nothing on screen) is logged when it starts, with the number of
// batches, and when it ends, with how long it took.
func TestProviderFileCleanupIsShown(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in, ids := writeInput(t, dir, 30)
	out := filepath.Join(dir, "out.jsonl")
	r := runSluice(t, stateEnv(dir), "run", in, "--out", out, "--max-batch-requests", "10")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	checkOutput(t, out, ids)
	start := strings.Index(r.stderr, `"batches":3,"concurrency":4,"time"`)
	startMsg := strings.Index(r.stderr, `"message":"deleting the job's files at the provider (each batch's input and result files; the output is written)"`)
	end := strings.Index(r.stderr, `"message":"deleted the job's files at the provider"`)
	if start < 0 || startMsg < start || end < startMsg || !strings.Contains(r.stderr, `"took":`) {
		t.Errorf("the deleting of provider files is not shown as it starts and ends:\n%s", r.stderr)
	}
	if !strings.Contains(r.stdout, " this run, ") {
		t.Errorf("summary without the run's wall time:\n%s", r.stdout)
	}
}

// writeTwoModels writes n chat lines m-0, m-1, ... to in.jsonl in dir:
// line i of model other where i%k is 1, of gpt-4o-mini elsewhere.
func writeTwoModels(t *testing.T, dir string, n, k int, other string) string {
	t.Helper()
	in, _ := writeRequests(t, filepath.Join(dir, "in.jsonl"), n, func(i int) (string, string) {
		model := "gpt-4o-mini"
		if i%k == 1 {
			model = other
		}
		id := fmt.Sprintf("m-%d", i)
		return id, chatLine(id, model, "hello", 16)
	})
	return in
}

// TestModelMapMissWarnedAtPlan: chat lines whose model --model-map does not
// rename are sent as written; the plan warns once per such model, with
// the number of lines and the first file:line, where before only "no price
// for gpt-4.1-nano" hinted at it.
func TestModelMapMissWarnedAtPlan(t *testing.T) {
	t.Parallel() // its own state directory (and emulator)
	dir := t.TempDir()
	in := writeTwoModels(t, dir, 9, 3, "gpt-4.1-nano")
	r := runSluice(t, append(stateEnv(dir), "GEMINI_API_KEY=x"), "plan", in, "--provider", "gemini",
		"--model-map", "gpt-4o-mini=gemini-2.5-flash")
	want := `"model":"gpt-4.1-nano","lines":3,"first":"` + in + `:2"`
	if r.code != 0 || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "which --model-map does not rename") {
		t.Errorf("exit %d; want a warning with %s\n%s", r.code, want, r.stderr)
	}
	if strings.Contains(r.stderr, `"model":"gpt-4o-mini"`) {
		t.Errorf("a mapped model is warned about:\n%s", r.stderr)
	}
}

// TestLogFlagsValidatedEverywhere: a bad --log-level or --log-format is a
// usage error (exit 2 naming the valid values) for every command, not
// only for those that log (status took --log-level verbose). A command
// that took it would run on (emulate serves until killed): each is
// killed after 15 s.
func TestLogFlagsValidatedEverywhere(t *testing.T) {
	t.Parallel() // its own state directory (and emulator)
	dir := t.TempDir()
	run := func(args ...string) (int, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, binary, args...)
		cmd.Env = append(os.Environ(), stateEnv(dir)...)
		var se strings.Builder
		cmd.Stderr = &se
		code, err := procExit(cmd.Run())
		if err != nil {
			t.Fatal(err)
		}
		return code, se.String()
	}
	for _, args := range [][]string{{"status"}, {"status", "--json"}, {"providers"}, {"emulate", "--addr", "127.0.0.1:0"}} {
		code, stderr := run(append(args, "--log-level", "verbose")...)
		if code != 2 || !strings.Contains(stderr, `--log-level "verbose": want debug, info, warn or error`) {
			t.Errorf("%v --log-level verbose: exit %d\n%s", args, code, stderr)
		}
		code, stderr = run(append(args, "--log-format", "xml")...)
		if code != 2 || !strings.Contains(stderr, `--log-format "xml": want auto, json or console`) {
			t.Errorf("%v --log-format xml: exit %d\n%s", args, code, stderr)
		}
	}
}

// TestStatusMoneyEstimateAgrees: status --json's money.est_input_tokens is
// the job's estimate, as its est_input_tokens (it was 0 beside 5,564 for a
// job not run yet: it held the estimate of the requests with usage, now
// money.usage_est_input_tokens).
func TestStatusMoneyEstimateAgrees(t *testing.T) {
	t.Parallel() // its own state directory (and emulator)
	dir := t.TempDir()
	in, _ := writeInput(t, dir, 20)
	if r := runSluice(t, stateEnv(dir), "plan", in); r.code != 0 {
		t.Fatalf("plan: exit %d\n%s", r.code, r.stderr)
	}
	r := runSluice(t, stateEnv(dir), "status", "--json")
	var doc struct {
		Jobs []struct {
			EstTokens int64 `json:"est_input_tokens"`
			Money     struct {
				EstTokens      int64  `json:"est_input_tokens"`
				UsageEstTokens *int64 `json:"usage_est_input_tokens"`
			} `json:"money"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil || len(doc.Jobs) != 1 {
		t.Fatalf("status --json: %v\n%s", err, r.stdout)
	}
	j := doc.Jobs[0]
	if j.EstTokens == 0 || j.Money.EstTokens != j.EstTokens || j.Money.UsageEstTokens == nil || *j.Money.UsageEstTokens != 0 {
		t.Errorf("est_input_tokens %d, money.est_input_tokens %d, money.usage_est_input_tokens %v", j.EstTokens, j.Money.EstTokens, j.Money.UsageEstTokens)
	}
}

// TestMoneyJSONIsDecimal: plan --json and status --json print amounts of
// dollars as decimals of at most 10 places, never float noise (the
// README's example planned at 0.0034045499999999997) nor an exponent.
func TestMoneyJSONIsDecimal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in := "../../examples/requests.jsonl"
	amount := regexp.MustCompile(`"(est_cost|max_cost|actual|committed|cap)(_usd)?": ([^,\n}]+)`)
	decimal := regexp.MustCompile(`^(null|(0|[1-9][0-9]*)(\.[0-9]{0,9}[1-9])?)$`)
	check := func(what, out string) int {
		n := 0
		for _, m := range amount.FindAllStringSubmatch(out, -1) {
			n++
			if !decimal.MatchString(m[3]) {
				t.Errorf("%s: %s is %s, not a decimal of at most 10 places", what, m[1], m[3])
			}
		}
		return n
	}
	r := runSluice(t, stateEnv(dir), "plan", "--json", in)
	if r.code != 0 || check("plan --json", r.stdout) < 4 {
		t.Fatalf("plan --json: exit %d\n%s", r.code, r.stdout)
	}
	r = runSluice(t, stateEnv(dir), "run", in, "--out", filepath.Join(dir, "out.jsonl"))
	if r.code != 0 {
		t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
	}
	if st := runSluice(t, stateEnv(dir), "status", "--json"); check("status --json", st.stdout) < 2 {
		t.Errorf("status --json without amounts:\n%s", st.stdout)
	}
}

// TestLocalBatchTimeKeptBySubmittedBatches: --local-batch-time on a resumed
// run applies to new batches only: batches submitted under 1s finish in
// about 1 s although the resumed run says 10m (before, they took the new
// 10 minutes, and the run stopped at its --deadline with exit 3).
func TestLocalBatchTimeKeptBySubmittedBatches(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in, ids := writeInput(t, dir, 12)
	out := filepath.Join(dir, "out.jsonl")
	args := []string{"run", in, "--out", out, "--max-batch-requests", "4", "--poll-interval", "50ms", "--max-poll-interval", "200ms"}
	r := runSluice(t, stateEnv(dir), append(args, "--local-batch-time", "1s", "--once")...)
	if r.code != 3 {
		t.Fatalf("--once: exit %d, want 3 with the batches running\n%s", r.code, r.stderr)
	}
	r = runSluice(t, stateEnv(dir), append(args, "--local-batch-time", "10m", "--deadline", "30s")...)
	if r.code != 0 {
		t.Fatalf("resumed with --local-batch-time 10m: exit %d, want 0 (the submitted batches keep 1s)\n%s", r.code, r.stderr)
	}
	checkOutput(t, out, ids)
}

// TestForeignModelWarnedWithoutMap: chat lines translated for another
// family, whose model is not one of that family's and no --model-map is
// given at all, are warned of at plan time with a count (they went out as
// written with only "no price for ..." as a hint); lines that name the
// family's own models are not.
func TestForeignModelWarnedWithoutMap(t *testing.T) {
	t.Parallel() // its own state directory (and emulator)
	dir := t.TempDir()
	in := writeTwoModels(t, dir, 6, 2, "claude-haiku-4-5")
	r := runSluice(t, append(stateEnv(dir), "ANTHROPIC_API_KEY=x"), "plan", in, "--provider", "anthropic")
	want := `"model":"gpt-4o-mini","lines":3,"first":"` + in + `:1"`
	if r.code != 0 || !strings.Contains(r.stderr, want) {
		t.Errorf("exit %d; want a warning with %s\n%s", r.code, want, r.stderr)
	}
	if strings.Contains(r.stderr, `"model":"claude-haiku-4-5"`) {
		t.Errorf("a model of the family's own is warned about:\n%s", r.stderr)
	}
}
