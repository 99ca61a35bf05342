package splitter_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/splitter"
)

var update = flag.Bool("update", false, "rewrite the golden plans under testdata/golden")

// TestGoldenPlans: small mixed inputs give exactly the plans recorded under
// testdata/golden (go test ./splitter -run Golden -update rewrites them).
func TestGoldenPlans(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, prov, input, model string
		lim                      sluice.Limits
	}{
		{"openai", "openai", "mixed-openai.jsonl", "gpt-4o-mini", sluice.Limits{MaxBatchBytes: 1500, MaxBatchRequests: 4, MaxBatchTokens: 300}},
		{"anthropic", "anthropic", "mixed-anthropic.jsonl", "", sluice.Limits{MaxBatchBytes: 1800, MaxBatchRequests: 5}},
		{"cloudflare", "cloudflare", "mixed-cloudflare.jsonl", "", sluice.Limits{MaxBatchBytes: 1500, MaxBatchTokens: 200}},
	}
	e := newEnv(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e.t = t
			content, err := os.ReadFile(filepath.Join("testdata", c.input))
			if err != nil {
				t.Fatal(err)
			}
			in := e.write(c.input, content)
			r := e.mustSplit(in, c.prov, c.lim, func(cfg *splitter.Config) { cfg.Model = c.model })
			checkPlan(t, r, validLines(t, r.cfg, content))
			type chunk struct {
				ID        int64  `json:"id"`
				URL       string `json:"url"`
				Model     string `json:"model"`
				Path      string `json:"path"`
				Requests  int    `json:"requests"`
				Bytes     int64  `json:"bytes"`
				EstTokens int64  `json:"est_tokens"`
				Bound     string `json:"bound"`
			}
			plan := struct {
				Limits   sluice.Limits    `json:"limits"`
				Lines    int64            `json:"lines"`
				Requests int64            `json:"requests"`
				Bytes    int64            `json:"bytes"`
				Chunks   []chunk          `json:"chunks"`
				Rows     []sluice.Request `json:"rows"`
			}{Limits: r.cfg.Limits, Lines: r.res.Lines, Requests: r.res.Requests, Bytes: r.res.Bytes, Rows: r.requests}
			for _, ch := range r.chunks {
				plan.Chunks = append(plan.Chunks, chunk{ch.ID, ch.URL, ch.Model, ch.Path, ch.Requests, ch.Bytes, ch.EstTokens, ch.Bound})
			}
			got, _ := json.MarshalIndent(plan, "", "  ")
			got = append(got, '\n')
			golden := filepath.Join("testdata", "golden", c.name+".json")
			if *update {
				os.MkdirAll(filepath.Dir(golden), 0o755)
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				os.WriteFile(golden+".got", got, 0o644)
				t.Errorf("plan differs from %s (see %s.got; -update to accept)", golden, golden)
			}
		})
	}
}
