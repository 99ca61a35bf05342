package lifecycle_test

import (
	"context"
	"encoding/json"
	"errors"
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
	"github.com/sluice-batch/sluice/internal/check"
	"github.com/sluice-batch/sluice/lifecycle"
	"github.com/sluice-batch/sluice/merger"
	"github.com/sluice-batch/sluice/pricing"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/provider/httpx"
	"github.com/sluice-batch/sluice/provider/mistral"
	"github.com/sluice-batch/sluice/provider/openai"
	"github.com/sluice-batch/sluice/provider/together"
	"github.com/sluice-batch/sluice/tracker"
)

// world is a real SQLite tracker in a fresh state directory, a real
// emulator on loopback, and an OpenAI client talking to it.
type world struct {
	t     *testing.T
	db    *tracker.DB
	emu   *emulator.Server
	prov  sluice.Provider
	p     provider.Preset
	input string
	ids   []string
	log   zerolog.Logger
}

func newWorld(t *testing.T, n int, opts emulator.Options) *world {
	t.Helper()
	var lines []string
	for i := 0; i < n; i++ {
		model := []string{"gpt-4o-mini", "gpt-4.1-nano", "gpt-4o"}[i%3]
		lines = append(lines, fmt.Sprintf(`{"custom_id":"r%04d","method":"POST","url":"/v1/chat/completions","body":{"model":%q,"messages":[{"role":"user","content":"q %d"}]}}`, i, model, i))
	}
	return newWorldFor(t, "openai", lines, opts)
}

// newWorldFor is a world whose provider is preset name (a family with a
// client in providerFor), with lines as its input.
func newWorldFor(t *testing.T, name string, lines []string, opts emulator.Options) *world {
	t.Helper()
	emu, err := emulator.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(emu.Handler())
	t.Cleanup(func() { srv.Close(); emu.Close() })
	p, err := provider.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	prov := providerFor(t, p, srv.URL)
	db, err := tracker.Open(context.Background(), filepath.Join(t.TempDir(), "state"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	w := &world{t: t, db: db, emu: emu, prov: prov, p: p, log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)}
	for _, l := range lines {
		var in sluice.InputLine
		if err := json.Unmarshal([]byte(l), &in); err != nil {
			t.Fatal(err)
		}
		w.ids = append(w.ids, in.CustomID)
	}
	w.input = filepath.Join(t.TempDir(), "in.jsonl")
	if err := os.WriteFile(w.input, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return w
}

// fastRetry keeps the HTTP layer's retries quick: tests never wait out
// the defaults.
var fastRetry = httpx.Retry{MaxAttempts: 10, BaseDelay: time.Millisecond, MaxDelay: 20 * time.Millisecond, MaxWait: 50 * time.Millisecond, MaxTotalWait: 5 * time.Second}

// providerFor is the client of preset p at the emulator at url.
func providerFor(t *testing.T, p provider.Preset, url string) sluice.Provider {
	t.Helper()
	rl := httpx.RateLimit{PerSecond: -1}
	var prov sluice.Provider
	var err error
	switch p.Family {
	case provider.FamilyOpenAI:
		prov, err = openai.New(openai.Config{Config: provider.Config{Preset: p, BaseURL: url + "/v1", APIKey: "k", Retry: fastRetry, RateLimit: rl}})
	case provider.FamilyMistral:
		prov, err = mistral.New(mistral.Config{Config: provider.Config{Preset: p, BaseURL: url + "/mistral", APIKey: "k", Retry: fastRetry, RateLimit: rl}})
	case provider.FamilyTogether:
		prov, err = together.New(together.Config{Config: provider.Config{Preset: p, BaseURL: url + "/together/v1", APIKey: "k", Retry: fastRetry, RateLimit: rl}})
	default:
		t.Fatalf("no client for family %s in this test", p.Family)
	}
	if err != nil {
		t.Fatal(err)
	}
	return prov
}

func (w *world) spec() lifecycle.Spec {
	return lifecycle.Spec{ID: "job", Input: w.input, Preset: w.p, Log: w.log}
}

// fast are run options that never wait out a default.
func (w *world) fast() lifecycle.RunOptions {
	return lifecycle.RunOptions{PollInterval: 5 * time.Millisecond, MaxPollInterval: 20 * time.Millisecond,
		ReconcileGrace: 10 * time.Millisecond, Log: w.log}
}

func (w *world) prepare() *lifecycle.Prepared {
	w.t.Helper()
	pr, err := lifecycle.Prepare(context.Background(), w.db, w.spec())
	if err != nil {
		w.t.Fatal(err)
	}
	return pr
}

func (w *world) state(job string) sluice.JobState {
	w.t.Helper()
	j, err := w.db.Job(context.Background(), job)
	if err != nil {
		w.t.Fatal(err)
	}
	return j.State
}

// merge merges job into out, failing the test on an error.
func (w *world) merge(job *sluice.Job, out string) *merger.Summary {
	w.t.Helper()
	sum, err := lifecycle.Merge(context.Background(), w.db, job, lifecycle.MergeOptions{Output: out, Log: w.log})
	if err != nil {
		w.t.Fatal(err)
	}
	return sum
}

// boughtOnce checks the emulator created batches batches and processed no
// request twice.
func (w *world) boughtOnce(batches int64) {
	w.t.Helper()
	if s := w.emu.Stats(); s.BatchesCreated != batches || s.RequestsProcessedMoreThanOnce != 0 {
		w.t.Errorf("emulator: %d batches, %d processed twice; want %d and 0", s.BatchesCreated, s.RequestsProcessedMoreThanOnce, batches)
	}
}

// output reads the merged output, checking every custom_id once, in
// input order.
func (w *world) output(path string) []sluice.OutputLine {
	w.t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		w.t.Fatal(err)
	}
	ls := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(ls) != len(w.ids) {
		w.t.Fatalf("output has %d lines, input %d", len(ls), len(w.ids))
	}
	var out []sluice.OutputLine
	for i, l := range ls {
		var o sluice.OutputLine
		if err := json.Unmarshal([]byte(l), &o); err != nil {
			w.t.Fatalf("output line %d: %v", i+1, err)
		}
		if o.CustomID != w.ids[i] {
			w.t.Fatalf("output line %d is %q, want %q", i+1, o.CustomID, w.ids[i])
		}
		out = append(out, o)
	}
	return out
}

// TestPlanRunMerge walks a job's whole life in process: planned, planned
// again is the same plan, run to the end, merged, and a second merge of
// the unchanged output is a no-op.
func TestPlanRunMerge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t, 90, emulator.Options{})
	pr := w.prepare()
	if pr.Reused || pr.Result == nil || pr.Job.State != sluice.JobPlanned || pr.Job.Requests != 90 {
		t.Fatalf("first prepare: reused %v, state %s, %d requests", pr.Reused, pr.Job.State, pr.Job.Requests)
	}
	chunks, _ := w.db.Chunks(ctx, pr.Job.ID)
	if len(chunks) != 3 { // one per model
		t.Fatalf("%d chunks, want 3", len(chunks))
	}
	again := w.prepare()
	if !again.Reused || again.Result != nil || again.Job.ID != pr.Job.ID {
		t.Fatalf("second prepare of the same input: reused %v", again.Reused)
	}
	out := filepath.Join(t.TempDir(), "out.jsonl")
	o := w.fast()
	o.Output = out
	job := again.Job
	outcome, err := lifecycle.Run(ctx, w.db, w.prov, job, o, nil)
	if err != nil || outcome != dispatcher.Finished {
		t.Fatalf("run: %v, %v", outcome, err)
	}
	if job.State != sluice.JobMerging || w.state(job.ID) != sluice.JobMerging {
		t.Fatalf("after the run the job is %s (recorded %s), want merging", job.State, w.state(job.ID))
	}
	sum := w.merge(job, out)
	if sum.Succeeded != 90 || sum.Failed != 0 || lifecycle.FailedAny(sum) || w.state(job.ID) != sluice.JobDone {
		t.Fatalf("merge: %+v, job %s", sum, w.state(job.ID))
	}
	for _, l := range w.output(out) {
		if l.Error != nil || l.Response == nil || l.Response.StatusCode != 200 {
			t.Fatalf("%s did not succeed: %+v", l.CustomID, l)
		}
	}
	st, _ := os.Stat(out)
	js := lifecycle.LastSummary(ctx, w.db, job)
	if !js.Current(out, lifecycle.ErrorsPathFor(out), "input") || js.Lines != 90 || js.Batches != 3 {
		t.Fatalf("summary after merge: %+v", js)
	}
	// A done job runs no batch (no provider needed) and merges to a stat.
	if lifecycle.Dispatches(job) {
		t.Error("a done job dispatches")
	}
	if outcome, err := lifecycle.Run(ctx, w.db, nil, job, o, nil); err != nil || outcome != dispatcher.Finished {
		t.Fatalf("run of a done job: %v, %v", outcome, err)
	}
	w.merge(job, out)
	if st2, _ := os.Stat(out); !st2.ModTime().Equal(st.ModTime()) {
		t.Error("a second merge of an unchanged done job rewrote the output")
	}
	w.boughtOnce(3)
}

// TestStopThenResume stops a run through its stop channel once batches
// are live (what the first SIGINT does, without a process), then a new
// run of the same job picks the live batches up and finishes without
// buying any batch twice.
func TestStopThenResume(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// The emulator's clock stands still until the test moves it: no batch
	// can end before the stop, however loaded the machine (on the wall
	// clock a 300 ms batch sometimes ended first).
	clk := httpx.NewFakeClock(time.Now())
	w := newWorld(t, 60, emulator.Options{BatchTime: 300 * time.Millisecond, Now: clk.Now})
	job := w.prepare().Job
	stop := make(chan struct{})
	o := w.fast()
	o.OnTick = func(chunks []*sluice.Chunk) {
		for _, c := range chunks {
			if c.State == sluice.ChunkSubmitted {
				select {
				case <-stop:
				default:
					close(stop)
				}
				return
			}
		}
	}
	outcome, err := lifecycle.Run(ctx, w.db, w.prov, job, o, stop)
	if err != nil || outcome != dispatcher.Stopped {
		t.Fatalf("stopped run: %v, %v; want Stopped", outcome, err)
	}
	if w.state(job.ID) != sluice.JobRunning {
		t.Fatalf("a stopped job is %s, want running", w.state(job.ID))
	}
	chunks, _ := w.db.Chunks(ctx, job.ID)
	live := 0
	for _, c := range chunks {
		if c.State.Terminal() {
			t.Errorf("chunk %d ended before the stop could leave it live", c.ID)
		}
		if c.State == sluice.ChunkSubmitted {
			live++
		}
	}
	if live == 0 {
		t.Fatal("no batch was live when the run stopped")
	}
	// Resume as a new command would: the job as recorded, a new run.
	job, err = w.db.Job(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	// The resumed run's clock moves on each tick: the live batches, and
	// any the resumed run submits, end.
	o.OnTick = func([]*sluice.Chunk) { clk.Advance(100 * time.Millisecond) }
	if outcome, err := lifecycle.Run(ctx, w.db, w.prov, job, o, nil); err != nil || outcome != dispatcher.Finished {
		t.Fatalf("resumed run: %v, %v", outcome, err)
	}
	out := filepath.Join(t.TempDir(), "out.jsonl")
	w.merge(job, out)
	w.output(out)
	w.boughtOnce(3)
}

// TestCancelKeepsWhatEnded cancels a job whose batches are live: every
// live batch is asked once, the wait ends them, and the merge writes
// every line, the cancelled ones as failures.
func TestCancelKeepsWhatEnded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// The emulator's clock stands still until the test moves it: the
	// batches (10 s long) are live when cancelled however loaded the
	// machine, and the cancel's second (a tenth of the batch time) passes
	// when the test says, not on the wall clock.
	clk := httpx.NewFakeClock(time.Now())
	w := newWorld(t, 30, emulator.Options{BatchTime: 10 * time.Second, Now: clk.Now})
	job := w.prepare().Job
	o := w.fast()
	o.Once = true
	out := filepath.Join(t.TempDir(), "out.jsonl")
	o.Output = out
	if outcome, err := lifecycle.Run(ctx, w.db, w.prov, job, o, nil); err != nil || outcome != dispatcher.Stopped {
		t.Fatalf("--once run: %v, %v; want Stopped", outcome, err)
	}
	if err := lifecycle.MarkCancelled(ctx, w.db, job, w.log); err != nil {
		t.Fatal(err)
	}
	if job.State != sluice.JobCancelled || w.state(job.ID) != sluice.JobCancelled || job.CancelRequestedAt.IsZero() {
		t.Fatalf("after MarkCancelled: %s (recorded %s)", job.State, w.state(job.ID))
	}
	// Cancelling again (an interrupted cancel carried on) is not an error.
	if err := lifecycle.MarkCancelled(ctx, w.db, job, w.log); err != nil {
		t.Fatal(err)
	}
	k := lifecycle.NewCanceller(w.db, w.prov, job, w.log)
	if err := k.CancelLive(ctx); err != nil {
		t.Fatal(err)
	}
	if k.Asked() != 3 || k.Accepted() != 3 {
		t.Fatalf("cancel asked %d, accepted %d; want 3 and 3", k.Asked(), k.Accepted())
	}
	clk.Advance(2 * time.Second) // past the cancels' second
	// A batch the cancel missed would not end on this clock: bound the wait.
	wctx, stop := context.WithTimeout(ctx, time.Minute)
	defer stop()
	if err := k.Wait(wctx, lifecycle.WaitOptions{PollInterval: 5 * time.Millisecond, MaxPollInterval: 20 * time.Millisecond, Log: w.log}); err != nil {
		t.Fatal(err)
	}
	if job.State != sluice.JobMerging {
		t.Fatalf("after the wait the job is %s, want merging", job.State)
	}
	sum := w.merge(job, job.Output)
	var ok, cancelled int64
	for _, l := range w.output(out) {
		switch {
		case l.Error == nil && l.Response != nil && l.Response.StatusCode == 200:
			ok++ // ran before the cancel: kept
		case l.Error != nil && (l.Error.Code == sluice.CodeBatchCancelled || l.Error.Code == sluice.CodeCancelled):
			cancelled++
		default:
			t.Fatalf("%s: neither a success nor cancelled: %+v", l.CustomID, l)
		}
	}
	if cancelled == 0 || sum.Lines != 30 || sum.Failed != cancelled || sum.Succeeded != ok || !lifecycle.FailedAny(sum) {
		t.Fatalf("merge of the cancelled job: %+v; %d ok and %d cancelled in the output", sum, ok, cancelled)
	}
	if !lifecycle.LastSummary(ctx, w.db, job).Cancelled {
		t.Error("the summary of a cancelled job does not say cancelled")
	}
	if err := lifecycle.MarkCancelled(ctx, w.db, job, w.log); !errors.Is(err, lifecycle.ErrBadInput) {
		t.Errorf("cancel of a done job: %v, want ErrBadInput", err)
	}
	if s := w.emu.Stats(); s.BatchesCreated != 3 || s.BatchesCancelled != 3 {
		t.Errorf("emulator: %d batches created, %d cancelled; want 3 and 3", s.BatchesCreated, s.BatchesCancelled)
	}
}

// TestPrepareRefusesChangedInput and replans an interrupted plan.
func TestPrepareRefusesChangedInputAndReplansInterrupted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t, 9, emulator.Options{})
	w.prepare()
	// A plan interrupted mid-split is thrown away and made again.
	if _, err := w.db.SQL().ExecContext(ctx, `UPDATE jobs SET state = 'planning' WHERE id = 'job'`); err != nil {
		t.Fatal(err)
	}
	if pr := w.prepare(); pr.Reused || pr.Job.State != sluice.JobPlanned {
		t.Fatalf("interrupted plan: reused %v, state %s; want planned anew", pr.Reused, pr.Job.State)
	}
	f, err := os.OpenFile(w.input, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(f, `{"custom_id":"late","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o","messages":[]}}`)
	f.Close()
	_, err = lifecycle.Prepare(ctx, w.db, w.spec())
	if !errors.Is(err, lifecycle.ErrBadInput) || !strings.Contains(err.Error(), "changed since job job was planned") {
		t.Fatalf("changed input: %v, want a bad-input error saying it changed", err)
	}
	// Check is consulted for a reused plan and can refuse it.
	s := w.spec()
	s.Input = filepath.Join(t.TempDir(), "none.jsonl")
	if _, err := lifecycle.Prepare(ctx, w.db, s); !errors.Is(err, lifecycle.ErrBadInput) {
		t.Errorf("missing input: %v, want ErrBadInput", err)
	}
}

// TestSpecCheckRefusesReuse: a reused plan goes through Spec.Check.
func TestSpecCheckRefusesReuse(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 3, emulator.Options{})
	w.prepare()
	s := w.spec()
	refused := errors.New("refused by check")
	s.Check = func(context.Context, *sluice.Job) error { return refused }
	if _, err := lifecycle.Prepare(context.Background(), w.db, s); !errors.Is(err, refused) {
		t.Fatalf("Prepare with a refusing Check: %v", err)
	}
}

func TestErrorsPathFor(t *testing.T) {
	t.Parallel()
	check.Table(t, "ErrorsPathFor", lifecycle.ErrorsPathFor, map[string]string{
		"/o/out.jsonl":    "/o/out.errors.jsonl",
		"/o/out.jsonl.gz": "/o/out.errors.jsonl.gz",
		"/o/out":          "/o/out.errors.jsonl",
		"/o/r.json.zst":   "/o/r.errors.json.zst",
	})
}

func TestNextAction(t *testing.T) {
	t.Parallel()
	past := time.Now().Add(-time.Minute)
	chunks := []*sluice.Chunk{
		{ID: 1, State: sluice.ChunkSubmitted, NextPollAt: past},
		{ID: 2, State: sluice.ChunkPending},
		{ID: 3, State: sluice.ChunkCreating},
		{ID: 4, State: sluice.ChunkDone},
	}
	for _, c := range []struct {
		state sluice.JobState
		want  string
	}{
		{sluice.JobRunning, "check 1 chunk caught mid-call (uploading/creating) against the provider; submit 1 batch; poll 1 live batches (next poll now)"},
		{sluice.JobCancelled, "check 1 chunk caught mid-call (uploading/creating) against the provider; wait for 1 cancelled batches to end; fail 1 unsubmitted batches as cancelled; merge what completed ('sluice cancel j' or 'sluice run' again)"},
		{sluice.JobDone, "nothing: output written"},
		{sluice.JobMerging, "merge the results into the output"},
		{sluice.JobPlanning, "plan again from scratch (planning was interrupted)"},
	} {
		if got := lifecycle.NextAction(&sluice.Job{ID: "j", State: c.state}, chunks); got != c.want {
			t.Errorf("%s: NextAction = %q, want %q", c.state, got, c.want)
		}
	}
	if got := lifecycle.NextAction(&sluice.Job{ID: "j", State: sluice.JobRunning}, chunks[3:]); got != "merge the results into the output" {
		t.Errorf("every chunk ended: %q", got)
	}
}

// TestCapRefusedBeforeAnyWork: a spend cap that cannot be kept (a model
// without a price) is refused before the job moves or anything is sent.
func TestCapRefusedBeforeAnyWork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t, 6, emulator.Options{})
	job := w.prepare().Job
	o := w.fast()
	o.MaxCost = 1
	o.Price = func(string) (pricing.Price, bool) { return pricing.Price{}, false }
	_, err := lifecycle.Run(ctx, w.db, w.prov, job, o, nil)
	if !errors.Is(err, lifecycle.ErrBadInput) || !strings.Contains(err.Error(), "no price for model") {
		t.Fatalf("unpriced cap: %v, want a bad-input error naming the model", err)
	}
	if w.state(job.ID) != sluice.JobPlanned || w.emu.Stats().APICalls != 0 {
		t.Errorf("after a refused cap the job is %s and the provider got %d calls", w.state(job.ID), w.emu.Stats().APICalls)
	}
}

// TestJobIdentity: a job an earlier version planned under its legacy name
// (no endpoint recorded) is the job a command means; an output path held
// by another job not done is refused.
func TestJobIdentity(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t, 3, emulator.Options{})
	w.prepare() // job "job", no endpoint: as an earlier version planned it
	if id, err := lifecycle.FindJobID(ctx, w.db, "new-name", "job"); err != nil || id != "job" {
		t.Errorf("FindJobID with a legacy job: %q, %v; want the legacy job", id, err)
	}
	if id, err := lifecycle.FindJobID(ctx, w.db, "new-name", "nothing-there"); err != nil || id != "new-name" {
		t.Errorf("FindJobID without one: %q, %v", id, err)
	}
	out := filepath.Join(t.TempDir(), "out.jsonl")
	if err := w.db.SetJobOutput(ctx, "job", out); err != nil {
		t.Fatal(err)
	}
	if err := lifecycle.CheckOutputFree(ctx, w.db, "other", out); !errors.Is(err, lifecycle.ErrBadInput) || !strings.Contains(err.Error(), "output of job job") {
		t.Errorf("another job's output: %v", err)
	}
	if err := lifecycle.CheckOutputFree(ctx, w.db, "job", out); err != nil {
		t.Errorf("the job's own output: %v", err)
	}
	if a, b := lifecycle.DerivedJobName("/d/in.jsonl", "openai", ""), lifecycle.DerivedJobName("/d/in.jsonl", "openai", "x"); a == b || !strings.HasPrefix(a, "in-openai-") {
		t.Errorf("derived names %q and %q", a, b)
	}
	if got := lifecycle.NormalizeURL("HTTPS://user:pw@API.Example.com/v1/"); got != "https://api.example.com/v1" {
		t.Errorf("NormalizeURL = %q", got)
	}
}

// TestRunRefusesAJobStillPlanning: only a prepared job runs.
func TestRunRefusesAJobStillPlanning(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 3, emulator.Options{})
	job := w.prepare().Job
	job.State = sluice.JobPlanning
	if _, err := lifecycle.Run(context.Background(), w.db, w.prov, job, w.fast(), nil); err == nil || !strings.Contains(err.Error(), "is planning") {
		t.Fatalf("run of a planning job: %v", err)
	}
}

// TestFootprintCountsRealtimeCalls: a job whose requests went through the
// realtime fallback has them bought (or maybe bought) though its chunks
// still look pending: it is not replaceable, so a changed flag never
// deletes those answers to buy them again.
func TestFootprintCountsRealtimeCalls(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 4, emulator.Options{})
	pr := w.prepare()
	ctx := context.Background()
	f, err := lifecycle.JobFootprint(ctx, w.db, pr.Job.ID)
	if err != nil || !f.Empty() {
		t.Fatalf("fresh plan: footprint %+v, %v; want empty", f, err)
	}
	cs, err := w.db.Chunks(ctx, pr.Job.ID)
	if err != nil || len(cs) == 0 {
		t.Fatalf("chunks: %v", err)
	}
	if ok, err := w.db.RealtimeIntent(ctx, pr.Job.ID, cs[0].ID, 0); err != nil || !ok {
		t.Fatalf("realtime intent: %v %v", ok, err)
	}
	f, err = lifecycle.JobFootprint(ctx, w.db, pr.Job.ID)
	if err != nil || f.Empty() || lifecycle.Replaceable(pr.Job, f) {
		t.Errorf("after a realtime call: footprint %+v (%v): want it not empty, the job not replaceable", f, err)
	}
}
