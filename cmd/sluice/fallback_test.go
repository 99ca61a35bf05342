package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/internal/testsrv"
)

// The realtime fallback (--fallback realtime, --fallback-at): issue 23,
// part 4. docs/crash-safety.md, "The realtime fallback"; docs/money.md.

// writeFallbackInput writes n chat requests of one model and returns the path
// and the custom_ids.
// The first small of them set max_tokens 50; the others none.
func writeFallbackInput(t *testing.T, dir string, n, small int) (string, []string) {
	t.Helper()
	return writeRequests(t, filepath.Join(dir, "in.jsonl"), n, func(i int) (string, string) {
		id := fmt.Sprintf("q%04d", i)
		max := ""
		if i < small {
			max = `,"max_tokens":50`
		}
		return id, fmt.Sprintf(`{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini"%s,"messages":[{"role":"user","content":"question %d"}]}}`, id, max, i)
	})
}

// fallbackJob starts an emulator with emuArgs and writes
// writeFallbackInput's n requests (small of them bounded) in a temporary
// directory, the output to be out.jsonl there.
func fallbackJob(t *testing.T, n, small int, emuArgs ...string) (emu *emulatorProc, dir, in string, ids []string, out string) {
	t.Helper()
	emu = startEmulator(t, emuArgs...)
	dir = t.TempDir()
	in, ids = writeFallbackInput(t, dir, n, small)
	return emu, dir, in, ids, filepath.Join(dir, "out.jsonl")
}

// fallbackBatchTime and fallbackAfter are the --batch-time and the
// fallbackIn of the tests of a fallback from stuck batches: the fallback
// begins 6s after the run starts, while the batches (created within ~1s,
// even under load) are mid-run: the emulator runs a batch's lines from 10%
// of --batch-time (2s after its create) to 90% (18s; Anthropic from 0% to
// 100%), so each has finished a line or two (about a fifth, as
// TestFallbackSpendCapStops needs) and not the rest, with 3s to spare for
// a slow create. It was 40s and 12s: the ratio is what matters, and a
// cancel takes a tenth of --batch-time.
const (
	fallbackBatchTime = "20s"
	fallbackAfter     = 6 * time.Second
)

// fallbackArgs is a run against emu whose batches take far longer than
// the deadline allows: the fallback begins after ~fallbackIn, while the
// three batches are mid-run (the emulator's in_progress is 10% to 90% of
// --batch-time), so each has finished some lines and not the rest.
func fallbackArgs(emu *emulatorProc, in, out string, start time.Time, fallbackIn time.Duration, extra ...string) []string {
	return fallbackRunArgs(in, out, start, fallbackIn, append([]string{"--provider", "openai", "--base-url", "http://" + emu.addr + "/v1"}, extra...)...)
}

// fallbackRunArgs is the run of fallbackArgs with the provider flags in
// extra: batches of 10, quick polls, a deadline 3 minutes from start and
// the fallback to realtime at start+fallbackIn.
func fallbackRunArgs(in, out string, start time.Time, fallbackIn time.Duration, extra ...string) []string {
	return append([]string{"run", in, "--out", out,
		"--rate", "-1", "--max-batch-requests", "10", "--poll-interval", "100ms", "--max-poll-interval", "300ms",
		"--deadline", start.Add(3 * time.Minute).UTC().Format(time.RFC3339),
		"--fallback", "realtime", "--fallback-at", start.Add(fallbackIn).UTC().Format(time.RFC3339Nano)}, extra...)
}

// checkChatCompletions checks the output has every id once, in order, each
// answered 200 with a chat.completion.
func checkChatCompletions(t *testing.T, out string, ids []string) {
	t.Helper()
	for _, o := range checkOutput(t, out, ids) {
		var cc struct {
			Object string `json:"object"`
		}
		if o.Error != nil || o.Response == nil || o.Response.StatusCode != 200 ||
			json.Unmarshal(o.Response.Body, &cc) != nil || cc.Object != "chat.completion" {
			t.Errorf("%s: %+v %+v, want a 200 chat.completion", o.CustomID, o.Error, o.Response)
		}
	}
}

// checkFellBack checks the emulator's counts after a fallback of 30
// requests in three batches: the three cancelled, all 30 executed, some
// (not all) synchronously, none twice.
func checkFellBack(t *testing.T, emu *emulatorProc) {
	t.Helper()
	st := emu.stats(t)
	t.Logf("batches created %d, cancelled %d; executed %d, synchronously %d", st["batches_created"], st["batches_cancelled"], st["requests_processed"], st["sync_requests"])
	if st["batches_cancelled"] != 3 || st["requests_processed"] != 30 || st["sync_requests"] == 0 || st["sync_requests"] == 30 ||
		st["requests_processed_more_than_once"] != 0 {
		t.Errorf("%d batches cancelled, %d executed (%d synchronously), %d twice: want 3, 30 (some, not all), 0",
			st["batches_cancelled"], st["requests_processed"], st["sync_requests"], st["requests_processed_more_than_once"])
	}
}

// TestFallbackRealtimeAnswersStuckBatches: three batches still running at
// --fallback-at are cancelled, every line they finished is kept, and only
// the requests without a result are sent to POST /v1/chat/completions:
// the output is complete and in order, and the emulator executed no
// request twice.
func TestFallbackRealtimeAnswersStuckBatches(t *testing.T) {
	t.Parallel()
	emu, dir, in, ids, out := fallbackJob(t, 30, 0, "--batch-time", fallbackBatchTime)
	env := append(stateEnv(dir), "OPENAI_API_KEY=sk-x")
	r := runSluice(t, env, fallbackArgs(emu, in, out, time.Now(), fallbackAfter)...)
	if r.code != exitOK {
		t.Fatalf("exit %d, want 0\n%s", r.code, tail(r.stderr, 3000))
	}
	for i, l := range checkOutput(t, out, ids) {
		if l.Error != nil || l.Response == nil || l.Response.StatusCode != 200 {
			t.Errorf("output line %d (%s) is not a success: %+v", i+1, l.CustomID, l.Error)
		}
	}
	st := emu.stats(t)
	batchLines := st["requests_processed"] - st["sync_requests"]
	t.Logf("batches created %d, cancelled %d; lines answered by the batches %d, by the synchronous API %d",
		st["batches_created"], st["batches_cancelled"], batchLines, st["sync_requests"])
	if st["batches_created"] != 3 || st["batches_cancelled"] != 3 {
		t.Errorf("%d batches created, %d cancelled; want 3 and 3", st["batches_created"], st["batches_cancelled"])
	}
	if st["requests_processed_more_than_once"] != 0 || st["requests_processed"] != 30 {
		t.Errorf("%d requests executed, %d of them again; want 30 and 0", st["requests_processed"], st["requests_processed_more_than_once"])
	}
	if batchLines <= 0 || st["sync_requests"] <= 0 {
		t.Errorf("%d lines kept from the cancelled batches and %d synchronous calls: want both > 0", batchLines, st["sync_requests"])
	}
	job := onlyJob(t, statusOf(t, env))
	if job.State != sluice.JobDone {
		t.Errorf("job %s, want done", job.State)
	}
}

// TestFallbackKilledMidFallbackNoSecondPurchase: a run SIGKILLed while
// its synchronous calls are in flight, run again with the same command,
// finishes the job without buying any request twice: the calls whose
// answer the kill lost fail with realtime_unknown, every other request
// succeeds, the output is complete and in order.
// On SQLite and on PostgreSQL (SLUICE_DB).
func TestFallbackKilledMidFallbackNoSecondPurchase(t *testing.T) {
	t.Parallel()
	t.Run("sqlite", func(t *testing.T) { t.Parallel(); testFallbackKilled(t, "") })
	t.Run("postgres", func(t *testing.T) { t.Parallel(); testFallbackKilled(t, testsrv.Postgres(t)) })
}

func testFallbackKilled(t *testing.T, dsn string) {
	emu, dir, in, ids, out := fallbackJob(t, 30, 0, "--batch-time", fallbackBatchTime, "--sync-delay", "300ms")
	env := append(stateEnv(dir), "OPENAI_API_KEY=sk-x", "SLUICE_DB="+dsn)
	args := fallbackArgs(emu, in, out, time.Now(), fallbackAfter, "--concurrency", "3")
	killWhen(t, sluiceCmd(env, args...), "synchronous calls", func() bool { return emu.stats(t)["sync_requests"] >= 4 })
	before := emu.stats(t)["sync_requests"]
	r := runSluice(t, env, args...)
	if r.code != exitOK && r.code != exitFailures {
		t.Fatalf("run after the kill: exit %d, want 0 or 4\n%s", r.code, tail(r.stderr, 3000))
	}
	st := emu.stats(t)
	if st["sync_requests"] <= before {
		t.Errorf("the run after the kill made no synchronous call (%d before, %d after)", before, st["sync_requests"])
	}
	if st["requests_processed_more_than_once"] != 0 {
		t.Errorf("%d requests executed twice: the resumed fallback bought again", st["requests_processed_more_than_once"])
	}
	n := outcomes(t, checkOutput(t, out, ids), sluice.CodeRealtimeUnknown)
	ok, unknown := n["ok"], n[string(sluice.CodeRealtimeUnknown)]
	t.Logf("%d succeeded, %d realtime_unknown; emulator executed %d (sync %d)", ok, unknown, st["requests_processed"], st["sync_requests"])
	if int64(ok+unknown) != 30 || int64(ok) > st["requests_processed"] {
		t.Errorf("%d succeeded + %d unknown, emulator executed %d", ok, unknown, st["requests_processed"])
	}
	if (unknown == 0) != (r.code == exitOK) {
		t.Errorf("exit %d with %d realtime_unknown", r.code, unknown)
	}
	if errs, err := os.ReadFile(strings.TrimSuffix(out, ".jsonl") + ".errors.jsonl"); err == nil && unknown > 0 && !strings.Contains(string(errs), "realtime_unknown") {
		t.Errorf("errors file does not name realtime_unknown:\n%s", errs)
	}
}

// TestFallbackSpendCapStops: the synchronous calls are priced at the full
// rate (twice the batch price) under --max-cost, and a chunk is sent only
// when its upper bound fits: the unanswered requests of the two cheap
// batches are sent, those of the dear one would pass the cap at the full
// rate (not at the batch price), so the run stops with exit 3, and
// nothing is bought twice.
func TestFallbackSpendCapStops(t *testing.T) {
	t.Parallel()
	emu, dir, in, _, out := fallbackJob(t, 30, 20, "--batch-time", fallbackBatchTime)
	env := append(stateEnv(dir), "OPENAI_API_KEY=sk-x")
	// gpt-4o-mini at the batch price: $0.075 and $0.30 per million input
	// and output tokens. Ten requests with max_tokens 50 are bounded by
	// under $0.0002; ten without, by 16,384 output tokens each: $0.049.
	// The third batch's ~8 unanswered requests at the full rate: $0.079,
	// past $0.06 (at the batch price, $0.039, they would fit).
	r := runSluice(t, env, fallbackArgs(emu, in, out, time.Now(), fallbackAfter, "--max-cost", "0.06")...)
	if r.code != exitStopped || !strings.Contains(r.stderr, "spend cap") {
		t.Fatalf("exit %d, want 3 with the spend cap named\n%s", r.code, tail(r.stderr, 3000))
	}
	st := emu.stats(t)
	t.Logf("batches cancelled %d, executed %d (sync %d)", st["batches_cancelled"], st["requests_processed"], st["sync_requests"])
	if st["batches_cancelled"] != 3 || st["sync_requests"] == 0 || st["requests_processed"] >= 30 {
		t.Errorf("%d batches cancelled, %d synchronous calls, %d requests executed: want 3, > 0 and fewer than 30",
			st["batches_cancelled"], st["sync_requests"], st["requests_processed"])
	}
	if st["requests_processed_more_than_once"] != 0 {
		t.Errorf("%d requests executed twice", st["requests_processed_more_than_once"])
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("an output was written although the cap stopped the run")
	}
}

// TestFallbackStuckBatchGoesRealtime: with --fallback realtime, a batch
// cancelled as stuck (--stuck-after) sends what it did not finish through
// the synchronous API, before --fallback-at, instead of to a new batch.
func TestFallbackStuckBatchGoesRealtime(t *testing.T) {
	t.Parallel()
	emu, dir, in, ids, out := fallbackJob(t, 30, 0, "--stuck-rate", "1", "--stuck-phase", "validating")
	env := append(stateEnv(dir), "OPENAI_API_KEY=sk-x")
	start := time.Now()
	r := runSluice(t, env, fallbackArgs(emu, in, out, start, 2*time.Minute, "--stuck-after", "2s")...)
	if r.code != exitOK {
		t.Fatalf("exit %d, want 0\n%s", r.code, tail(r.stderr, 3000))
	}
	if d := time.Since(start); d > 90*time.Second {
		t.Errorf("took %v: it waited for --fallback-at", d)
	}
	checkOutput(t, out, ids)
	st := emu.stats(t)
	if st["batches_created"] != 3 || st["sync_requests"] != 30 || st["requests_processed_more_than_once"] != 0 {
		t.Errorf("%d batches created, %d synchronous calls, %d executed twice; want 3, 30, 0",
			st["batches_created"], st["sync_requests"], st["requests_processed_more_than_once"])
	}
}

// TestParseFallback: --fallback-at as a clock time, RFC 3339 or a
// duration before --deadline, and the usage errors (exit 2).
func TestParseFallback(t *testing.T) {
	now := time.Date(2026, 11, 27, 1, 0, 0, 0, time.UTC)
	deadline := now.Add(6 * time.Hour) // 07:00
	for _, c := range []struct {
		mode, at string
		deadline time.Time
		want     time.Time // zero with err
		err      string
	}{
		{"", "", deadline, time.Time{}, ""},
		{"realtime", "30m", deadline, deadline.Add(-30 * time.Minute), ""},
		{"realtime", "06:30", deadline, now.Add(5*time.Hour + 30*time.Minute), ""},
		{"realtime", "06:30", time.Time{}, now.Add(5*time.Hour + 30*time.Minute), ""},
		{"realtime", now.Add(time.Hour).Format(time.RFC3339), deadline, now.Add(time.Hour), ""},
		{"", "30m", deadline, time.Time{}, "needs --fallback realtime"},
		{"batch", "30m", deadline, time.Time{}, "want realtime"},
		{"realtime", "", deadline, time.Time{}, "needs --fallback-at"},
		{"realtime", "30m", time.Time{}, time.Time{}, "no --deadline"},
		{"realtime", "07:30", deadline, time.Time{}, "not before --deadline"},
		{"realtime", "soon", deadline, time.Time{}, "want a clock time"},
	} {
		got, err := parseFallback(c.mode, c.at, c.deadline, now)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err) || codeOf(err) != exitUsage):
			t.Errorf("%q %q: %v (exit %d), want a usage error with %q", c.mode, c.at, err, codeOf(err), c.err)
		case c.err == "" && (err != nil || !got.Equal(c.want)):
			t.Errorf("%q %q: %v %v, want %v", c.mode, c.at, got, err, c.want)
		}
	}
}

// TestFallbackHonoursRateLimitHeaders: the synchronous calls follow the
// provider's rate-limit headers (OpenAI: x-ratelimit-remaining-requests
// and -reset-requests; Anthropic: anthropic-ratelimit-requests-remaining
// and -reset): with 5 calls admitted every 2 seconds and 3 in flight at
// once, all 15 are answered (over three windows) and none is refused
// with a 429.
func TestFallbackHonoursRateLimitHeaders(t *testing.T) {
	t.Parallel()
	for _, fam := range []string{"openai", "anthropic"} {
		t.Run(fam, func(t *testing.T) {
			t.Parallel()
			emu, dir, in, ids, out := fallbackJob(t, 15, 30, "--stuck-rate", "1", "--stuck-phase", "validating", "--sync-limit", "5", "--sync-window", "2s") // max_tokens: Anthropic requires it
			env := append(stateEnv(dir), "OPENAI_API_KEY=sk-x", "ANTHROPIC_API_KEY=sk-ant-test", "ANTHROPIC_BASE_URL=http://"+emu.addr)
			args := fallbackArgs(emu, in, out, time.Now(), 2*time.Minute, "--stuck-after", "1s", "--concurrency", "3")
			if fam == "anthropic" {
				args = append(args, "--provider", "anthropic", "--base-url", "http://"+emu.addr, "--model-map", "gpt-4o-mini=claude-haiku-4-5")
			}
			r := runSluice(t, env, args...)
			if r.code != exitOK {
				t.Fatalf("exit %d, want 0\n%s", r.code, tail(r.stderr, 3000))
			}
			checkOutput(t, out, ids)
			st := emu.stats(t)
			if st["sync_requests"] != 15 || st["sync_rate_limited"] != 0 || st["requests_processed_more_than_once"] != 0 {
				t.Errorf("%d synchronous calls answered, %d refused 429, %d executed twice; want 15, 0, 0\n%s",
					st["sync_requests"], st["sync_rate_limited"], st["requests_processed_more_than_once"], tail(r.stderr, 2000))
			}
		})
	}
}

// TestFallbackAnthropic: the Anthropic family falls back to POST
// /v1/messages: OpenAI chat lines translated to Message Batches, three
// batches cancelled at --fallback-at, the rest answered synchronously and
// translated back: every line a chat.completion, in order, none executed
// twice.
func TestFallbackAnthropic(t *testing.T) {
	t.Parallel()
	emu := startEmulator(t, "--batch-time", fallbackBatchTime)
	dir := t.TempDir()
	in, ids, _ := writeChatInput(t, dir, 30, true)
	out := filepath.Join(dir, "out.jsonl")
	env := append(stateEnv(dir), "ANTHROPIC_API_KEY=sk-ant-test", "ANTHROPIC_BASE_URL=http://"+emu.addr)
	r := runSluice(t, env, fallbackRunArgs(in, out, time.Now(), fallbackAfter,
		"--provider", "anthropic", "--model-map", "gpt-4o-mini=claude-haiku-4-5")...)
	if r.code != exitOK {
		t.Fatalf("exit %d, want 0\n%s", r.code, tail(r.stderr, 3000))
	}
	checkChatCompletions(t, out, ids)
	checkFellBack(t, emu)
}

// TestFallbackFamilies: Mistral and Together fall back to their
// OpenAI-shaped POST /v1/chat/completions with each line's body, Gemini to
// models/{model}:generateContent with each line's request (its answer
// translated back to a chat.completion): three batches cancelled at
// --fallback-at, what they finished kept, the rest answered
// synchronously, none executed twice.
func TestFallbackFamilies(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ family, model string }{
		{"mistral", "mistral-small-latest"},
		{"together", "meta-llama/Llama-3.3-70B-Instruct-Turbo"},
		{"gemini", "gemini-2.5-flash"},
	} {
		t.Run(c.family, func(t *testing.T) {
			t.Parallel()
			emu, dir, in, ids, out := fallbackJob(t, 30, 30, "--batch-time", fallbackBatchTime)
			env := stateEnv(dir)
			if c.family == "gemini" {
				env = append(env, geminiEnv(emu.addr, "gm-test")...)
			} else {
				env = append(env, familyEnv(c.family, "k", emu.addr)...)
			}
			r := runSluice(t, env, fallbackRunArgs(in, out, time.Now(), fallbackAfter,
				"--provider", c.family, "--model-map", "gpt-4o-mini="+c.model)...)
			if r.code != exitOK {
				t.Fatalf("exit %d, want 0\n%s", r.code, tail(r.stderr, 3000))
			}
			checkChatCompletions(t, out, ids)
			checkFellBack(t, emu)
		})
	}
}

// TestFallbackCloudflare: Cloudflare cannot cancel a batch, so the one
// batch live at --fallback-at (--max-live-batches 1) runs to its end and
// answers its 10 lines; the two chunks not yet submitted go to the
// synchronous POST /accounts/{account}/ai/run/{model} request by request
// (without their external_reference, their answers translated back to
// chat.completions): every line answered, none executed twice.
func TestFallbackCloudflare(t *testing.T) {
	t.Parallel()
	emu, dir, in, ids, out := fallbackJob(t, 30, 30, "--batch-time", "5s") // live well past --fallback-at (3s)
	env := append(cloudflareEnv(dir), "CLOUDFLARE_BASE_URL=http://"+emu.addr+"/client/v4")
	r := runSluice(t, env, fallbackRunArgs(in, out, time.Now(), 3*time.Second, "--provider", "cloudflare",
		"--model-map", "gpt-4o-mini=@cf/meta/llama-3.3-70b-instruct-fp8-fast", "--max-live-batches", "1")...)
	if r.code != exitOK {
		t.Fatalf("exit %d, want 0\n%s", r.code, tail(r.stderr, 3000))
	}
	checkChatCompletions(t, out, ids)
	st := emu.stats(t)
	t.Logf("batches created %d; executed %d, synchronously %d", st["batches_created"], st["requests_processed"], st["sync_requests"])
	if st["batches_created"] != 1 || st["requests_processed"] != 30 || st["sync_requests"] != 20 ||
		st["requests_processed_more_than_once"] != 0 {
		t.Errorf("%d batches, %d executed (%d synchronously), %d twice: want 1, 30 (20), 0",
			st["batches_created"], st["requests_processed"], st["sync_requests"], st["requests_processed_more_than_once"])
	}
}

// TestFallbackCancelledMidFallback: `sluice cancel` of a job killed during
// its fallback sends nothing more: what the synchronous API answered is
// kept, the call the kill lost is realtime_unknown, the rest is cancelled
// (or batch_cancelled, in retries not yet started), and no request is
// executed twice.
func TestFallbackCancelledMidFallback(t *testing.T) {
	t.Parallel()
	emu, dir, in, ids, out := fallbackJob(t, 30, 0, "--batch-time", fallbackBatchTime, "--sync-delay", "400ms")
	env := append(stateEnv(dir), "OPENAI_API_KEY=sk-x")
	args := fallbackArgs(emu, in, out, time.Now(), fallbackAfter, "--concurrency", "1")
	killWhen(t, sluiceCmd(env, args...), "synchronous calls", func() bool { return emu.stats(t)["sync_requests"] >= 3 })
	job := onlyJob(t, statusOf(t, env))
	before := emu.stats(t)["sync_requests"]
	r := runSluiceFor(t, 60*time.Second, env, "cancel", job.ID, "--base-url", "http://"+emu.addr+"/v1",
		"--poll-interval", "50ms", "--max-poll-interval", "100ms")
	if r.code != exitFailures {
		t.Fatalf("cancel: exit %d, want 4\n%s", r.code, tail(r.stderr, 3000))
	}
	st := emu.stats(t)
	if st["sync_requests"] != before || st["requests_processed_more_than_once"] != 0 {
		t.Errorf("%d synchronous calls after the cancel (%d before), %d executed twice; want none more, 0",
			st["sync_requests"], before, st["requests_processed_more_than_once"])
	}
	codes := outcomes(t, checkOutput(t, out, ids))
	t.Logf("outcomes %v; emulator executed %d", codes, st["requests_processed"])
	// The realtime chunk's unsent requests are cancelled; chunks of retries
	// not yet started keep their last attempt's batch_cancelled.
	if codes["ok"] == 0 || codes["cancelled"] == 0 || codes["ok"]+codes["cancelled"]+codes["batch_cancelled"]+codes["realtime_unknown"] != 30 {
		t.Errorf("outcomes %v: want successes, cancelled, and nothing else but batch_cancelled and realtime_unknown", codes)
	}
}
