package dispatcher_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/dispatcher"
	"github.com/sluice-batch/sluice/emulator"
	"github.com/sluice-batch/sluice/pricing"
)

// capLines are chat requests of random length and max_tokens.
func capLines(rng *rand.Rand, n int) []string {
	words := strings.Fields("the quick brown fox jumps over a lazy dog while rivers of batch requests flow to the sea of tokens")
	var ls []string
	for i := 0; i < n; i++ {
		var sb strings.Builder
		for k := 5 + rng.IntN(80); k > 0; k-- {
			sb.WriteString(words[rng.IntN(len(words))])
			sb.WriteByte(' ')
		}
		model := "gpt-4o-mini"
		if i%3 == 0 {
			model = "gpt-4.1-nano"
		}
		ls = append(ls, fmt.Sprintf(`{"custom_id":"r-%d","method":"POST","url":"/v1/chat/completions","body":{"model":%q,"max_tokens":%d,"messages":[{"role":"user","content":%q}]}}`,
			i, model, 4+rng.IntN(40), sb.String()))
	}
	return ls
}

// providerSpend is what the emulator reported as usage in every output
// file of every batch it ran, priced with tbl: the bill, computed apart
// from sluice's own records.
func providerSpend(t *testing.T, base string, tbl *pricing.Table) float64 {
	t.Helper()
	get := func(path string, v any) *http.Response {
		req, _ := http.NewRequest("GET", base+path, nil)
		req.Header.Set("Authorization", "Bearer k")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if v != nil {
			defer resp.Body.Close()
			if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
				t.Fatal(err)
			}
		}
		return resp
	}
	total, after := 0.0, ""
	for {
		var page struct {
			Data []struct {
				ID           string `json:"id"`
				OutputFileID string `json:"output_file_id"`
			} `json:"data"`
			HasMore bool `json:"has_more"`
		}
		q := "/v1/batches?limit=100"
		if after != "" {
			q += "&after=" + after
		}
		get(q, &page)
		for _, b := range page.Data {
			after = b.ID
			if b.OutputFileID == "" {
				continue
			}
			resp := get("/v1/files/"+b.OutputFileID+"/content", nil)
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				var l struct {
					Response struct {
						Body struct {
							Model string `json:"model"`
							Usage struct {
								In  int64 `json:"prompt_tokens"`
								Out int64 `json:"completion_tokens"`
							} `json:"usage"`
						} `json:"body"`
					} `json:"response"`
				}
				if json.Unmarshal(sc.Bytes(), &l) != nil {
					continue
				}
				p, ok := tbl.Lookup("openai", l.Response.Body.Model)
				if !ok && l.Response.Body.Model != "" {
					t.Fatalf("no price for %q", l.Response.Body.Model)
				}
				total += p.Cost(l.Response.Body.Usage.In, l.Response.Body.Usage.Out)
			}
			resp.Body.Close()
		}
		if !page.HasMore {
			return total
		}
	}
}

// TestSpendCapNeverExceeded: over many seeds of random batch durations,
// expiries and per-line errors (so retries), a run under --max-cost never
// buys more than the cap, priced from what the provider reported, and
// either finishes or stops with CapReached.
func TestSpendCapNeverExceeded(t *testing.T) {
	t.Parallel() // its own emulator and tracker: beside the other long tests
	tbl := pricing.Builtin()
	price := func(m string) (pricing.Price, bool) { return tbl.Lookup("openai", m) }
	var capped, finished atomic.Int32
	t.Run("seeds", func(t *testing.T) {
		for seed := 1; seed <= 16; seed++ {
			t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
				t.Parallel()
				rng := rand.New(rand.NewPCG(uint64(seed), 7))
				lines := capLines(rng, 40+rng.IntN(60))
				opts := emulator.Options{Seed: int64(seed), BatchTime: time.Duration(rng.IntN(40)) * time.Millisecond,
					ExpireRate: 0.3 * rng.Float64(), LineErrorRate: 0.2 * rng.Float64()}
				r := newRig(t, "openai", lines, sluice.Limits{MaxBatchRequests: 3 + rng.IntN(12)}, 3, opts)
				// The upper bound of the whole plan, to pick a cap inside it.
				chunks, _ := r.db.Chunks(context.Background(), r.job.ID)
				most := 0.0
				for _, c := range chunks {
					p, _ := price(c.Model)
					most += pricing.Of(p, true, sluice.Learned{}, pricing.WorkOf(c)).MaxCost
				}
				limit := most * (0.1 + 1.2*rng.Float64())
				o := r.options()
				o.MaxCost, o.Price, o.Learned = limit, price, r.db.Learned
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				out, err := dispatcher.New(r.db, r.prov, r.job, o).Run(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				spent := providerSpend(t, r.url, tbl)
				if spent > limit {
					t.Fatalf("provider-reported spend %s is over the cap %s (outcome %v)", dispatcher.USD(spent), dispatcher.USD(limit), out)
				}
				switch out {
				case dispatcher.CapReached:
					capped.Add(1)
					// Stopped for the cap: nothing may be left in flight.
					cs, _ := r.db.Chunks(context.Background(), r.job.ID)
					for _, c := range cs {
						if c.State.Live() || c.State == sluice.ChunkUploading {
							t.Fatalf("cap reached with chunk %d still %s", c.ID, c.State)
						}
					}
				case dispatcher.Finished:
					finished.Add(1)
				default:
					t.Fatalf("outcome %v", out)
				}
				if spent == 0 && limit > most/2 {
					t.Fatalf("nothing bought under a cap of %s (plan at most %s)", dispatcher.USD(limit), dispatcher.USD(most))
				}
			})
		}
	})
	if capped.Load() == 0 || finished.Load() == 0 {
		t.Errorf("%d runs stopped at the cap, %d finished: the seeds should give both", capped.Load(), finished.Load())
	}
}

// TestSpendCapResumedWithHigherCap: a run stopped by the cap carries on
// with a higher one and finishes, never buying a request twice.
func TestSpendCapResumedWithHigherCap(t *testing.T) {
	t.Parallel()
	tbl := pricing.Builtin()
	price := func(m string) (pricing.Price, bool) { return tbl.Lookup("openai", m) }
	rng := rand.New(rand.NewPCG(3, 3))
	lines := capLines(rng, 60)
	r := newRig(t, "openai", lines, sluice.Limits{MaxBatchRequests: 6}, 3, emulator.Options{Seed: 3})
	chunks, _ := r.db.Chunks(context.Background(), r.job.ID)
	p, _ := price(chunks[0].Model)
	first := pricing.Of(p, true, sluice.Learned{}, pricing.WorkOf(chunks[0])).MaxCost
	o := r.options()
	o.MaxCost, o.Price, o.Learned = first*2.5, price, r.db.Learned
	out, err := dispatcher.New(r.db, r.prov, r.job, o).Run(context.Background(), nil)
	if err != nil || out != dispatcher.CapReached {
		t.Fatalf("first run: %v, %v; want CapReached", out, err)
	}
	st, _ := r.db.RequestStates(context.Background(), r.job.ID)
	if st[sluice.RequestSucceeded] == 0 || st[sluice.RequestPending] == 0 {
		t.Fatalf("after the capped run: %v; want some done and some left", st)
	}
	o.MaxCost = 1e6
	r.run(o)
	got, _ := r.merged()
	if len(got) != len(lines) {
		t.Fatalf("%d results for %d lines", len(got), len(lines))
	}
	if n := r.emu.Stats().RequestsProcessedMoreThanOnce; n != 0 {
		t.Errorf("%d requests bought twice", n)
	}
}

// TestLearnedRatioCorrectsEnqueuedTokens: once finished batches of a model
// taught that its input usage runs at twice the estimate, chunks count at
// twice their estimate against --max-enqueued-tokens (issue 11 item 5):
// two chunks that fit the budget by the estimate no longer go live
// together.
func TestLearnedRatioCorrectsEnqueuedTokens(t *testing.T) {
	t.Parallel()
	var lines []string
	for i := 0; i < 20; i++ {
		lines = append(lines, fmt.Sprintf(`{"custom_id":"q-%d","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","max_tokens":5,"messages":[{"role":"user","content":"same length question %02d"}]}}`, i, i%10))
	}
	maxLive := func(ratio float64) int {
		r := newRig(t, "openai", lines, sluice.Limits{MaxBatchRequests: 5}, 3, emulator.Options{BatchTime: 150 * time.Millisecond})
		chunks, _ := r.db.Chunks(context.Background(), r.job.ID)
		// Room for two chunks by the estimate, not for two at twice it.
		r.job.Limits.MaxEnqueuedTokens = chunks[0].EstTokens*5/2 + 1
		o := r.options()
		if ratio > 0 {
			o.Learned = func(context.Context) (map[string]sluice.Learned, error) {
				return map[string]sluice.Learned{"gpt-4o-mini": {EstTokens: 1000, InputTokens: int64(1000 * ratio), OutputTokens: 10}}, nil
			}
		}
		most := 0
		o.OnTick = func(cs []*sluice.Chunk) {
			n := 0
			for _, c := range cs {
				if c.State.Live() {
					n++
				}
			}
			most = max(most, n)
		}
		r.run(o)
		r.merged()
		return most
	}
	if n := maxLive(0); n != 2 {
		t.Errorf("by the estimate: at most %d live at once, want 2", n)
	}
	if n := maxLive(2); n != 1 {
		t.Errorf("with the learned ratio 2: at most %d live at once, want 1", n)
	}
}

// TestUsageEstimateMatchesReportedRequests: what a chunk's usage is
// compared with is the estimate of exactly the requests the usage covers:
// per request for OpenAI, the whole answered batch for Cloudflare (one
// usage per batch). With every line answered, that is the chunk's whole
// estimate.
func TestUsageEstimateMatchesReportedRequests(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		preset string
		lines  []string
	}{{"openai", openAILines(30)}, {"cloudflare", cloudflareLines(20)}} {
		t.Run(c.preset, func(t *testing.T) {
			r := newRig(t, c.preset, c.lines, sluice.Limits{MaxBatchRequests: 10}, 3, emulator.Options{Seed: 5})
			r.run(r.options())
			chunks, _ := r.db.Chunks(context.Background(), r.job.ID)
			withUsage := 0
			for _, ch := range chunks {
				if ch.InputTokens == 0 {
					continue
				}
				withUsage++
				if ch.UsageEstTokens != ch.EstTokens {
					t.Errorf("chunk %d (%s): estimate of the requests with usage %d, want the chunk's %d", ch.ID, ch.Model, ch.UsageEstTokens, ch.EstTokens)
				}
			}
			if withUsage == 0 {
				t.Fatal("no chunk reported usage")
			}
			l, _ := r.db.Learned(context.Background())
			if len(l) == 0 {
				t.Error("nothing learned")
			}
		})
	}
}
