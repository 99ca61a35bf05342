package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runSluiceWithin is runSluice that kills sluice after limit: a run that
// would loop for ever fails the test instead of hanging it.
func runSluiceWithin(t *testing.T, limit time.Duration, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = sluiceCmd(env).Env
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("sluice %s did not end within %v\nstderr (tail):\n%s", strings.Join(args, " "), limit, lastBytes(se.String(), 2000))
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run sluice: %v", err)
	}
	return result{code: code, stdout: so.String(), stderr: se.String()}
}

func lastBytes(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// writeProseInput writes n chat requests of one model, each a paragraph of
// English: the provider counts about 12-20% more tokens than sluice's
// estimate on such text (the emulator counts body bytes / 4).
func writeProseInput(t *testing.T, dir string, n int) (string, []string) {
	t.Helper()
	const para = "The committee met on a grey morning to review the quarterly figures, and after a long discussion about shipping delays, " +
		"staffing and the price of paper, it agreed to postpone the decision until the auditors had finished their report on the northern branch."
	var b strings.Builder
	var ids []string
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("p%04d", i)
		ids = append(ids, id)
		fmt.Fprintf(&b, `{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"%d. %s"}]}}`+"\n", id, i, para)
	}
	p := filepath.Join(dir, "prose.jsonl")
	writeFile(t, p, []byte(b.String()))
	return p, ids
}

// TestEnqueuedTokenBudgetCutsChunks (issue 11, item 5): with the provider's
// enqueued-token limit at 2,000 and --max-enqueued-tokens 2000 (the
// README's example, scaled down), chunks are cut to fit the budget; the
// job completes without a batch refused for the limit.
func TestEnqueuedTokenBudgetCutsChunks(t *testing.T) {
	t.Parallel()
	emu := startEmulator(t, "--enqueued-token-limit", "2000", "--batch-time", "300ms")
	dir := t.TempDir()
	in, ids := writeProseInput(t, dir, 60)
	out := filepath.Join(dir, "out.jsonl")
	env := append(stateEnv(dir), "OPENAI_API_KEY=sk-x", "OPENAI_BASE_URL=http://"+emu.addr+"/v1")
	r := runSluiceWithin(t, 90*time.Second, env, "run", in, "--out", out, "--provider", "openai", "--max-enqueued-tokens", "2000",
		"--rate", "-1", "--poll-interval", "50ms", "--max-poll-interval", "200ms")
	if r.code != 0 {
		t.Fatalf("run: exit %d\n%s", r.code, lastBytes(r.stderr, 3000))
	}
	checkOutput(t, out, ids)
	if st := emu.stats(t); st["batches_failed"] != 0 || st["batches_created"] < 2 {
		t.Errorf("emulator %v: want several batches, none failed for the token limit", st)
	}
	p := runSluice(t, env, "plan", in, "--provider", "openai", "--json")
	var plan planJSON
	if err := json.Unmarshal([]byte(p.stdout), &plan); err != nil {
		t.Fatalf("plan --json: %v\n%s", err, p.stdout)
	}
	for _, c := range plan.Chunks {
		if c.EstTokens > 1600 {
			t.Errorf("chunk %d has %d estimated tokens, over 80%% of the 2,000 budget", c.ID, c.EstTokens)
		}
	}
	if text := runSluice(t, env, "plan", in, "--provider", "openai"); !strings.Contains(text.stdout, "1,600 est. tokens") {
		t.Errorf("plan does not show the per-chunk token limit (80%% of 2,000):\n%s", text.stdout)
	}
}

// TestChunkAloneOverProviderLimitEnds (issue 11, item 5): a chunk the
// provider refuses for its enqueued-token limit while it is the job's only
// batch of its model is not resubmitted for ever: after a few refusals
// its requests fail with token_limit_exceeded and a message saying what
// to do, and the run ends (exit 4).
func TestChunkAloneOverProviderLimitEnds(t *testing.T) {
	t.Parallel()
	emu := startEmulator(t, "--enqueued-token-limit", "500")
	dir := t.TempDir()
	in, ids := writeProseInput(t, dir, 20)
	out := filepath.Join(dir, "out.jsonl")
	env := append(stateEnv(dir), "OPENAI_API_KEY=sk-x", "OPENAI_BASE_URL=http://"+emu.addr+"/v1")
	r := runSluiceWithin(t, 90*time.Second, env, "run", in, "--out", out, "--provider", "openai",
		"--rate", "-1", "--poll-interval", "20ms", "--max-poll-interval", "50ms")
	if r.code != exitFailures {
		t.Fatalf("run: exit %d, want 4\n%s", r.code, lastBytes(r.stderr, 3000))
	}
	for _, l := range checkOutput(t, out, ids) {
		if l.Error == nil || l.Error.Code != "token_limit_exceeded" || !strings.Contains(l.Error.Message, "--max-enqueued-tokens") {
			t.Fatalf("%s: %+v, want a token_limit_exceeded error saying what to do", l.CustomID, l.Error)
		}
	}
	if st := emu.stats(t); st["batches_created"] != 3 {
		t.Errorf("%d batches created, want 3 (refused 3 times, then given up)", st["batches_created"])
	}
}
