package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// Where features of issue 21 meet (found by the QA pass over the merged
// result), through the real binary against `sluice emulate`.

// longPrompts is six chat lines, q0 to q5, whose prompts are long enough
// for the emulator to answer with many tokens (so that a max_tokens of 5
// shows), and their custom_ids.
func longPrompts() (*strings.Builder, []string) {
	var b strings.Builder
	var ids []string
	for i := 0; i < 6; i++ {
		ids = append(ids, fmt.Sprintf("q%d", i))
		fmt.Fprintf(&b, `{"custom_id":"q%d","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"prompt %d: %s"}]}}`+"\n",
			i, i, strings.Repeat("a long enough prompt to answer with many tokens ", 8))
	}
	return &b, ids
}

// completionTokens is usage.completion_tokens of a chat.completion body.
func completionTokens(t *testing.T, body []byte) int {
	t.Helper()
	var b struct {
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		t.Fatal(err)
	}
	return b.Usage.CompletionTokens
}

// TestReuseHonoursDefaultMaxTokens: --default-max-tokens changes what is
// sent for a translated chat line that sets no max_tokens, so an answer
// bought under one value is not reused for a job under another (it would
// be an answer to another request: cut at 5 tokens where 64 were asked);
// under the same value it is.
func TestReuseHonoursDefaultMaxTokens(t *testing.T) {
	t.Parallel()
	emu := startEmulator(t)
	dir := t.TempDir()
	env := []string{"ANTHROPIC_API_KEY=sk-ant-test"}
	b, ids := longPrompts()
	run := func(name, maxTokens string) (result, []int) {
		t.Helper()
		in := filepath.Join(dir, name+".jsonl")
		writeFile(t, in, []byte(b.String()))
		out := filepath.Join(dir, name+".out.jsonl")
		r := runSluice(t, env, "run", in, "--out", out, "--state", filepath.Join(dir, "state"), "--provider", "anthropic",
			"--base-url", "http://"+emu.addr, "--model-map", "gpt-4o-mini=claude-haiku-4-5", "--default-max-tokens", maxTokens,
			"--poll-interval", "50ms", "--max-poll-interval", "200ms")
		if r.code != 0 {
			t.Fatalf("%s: exit %d\n%s", name, r.code, r.stderr)
		}
		var got []int
		for _, l := range checkOutput(t, out, ids) {
			got = append(got, completionTokens(t, l.Response.Body))
		}
		return r, got
	}
	run("five", "5")
	r, got := run("sixtyfour", "64")
	for i, n := range got {
		if n <= 5 {
			t.Errorf("--default-max-tokens 64: line %d answered with %d completion tokens: the answer bought under --default-max-tokens 5 was reused\n%s", i, n, r.stdout)
		}
	}
	r, _ = run("fiveagain", "5")
	if !strings.Contains(r.stdout, "reused: 6 requests") {
		t.Errorf("the same --default-max-tokens again reused nothing:\n%s", r.stdout)
	}
}

// TestSplitsAreNotRetries: chunks the provider refuses for its
// enqueued-token limit while alone are split, which spends no attempt
// (docs/contract.md); the summary and status then report no request
// retried, where they said "60 retried in N retry batches" of a job in
// which nothing failed.
func TestSplitsAreNotRetries(t *testing.T) {
	t.Parallel()
	emu := startEmulator(t, "--enqueued-token-limit", "1500", "--batch-time", "300ms")
	dir := t.TempDir()
	var b strings.Builder
	var ids []string
	for i := 0; i < 60; i++ {
		ids = append(ids, fmt.Sprintf("c-%d", i))
		fmt.Fprintf(&b, `{"custom_id":"c-%d","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","max_tokens":64,"messages":[{"role":"user","content":"L-%05d %s"}]}}`+"\n",
			i, i, strings.Repeat("lorem ipsum dolor sit amet ", 7))
	}
	in, out, state := filepath.Join(dir, "in.jsonl"), filepath.Join(dir, "out.jsonl"), filepath.Join(dir, "state")
	writeFile(t, in, []byte(b.String()))
	r := runSluice(t, []string{"OPENAI_API_KEY=x"}, "run", in, "--out", out, "--state", state,
		"--provider", "openai", "--base-url", "http://"+emu.addr+"/v1",
		"--poll-interval", "50ms", "--max-poll-interval", "200ms", "--deadline", "50s")
	if r.code != 0 {
		t.Fatalf("exit %d, want 0\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	checkOutput(t, out, ids)
	if emu.stats(t)["batches_failed"] == 0 {
		t.Fatal("the emulator refused no batch: nothing was split, the test proves nothing")
	}
	if strings.Contains(r.stdout, "retried") {
		t.Errorf("a job whose batches were only split reports retries:\n%s", r.stdout)
	}
	st := runSluice(t, nil, "status", "--state", state)
	if strings.Contains(st.stdout, "retried in") {
		t.Errorf("status reports retries of a job whose batches were only split:\n%s", st.stdout)
	}
	// The job's recorded summary counts no retry batch either.
	js := runSluice(t, nil, "status", "--state", state, "--json")
	var doc statusDoc
	if err := json.Unmarshal([]byte(js.stdout), &doc); err != nil || len(doc.Jobs) != 1 || doc.Jobs[0].Summary == nil {
		t.Fatalf("status --json: %v\n%s", err, js.stdout)
	}
	if n := doc.Jobs[0].Summary.RetryBatches; n != 0 {
		t.Errorf("the job's summary counts %d retry batches; its batches were only split", n)
	}
}

// TestReplanKeepsDefaultMaxTokensInReuseKey: a job planned with
// --default-max-tokens 5 and nothing submitted, run again with only its
// --model-map changed, is planned again keeping its 5; its ledger keys
// must be those of 5 too. They were taken from the command's flags (no
// --default-max-tokens), so the job reused answers bought without the
// flag while it would have sent max_tokens 5 (found in review).
func TestReplanKeepsDefaultMaxTokensInReuseKey(t *testing.T) {
	t.Parallel()
	emu := startEmulator(t)
	dir := t.TempDir()
	env := []string{"GEMINI_API_KEY=test"}
	b, ids := longPrompts()
	state := filepath.Join(dir, "state")
	common := []string{"--state", state, "--provider", "gemini", "--base-url", "http://" + emu.addr + "/gemini"}
	// An earlier job, without --default-max-tokens, buys long answers.
	y := filepath.Join(dir, "y.jsonl")
	writeFile(t, y, []byte(b.String()))
	if r := runSluice(t, env, append([]string{"run", y, "--out", filepath.Join(dir, "y.out.jsonl"), "--model-map", "gpt-4o-mini=gemini-2.5-flash",
		"--poll-interval", "50ms", "--max-poll-interval", "200ms"}, common...)...); r.code != 0 {
		t.Fatalf("first job: exit %d\n%s", r.code, r.stderr)
	}
	// Job x planned with --default-max-tokens 5 under another map.
	x := filepath.Join(dir, "x.jsonl")
	writeFile(t, x, []byte(b.String()))
	if r := runSluice(t, env, append([]string{"plan", x, "--job", "x", "--model-map", "gpt-4o-mini=gemini-2.5-pro", "--default-max-tokens", "5"}, common...)...); r.code != 0 {
		t.Fatalf("plan: exit %d\n%s", r.code, r.stderr)
	}
	// Run with the first job's map: x is planned again, keeping its 5.
	out := filepath.Join(dir, "x.out.jsonl")
	r := runSluice(t, env, append([]string{"run", x, "--job", "x", "--out", out, "--model-map", "gpt-4o-mini=gemini-2.5-flash",
		"--poll-interval", "50ms", "--max-poll-interval", "200ms"}, common...)...)
	if r.code != 0 {
		t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "--model-map") {
		t.Errorf("the run did not say it planned the job again for its --model-map:\n%s", r.stderr)
	}
	for i, l := range checkOutput(t, out, ids) {
		if n := completionTokens(t, l.Response.Body); n > 5 {
			t.Errorf("line %d: %d completion tokens: an answer bought without --default-max-tokens was reused for a job planned with 5\n%s",
				i, n, r.stdout)
		}
	}
}
