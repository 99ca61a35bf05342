package dispatcher_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/dispatcher"
	"github.com/sluice-batch/sluice/emulator"
	"github.com/sluice-batch/sluice/internal/testsrv"
	"github.com/sluice-batch/sluice/lifecycle"
	"github.com/sluice-batch/sluice/merger"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/provider/anthropic"
	"github.com/sluice-batch/sluice/provider/cloudflare"
	"github.com/sluice-batch/sluice/provider/gemini"
	"github.com/sluice-batch/sluice/provider/httpx"
	"github.com/sluice-batch/sluice/provider/mistral"
	"github.com/sluice-batch/sluice/provider/openai"
	"github.com/sluice-batch/sluice/provider/together"
	"github.com/sluice-batch/sluice/tracker"
)

// TestMain runs more tests at once than -parallel's default: each has its
// own emulator and tracker, and most of their time is spent waiting on
// emulated batches and polls, not on the CPU.
func TestMain(m *testing.M) {
	testsrv.Main(m, 8)
}

// rig is one job planned into a real SQLite tracker, with a provider client
// talking over loopback to a real emulator.
type rig struct {
	url  string // the emulator's base URL
	t    *testing.T
	db   *tracker.DB
	job  *sluice.Job
	prov sluice.Provider
	emu  *emulator.Server
	ids  []string // custom_ids in input order
}

// fastRetry keeps HTTP retries quick in tests.
var fastRetry = httpx.Retry{MaxAttempts: 10, BaseDelay: time.Millisecond, MaxDelay: 20 * time.Millisecond, MaxWait: 50 * time.Millisecond, MaxTotalWait: 5 * time.Second}

func newRig(t *testing.T, presetName string, lines []string, lim sluice.Limits, maxAttempts int, opts emulator.Options) *rig {
	t.Helper()
	ctx := context.Background()
	emu, err := emulator.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(emu.Handler())
	t.Cleanup(func() { srv.Close(); emu.Close() })
	p, err := provider.Lookup(presetName)
	if err != nil {
		t.Fatal(err)
	}
	var prov sluice.Provider
	rl := httpx.RateLimit{PerSecond: -1}
	switch p.Family {
	case provider.FamilyOpenAI:
		prov, err = openai.New(openai.Config{Config: provider.Config{Preset: p, BaseURL: srv.URL + "/v1", APIKey: "k", Retry: fastRetry, RateLimit: rl}})
	case provider.FamilyAnthropic:
		prov, err = anthropic.New(anthropic.Config{Config: provider.Config{Preset: p, BaseURL: srv.URL, APIKey: "k", Retry: fastRetry, RateLimit: rl}})
	case provider.FamilyCloudflare:
		prov, err = cloudflare.New(cloudflare.Config{Preset: p, BaseURL: srv.URL + "/client/v4", AccountID: "acct", APIToken: "k", Retry: fastRetry, RateLimit: rl, TempDir: t.TempDir()})
	case provider.FamilyMistral:
		prov, err = mistral.New(mistral.Config{Config: provider.Config{Preset: p, BaseURL: srv.URL + "/mistral", APIKey: "k", Retry: fastRetry, RateLimit: rl}})
	case provider.FamilyTogether:
		prov, err = together.New(together.Config{Config: provider.Config{Preset: p, BaseURL: srv.URL + "/together/v1", APIKey: "k", Retry: fastRetry, RateLimit: rl}})
	case provider.FamilyGemini:
		prov, err = gemini.New(gemini.Config{Config: provider.Config{Preset: p, BaseURL: srv.URL + "/gemini", APIKey: "k", Retry: fastRetry, RateLimit: rl}})
	}
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	db, err := tracker.Open(ctx, state)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	input := filepath.Join(t.TempDir(), "in.jsonl")
	if err := os.WriteFile(input, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Planned as sluice plans every job (lifecycle.Prepare), then moved to
	// running: the dispatcher under test is driven directly by rig.run.
	pr, err := lifecycle.Prepare(ctx, db, lifecycle.Spec{ID: "job-" + presetName, Input: input, Preset: p,
		Limits: lim, MaxAttempts: maxAttempts, Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	if err != nil {
		t.Fatal(err)
	}
	job := pr.Job
	if err := db.SetJobState(ctx, job.ID, sluice.JobPlanned, sluice.JobRunning); err != nil {
		t.Fatal(err)
	}
	job.State = sluice.JobRunning
	r := &rig{t: t, db: db, job: job, prov: prov, emu: emu, url: srv.URL}
	for _, l := range lines {
		var in sluice.InputLine
		json.Unmarshal([]byte(l), &in)
		r.ids = append(r.ids, in.CustomID)
	}
	return r
}

func (r *rig) options() dispatcher.Options {
	return dispatcher.Options{Concurrency: 4, PollInterval: 5 * time.Millisecond, MaxPollInterval: 40 * time.Millisecond,
		Log: zerolog.New(zerolog.NewTestWriter(r.t)).Level(zerolog.WarnLevel)}
}

// run drives the job to the end within a time limit.
func (r *rig) run(opts dispatcher.Options) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := dispatcher.New(r.db, r.prov, r.job, opts).Run(ctx, nil)
	if err != nil {
		r.t.Fatalf("run: %v", err)
	}
	if out != dispatcher.Finished {
		r.t.Fatalf("run ended %v, want Finished", out)
	}
}

// merged merges the job and returns output lines by custom_id, checking
// that every custom_id appears exactly once, in input order.
func (r *rig) merged() (map[string]sluice.OutputLine, *merger.Summary) {
	r.t.Helper()
	ctx := context.Background()
	if r.job.State == sluice.JobRunning {
		if err := r.db.SetJobState(ctx, r.job.ID, sluice.JobRunning, sluice.JobMerging); err != nil {
			r.t.Fatal(err)
		}
		r.job.State = sluice.JobMerging
	}
	out := filepath.Join(r.t.TempDir(), "out.jsonl")
	sum, err := lifecycle.Merge(ctx, r.db, r.job, lifecycle.MergeOptions{Output: out,
		Log: zerolog.New(zerolog.NewTestWriter(r.t)).Level(zerolog.WarnLevel)})
	if err != nil {
		r.t.Fatalf("merge: %v", err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		r.t.Fatal(err)
	}
	got := map[string]sluice.OutputLine{}
	ls := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(ls) != len(r.ids) {
		r.t.Fatalf("output has %d lines, input %d", len(ls), len(r.ids))
	}
	for i, l := range ls {
		var o sluice.OutputLine
		if err := json.Unmarshal([]byte(l), &o); err != nil {
			r.t.Fatalf("output line %d: %v", i+1, err)
		}
		if o.CustomID != r.ids[i] {
			r.t.Fatalf("output line %d is %q, want %q (input order)", i+1, o.CustomID, r.ids[i])
		}
		got[o.CustomID] = o
	}
	st, _ := r.db.RequestStates(ctx, r.job.ID)
	if st[sluice.RequestPending] != 0 {
		r.t.Fatalf("%d requests still pending", st[sluice.RequestPending])
	}
	return got, sum
}

func openAILines(n int) []string {
	var ls []string
	for i := 0; i < n; i++ {
		switch i % 3 {
		case 0:
			ls = append(ls, fmt.Sprintf(`{"custom_id":"emb-%d","method":"POST","url":"/v1/embeddings","body":{"model":"text-embedding-3-small","input":"text %d"}}`, i, i))
		case 1:
			ls = append(ls, fmt.Sprintf(`{"custom_id":"a-%d","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hello %d é 世界"}]}}`, i, i))
		default:
			ls = append(ls, fmt.Sprintf(`{"custom_id":"b-%d","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4.1-nano","messages":[{"role":"user","content":"question %d"}]}}`, i, i))
		}
	}
	return ls
}

func anthropicLines(n int) []string {
	var ls []string
	for i := 0; i < n; i++ {
		model := "claude-3-5-haiku-latest"
		if i%2 == 1 {
			model = "claude-sonnet-4-5"
		}
		ls = append(ls, fmt.Sprintf(`{"custom_id":"msg_%d","method":"POST","url":"/v1/messages","body":{"model":%q,"max_tokens":32,"messages":[{"role":"user","content":"say %d"}]}}`, i, model, i))
	}
	return ls
}

// geminiLines are native Gemini lines over two models.
func geminiLines(n int) []string {
	var ls []string
	for i := 0; i < n; i++ {
		model := "gemini-2.5-flash"
		if i%2 == 1 {
			model = "gemini-2.5-pro"
		}
		ls = append(ls, fmt.Sprintf(`{"custom_id":"gm-%d","method":"POST","url":"/v1beta/models/%s:generateContent","body":{"contents":[{"role":"user","parts":[{"text":"say %d"}]}]}}`, i, model, i))
	}
	return ls
}

func cloudflareLines(n int) []string {
	var ls []string
	for i := 0; i < n; i++ {
		if i%2 == 0 {
			ls = append(ls, fmt.Sprintf(`{"custom_id":"cf-%d","method":"POST","url":"/ai/run/@cf/meta/llama-3.3-70b-instruct-fp8-fast","body":{"prompt":"tell me %d"}}`, i, i))
		} else {
			ls = append(ls, fmt.Sprintf(`{"custom_id":"cf-%d","method":"POST","url":"/ai/run/@cf/baai/bge-m3","body":{"query":"q%d","contexts":[{"text":"a"},{"text":"b"}]}}`, i, i))
		}
	}
	return ls
}
