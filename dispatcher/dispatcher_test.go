package dispatcher_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/dispatcher"
	"github.com/sluice-batch/sluice/emulator"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/provider/openai"
)

// TestMixedFileEachFamily: a file mixing models and endpoints runs to
// completion against the emulator for each provider family, with every
// custom_id exactly once in the outcome and nothing bought twice.
func TestMixedFileEachFamily(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		preset string
		lines  []string
	}{
		{"openai", openAILines(60)},
		{"anthropic", anthropicLines(40)},
		{"cloudflare", cloudflareLines(40)},
		{"gemini", geminiLines(40)},
	} {
		t.Run(tc.preset, func(t *testing.T) {
			r := newRig(t, tc.preset, tc.lines, sluice.Limits{MaxBatchRequests: 7}, 3, emulator.Options{})
			r.run(r.options())
			got, sum := r.merged()
			if sum.Succeeded != int64(len(tc.lines)) || sum.Failed != 0 {
				t.Errorf("succeeded %d failed %d, want all %d succeeded", sum.Succeeded, sum.Failed, len(tc.lines))
			}
			for id, o := range got {
				if o.Response == nil || o.Response.StatusCode != 200 || len(o.Response.Body) == 0 {
					t.Errorf("%s: %+v, want a 200 response with a body", id, o)
				}
			}
			st := r.emu.Stats()
			if st.RequestsProcessedMoreThanOnce != 0 {
				t.Errorf("requests processed more than once: %d", st.RequestsProcessedMoreThanOnce)
			}
			chunks, _ := r.db.Chunks(context.Background(), r.job.ID)
			models := map[string]bool{}
			for _, c := range chunks {
				models[c.URL+" "+c.Model] = true
				if c.Requests > 7 {
					t.Errorf("chunk %d has %d requests, limit 7", c.ID, c.Requests)
				}
			}
			if len(models) < 2 {
				t.Errorf("expected several (url, model) groups, got %v", models)
			}
		})
	}
}

// TestBadCredentialsOnPollStopTheRun: a key the provider refuses while
// batches are live stops the run at once and spends nothing.
func TestBadCredentialsOnPollStopTheRun(t *testing.T) {
	t.Parallel()
	r := newRig(t, "openai", openAILines(20), sluice.Limits{MaxBatchRequests: 10}, 3,
		emulator.Options{APIKey: "k", BatchTime: time.Hour})
	opts := r.options()
	opts.Once = true
	if out, err := dispatcher.New(r.db, r.prov, r.job, opts).Run(context.Background(), nil); err != nil || out != dispatcher.Stopped {
		t.Fatalf("first run: %v %v", out, err)
	}
	bad, err := openai.New(openai.Config{Config: provider.Config{Preset: provider.Presets["openai"], BaseURL: r.url + "/v1", APIKey: "revoked", Retry: fastRetry}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = dispatcher.New(r.db, bad, r.job, opts).Run(context.Background(), nil)
	if !errors.Is(err, dispatcher.ErrFatal) || !strings.Contains(err.Error(), "401") {
		t.Fatalf("run with a refused key: %v; want a fatal 401", err)
	}
	chunks, _ := r.db.Chunks(context.Background(), r.job.ID)
	for _, c := range chunks {
		if c.State != sluice.ChunkSubmitted || c.Attempt != 1 {
			t.Errorf("chunk %d: %s attempt %d; a refused key must not fail or retry batches", c.ID, c.State, c.Attempt)
		}
	}
}
