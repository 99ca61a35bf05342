package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-batch/sluice/internal/gen/corpus"
	"github.com/sluice-batch/sluice/internal/testsrv"
)

// runSluiceWithin is runSluiceFor: a run that would loop for ever fails
// the test instead of hanging it.
func runSluiceWithin(t *testing.T, limit time.Duration, env []string, args ...string) result {
	t.Helper()
	return runSluiceFor(t, limit, env, args...)
}

// exampleJob starts an emulator with emuArgs and copies the example input
// to a temporary directory (copyExample), the output to be out.jsonl there.
func exampleJob(t *testing.T, emuArgs ...string) (emu *emulatorProc, dir, in string, ids []string, out string) {
	t.Helper()
	emu = startEmulator(t, emuArgs...)
	dir = t.TempDir()
	in, ids = copyExample(t, dir)
	return emu, dir, in, ids, filepath.Join(dir, "out.jsonl")
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
	return writeRequests(t, filepath.Join(dir, "prose.jsonl"), n, func(i int) (string, string) {
		id := fmt.Sprintf("p%04d", i)
		return id, fmt.Sprintf(`{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"%d. %s"}]}}`, id, i, para)
	})
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

// TestEnqueuedTokenLimitEqualToBudgetFinishes (issue 21, item 3): the
// README's --max-enqueued-tokens 2000 on examples/requests.jsonl against
// a provider whose limit is 2,000 and which counts tokens its own way (the
// emulator: body bytes / 4, about 2.3 times sluice's estimate here). A
// batch refused for the limit while it is alone is split and its halves
// resubmitted, the rest of the model's chunks are cut by the ratio that
// taught, and the job ends exit 0 with every request succeeded (before:
// exit 4, 176 of 240 failed token_limit_exceeded). On SQLite and on
// PostgreSQL (the trackers record the splits alike).
func TestEnqueuedTokenLimitEqualToBudgetFinishes(t *testing.T) {
	t.Parallel()
	for _, db := range []string{"sqlite", "postgres"} {
		t.Run(db, func(t *testing.T) {
			t.Parallel()
			var dbArgs []string
			if db == "postgres" {
				dbArgs = []string{"--db", testsrv.Postgres(t)}
			}
			emu, dir, in, ids, out := exampleJob(t, "--enqueued-token-limit", "2000", "--batch-time", "300ms")
			env := append(stateEnv(dir), "OPENAI_API_KEY=sk-x", "SLUICE_DB=")
			r := runSluiceWithin(t, 90*time.Second, env, append([]string{"run", in, "--out", out, "--provider", "openai",
				"--base-url", "http://" + emu.addr + "/v1", "--max-enqueued-tokens", "2000",
				"--rate", "-1", "--poll-interval", "50ms", "--max-poll-interval", "200ms"}, dbArgs...)...)
			if r.code != 0 {
				t.Fatalf("run: exit %d, want 0\n%s", r.code, lastBytes(r.stderr, 3000))
			}
			wantAllSucceeded(t, out, ids)
			st := emu.stats(t)
			if st["batches_failed"] == 0 {
				t.Fatalf("emulator %v: no batch was refused for the token limit: the test proves nothing", st)
			}
			// One refusal alone per model teaches the ratio: the model's
			// other chunks are cut by it before they are sent, not each
			// refused in turn. Here that is 3: gpt-4.1-nano's first chunk
			// (59 requests) is refused beside its one-request chunk, waits
			// for that to end, and is refused alone and split;
			// gpt-4o-mini's first chunk is refused once and split; the
			// embeddings fit. A batch admitted beside a refused one is no
			// probe, however late its create returns: were the refused
			// chunk sent again beside it, that was a 4th refusal (under
			// load, before the fix).
			if st["batches_failed"] > 3 {
				t.Errorf("%d batches refused for the token limit; want at most 3 (one alone per model that needs it, and gpt-4.1-nano's first chunk once beside its small one)", st["batches_failed"])
			}
		})
	}
}

// TestEnqueuedTokenBudgetMultilingualFinishes (issue 21, item 3): the
// generator's multilingual lines (English, accents, CJK, emoji, escapes),
// on which the emulator counts about 1.3 times sluice's estimate, under a
// budget equal to the provider's limit: exit 0, every request succeeded
// (before: exit 4, 444 of 600 failed).
func TestEnqueuedTokenBudgetMultilingualFinishes(t *testing.T) {
	t.Parallel()
	emu := startEmulator(t, "--enqueued-token-limit", "10000", "--batch-time", "300ms")
	dir := t.TempDir()
	var buf bytes.Buffer
	g := corpus.New(corpus.Options{Seed: 1, Models: 1, MaxLine: 1200})
	for i := 0; i < 600; i++ {
		buf.Write(g.Next())
	}
	in := filepath.Join(dir, "multilingual.jsonl")
	writeFile(t, in, buf.Bytes())
	ids := customIDs(t, buf.Bytes())
	out := filepath.Join(dir, "out.jsonl")
	env := append(stateEnv(dir), "OPENAI_API_KEY=sk-x")
	r := runSluiceWithin(t, 90*time.Second, env, "run", in, "--out", out, "--provider", "openai",
		"--base-url", "http://"+emu.addr+"/v1", "--max-enqueued-tokens", "10000",
		"--rate", "-1", "--poll-interval", "50ms", "--max-poll-interval", "200ms")
	if r.code != 0 {
		t.Fatalf("run: exit %d, want 0\n%s", r.code, lastBytes(r.stderr, 3000))
	}
	wantAllSucceeded(t, out, ids)
	if st := emu.stats(t); st["batches_failed"] == 0 {
		t.Fatalf("emulator %v: no batch was refused for the token limit: the test proves nothing", st)
	}
}

// TestRequestAloneOverProviderLimitFails (issue 21, item 3; issue 11,
// item 5): a request the provider counts over its enqueued-token limit by
// itself is not resubmitted for ever, and only it fails: its batch is
// split until it is alone, sent a few times, then it fails with
// token_limit_exceeded and a message saying that this request alone is
// over the provider's limit (not to set the flag that was set), while the
// requests batched with it succeed. Exit 4.
func TestRequestAloneOverProviderLimitFails(t *testing.T) {
	t.Parallel()
	emu := startEmulator(t, "--enqueued-token-limit", "500")
	dir := t.TempDir()
	in, ids := writeProseInput(t, dir, 20)
	// The big one: ~1,000 tokens as the emulator counts (bytes / 4), over
	// its 500 by itself.
	big := `{"custom_id":"big","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"` +
		strings.Repeat("summarise the quarterly figures ", 125) + `"}]}}` + "\n"
	b, err := os.ReadFile(in)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	writeFile(t, in, []byte(strings.Join(lines[:7], "")+big+strings.Join(lines[7:], "")))
	ids = append(ids[:7], append([]string{"big"}, ids[7:]...)...)
	out := filepath.Join(dir, "out.jsonl")
	env := append(stateEnv(dir), "OPENAI_API_KEY=sk-x", "OPENAI_BASE_URL=http://"+emu.addr+"/v1")
	r := runSluiceWithin(t, 90*time.Second, env, "run", in, "--out", out, "--provider", "openai", "--max-enqueued-tokens", "500",
		"--rate", "-1", "--poll-interval", "20ms", "--max-poll-interval", "50ms")
	if r.code != exitFailures {
		t.Fatalf("run: exit %d, want 4\n%s", r.code, lastBytes(r.stderr, 3000))
	}
	for _, l := range checkOutput(t, out, ids) {
		switch {
		case l.CustomID == "big":
			if l.Error == nil || l.Error.Code != "token_limit_exceeded" || !strings.Contains(l.Error.Message, "this request alone") ||
				strings.Contains(l.Error.Message, "--max-enqueued-tokens") {
				t.Errorf("big: %+v, want token_limit_exceeded saying this request alone is over the limit, not to set the flag", l.Error)
			}
		case l.Error != nil || l.Response == nil || l.Response.StatusCode != 200:
			t.Errorf("%s: %+v, want a 200 answer", l.CustomID, l.Error)
		}
	}
}

// customIDs returns the custom_id of every line of an input.
// copyExample copies examples/requests.jsonl into dir: its path there and
// its custom_ids.
func copyExample(t *testing.T, dir string) (string, []string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "examples", "requests.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(dir, "requests.jsonl")
	writeFile(t, in, b)
	return in, customIDs(t, b)
}

func customIDs(t *testing.T, b []byte) []string {
	t.Helper()
	var ids []string
	for _, l := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
		var v struct {
			CustomID string `json:"custom_id"`
		}
		if err := json.Unmarshal(l, &v); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, v.CustomID)
	}
	return ids
}

// wantAllSucceeded checks the output has every custom_id once, in order,
// each answered 200.
func wantAllSucceeded(t *testing.T, out string, ids []string) {
	t.Helper()
	bad := 0
	for _, l := range checkOutput(t, out, ids) {
		if l.Error != nil || l.Response == nil || l.Response.StatusCode != 200 {
			if bad++; bad <= 3 {
				t.Errorf("%s: %+v, want a 200 answer", l.CustomID, l.Error)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d requests did not succeed", bad, len(ids))
	}
}

// TestOnceRunsSplitRefusedBatches (issue 21, item 3): run from cron with
// --once, each run polls batches an earlier run submitted. Whether a batch
// refused for the enqueued-token limit was alone is then read from the
// tracker (no other batch of its model live or ended since it was
// submitted), so it is split there too, and what its refusal taught is
// taken back from the tracker by each later run: the job ends, exit 0,
// every request succeeded (before: the refused batches were sent again on
// every run, for ever).
func TestOnceRunsSplitRefusedBatches(t *testing.T) {
	t.Parallel()
	// Batches take 1s: a --once run has ended before the provider refuses
	// the batch it submitted.
	emu, dir, in, ids, out := exampleJob(t, "--enqueued-token-limit", "2000", "--batch-time", "1s")
	env := append(stateEnv(dir), "OPENAI_API_KEY=sk-x")
	// Runs one after the other, as a tight cron would: each does what is
	// ready and exits 3 while work is left.
	deadline := time.Now().Add(60 * time.Second)
	for run := 1; ; run++ {
		if time.Now().After(deadline) {
			t.Fatalf("the job did not end in %d --once runs (60s); emulator %v", run-1, emu.stats(t))
		}
		r := runSluiceWithin(t, 60*time.Second, env, "run", in, "--out", out, "--provider", "openai",
			"--base-url", "http://"+emu.addr+"/v1", "--max-enqueued-tokens", "2000", "--once", "--rate", "-1")
		if r.code == 0 {
			break
		}
		if r.code != 3 {
			t.Fatalf("--once run %d: exit %d, want 0 or 3 (work left)\n%s", run, r.code, lastBytes(r.stderr, 3000))
		}
	}
	wantAllSucceeded(t, out, ids)
	st := emu.stats(t)
	if st["batches_failed"] == 0 {
		t.Fatalf("emulator %v: no batch was refused for the token limit: the test proves nothing", st)
	}
}

// TestKilledWhileSplittingResumes (issue 21, item 3): sluice killed -9 as it
// splits a refused batch (its new chunk files being written, or just
// recorded) resumes with the same command and ends exit 0, every request
// answered once, none run twice at the provider.
func TestKilledWhileSplittingResumes(t *testing.T) {
	t.Parallel()
	emu, dir, in, ids, out := exampleJob(t, "--enqueued-token-limit", "2000", "--batch-time", "300ms")
	env := append(stateEnv(dir), "OPENAI_API_KEY=sk-x")
	args := []string{"run", in, "--out", out, "--provider", "openai", "--base-url", "http://" + emu.addr + "/v1",
		"--max-enqueued-tokens", "2000", "--rate", "-1", "--poll-interval", "50ms", "--max-poll-interval", "200ms",
		"--reconcile-grace", "1s"}
	killWhenLog(t, sluiceCmd(env, args...), "split", 60*time.Second, func(se string) bool {
		return strings.Contains(se, "limit by itself; split")
	})
	r := runSluiceWithin(t, 90*time.Second, env, args...)
	if r.code != 0 {
		t.Fatalf("resumed run: exit %d, want 0\n%s", r.code, lastBytes(r.stderr, 3000))
	}
	wantAllSucceeded(t, out, ids)
	if st := emu.stats(t); st["requests_processed_more_than_once"] != 0 {
		t.Errorf("emulator %v: requests run more than once", st)
	}
}
