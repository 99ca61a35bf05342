package lifecycle_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/dispatcher"
	"github.com/sluice-batch/sluice/emulator"
	"github.com/sluice-batch/sluice/lifecycle"
	"github.com/sluice-batch/sluice/provider/httpx"
)

// TestFaultsMistralTogether (moved in process from cmd/sluice, where it
// drove the binary): with API faults (429, 5xx, connections reset after
// the call took effect) and hostile result files (malformed, duplicated
// and unknown lines, downloads cut short), a job still ends with every
// custom_id once, in order, all succeeded; no batch is bought twice and no
// success is delivered twice (re-executions happen only for requests
// whose result the emulator spoiled).
func TestFaultsMistralTogether(t *testing.T) {
	t.Parallel()
	for _, family := range []string{"mistral", "together"} {
		t.Run(family, func(t *testing.T) {
			t.Parallel()
			var lines []string
			for i := 0; i < 120; i++ {
				model := []string{"mistral-small-latest", "meta-llama/Llama-3.3-70B-Instruct-Turbo"}[i%2]
				lines = append(lines, fmt.Sprintf(`{"custom_id":"c%05d","method":"POST","url":"/v1/chat/completions","body":{"model":%q,"max_tokens":64,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"question %d"}]}}`, i, model, i))
			}
			w := newWorldFor(t, family, lines, emulator.Options{BatchTime: 100 * time.Millisecond, Seed: 12,
				HTTPFaultRate: 0.25, RetryAfter: 10 * time.Millisecond, MalformedLineRate: 0.03, DuplicateLineRate: 0.05,
				UnknownCustomIDRate: 0.03, TruncateDownloadRate: 0.2})
			ctx := context.Background()
			s := w.spec()
			s.Limits.MaxBatchRequests, s.MaxAttempts = 30, 6
			pr, err := lifecycle.Prepare(ctx, w.db, s)
			if err != nil {
				t.Fatal(err)
			}
			o := w.fast()
			if outcome, err := lifecycle.Run(ctx, w.db, w.prov, pr.Job, o, nil); err != nil || outcome != dispatcher.Finished {
				t.Fatalf("run: %v, %v", outcome, err)
			}
			out := filepath.Join(t.TempDir(), "out.jsonl")
			w.merge(pr.Job, out)
			ok := 0
			for _, o := range w.output(out) {
				if o.Response != nil && o.Response.StatusCode == 200 {
					ok++
				}
			}
			st := w.emu.Stats()
			if ok != len(lines) || st.LinesSucceeded != int64(ok) {
				t.Fatalf("%d successes in the output, emulator delivered %d", ok, st.LinesSucceeded)
			}
			if st.FaultsInjected == 0 || st.LinesMalformed+st.LinesDuplicated+st.DownloadsTruncated == 0 {
				t.Fatalf("nothing was injected: %+v", st)
			}
			fs := st.ByFamily[family]
			if fs.RequestsProcessedMoreThanOnce > st.LinesMalformed {
				t.Fatalf("%d re-executions for %d spoiled lines", fs.RequestsProcessedMoreThanOnce, st.LinesMalformed)
			}
			if w.state(pr.Job.ID) != sluice.JobDone {
				t.Errorf("job %s after the merge", w.state(pr.Job.ID))
			}
			t.Logf("%s: %+v; %d faults, %d malformed, %d duplicated, %d truncated", family, fs, st.FaultsInjected,
				st.LinesMalformed, st.LinesDuplicated, st.DownloadsTruncated)
		})
	}
}

// TestCancelMistralTogether (moved in process from cmd/sluice; `sluice
// cancel` itself is proven through the binary by
// TestCancelKeepsCompletedLines): cancelling a job's live Mistral or
// Together batches cancels them at the provider, and the merge writes one
// line per request, each a success or an error; nothing is bought twice.
func TestCancelMistralTogether(t *testing.T) {
	t.Parallel()
	for _, family := range []string{"mistral", "together"} {
		t.Run(family, func(t *testing.T) {
			t.Parallel()
			var lines []string
			for i := 0; i < 40; i++ {
				model := []string{"mistral-small-latest", "meta-llama/Llama-3.3-70B-Instruct-Turbo"}[i%2]
				lines = append(lines, fmt.Sprintf(`{"custom_id":"c%05d","method":"POST","url":"/v1/chat/completions","body":{"model":%q,"max_tokens":64,"messages":[{"role":"user","content":"question %d"}]}}`, i, model, i))
			}
			// The emulator's clock stands still until the test moves it:
			// the batches are live when cancelled, and a cancel's second
			// passes when the test says.
			clk := httpx.NewFakeClock(time.Now())
			w := newWorldFor(t, family, lines, emulator.Options{BatchTime: 10 * time.Second, Now: clk.Now})
			ctx := context.Background()
			job := w.prepare().Job
			o := w.fast()
			o.Once = true
			o.Output = filepath.Join(t.TempDir(), "out.jsonl")
			if outcome, err := lifecycle.Run(ctx, w.db, w.prov, job, o, nil); err != nil || outcome != dispatcher.Stopped {
				t.Fatalf("--once run: %v, %v", outcome, err)
			}
			if err := lifecycle.MarkCancelled(ctx, w.db, job, w.log); err != nil {
				t.Fatal(err)
			}
			k := lifecycle.NewCanceller(w.db, w.prov, job, w.log)
			if err := k.CancelLive(ctx); err != nil {
				t.Fatal(err)
			}
			if k.Asked() != 2 || k.Accepted() != 2 {
				t.Fatalf("cancel asked %d, accepted %d; want 2 and 2 (one batch per model)", k.Asked(), k.Accepted())
			}
			clk.Advance(2 * time.Second) // past the cancels' second
			// A batch the cancel missed would not end on this clock: bound the wait.
			wctx, stop := context.WithTimeout(ctx, time.Minute)
			defer stop()
			if err := k.Wait(wctx, lifecycle.WaitOptions{PollInterval: 10 * time.Millisecond, MaxPollInterval: 50 * time.Millisecond, Log: w.log}); err != nil {
				t.Fatal(err)
			}
			chunks, _ := w.db.Chunks(ctx, job.ID)
			for _, c := range chunks {
				if c.Attempt == 1 && c.BatchStatus != "CANCELLED" {
					t.Errorf("chunk %d's batch ended %q at the provider, want CANCELLED", c.ID, c.BatchStatus)
				}
			}
			sum := w.merge(job, job.Output)
			ok := int64(0)
			for _, l := range w.output(job.Output) {
				if l.Response != nil && l.Response.StatusCode == 200 {
					ok++
				} else if l.Error == nil {
					t.Errorf("%s: neither a success nor an error: %+v", l.CustomID, l)
				}
			}
			fs := w.emu.Stats().ByFamily[family]
			if sum.Succeeded != ok || fs.BatchesCreated != 2 || fs.RequestsProcessedMoreThanOnce != 0 || fs.RequestsProcessed != ok {
				t.Errorf("%s stats %+v with %d successes in the output (summary %+v)", family, fs, ok, sum)
			}
		})
	}
}
