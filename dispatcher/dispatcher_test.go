package dispatcher_test

import (
	"context"
	"testing"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/emulator"
)

// TestMixedFileEachFamily: a file mixing models and endpoints runs to
// completion against the emulator for each provider family, with every
// custom_id exactly once in the outcome and nothing bought twice.
func TestMixedFileEachFamily(t *testing.T) {
	for _, tc := range []struct {
		preset string
		lines  []string
	}{
		{"openai", openAILines(60)},
		{"anthropic", anthropicLines(40)},
		{"cloudflare", cloudflareLines(40)},
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
