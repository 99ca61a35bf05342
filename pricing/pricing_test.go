package pricing_test

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/pricing"
)

func TestBuiltinPricesCoverPresetsAndEmulatorModels(t *testing.T) {
	tbl := pricing.Builtin()
	for _, c := range []struct{ provider, model string }{
		{"openai", "gpt-4o-mini"}, {"openai", "gpt-4.1-nano"}, {"openai", "text-embedding-3-small"},
		{"local", "gpt-4o-mini"}, {"azure", "gpt-4o"}, {"openai", "gpt-4o-mini-2024-07-18"},
		{"anthropic", "claude-sonnet-4-5"}, {"anthropic", "claude-3-5-haiku-latest"},
		{"cloudflare", "@cf/meta/llama-3.1-8b-instruct"}, {"cloudflare", "@cf/baai/bge-m3"},
		{"xai", "grok-4"}, {"xai", "grok-4-fast-reasoning"}, {"xai", "grok-3-mini"},
		// local runs every family's lines: each at its provider's price.
		{"local", "gemini-2.5-flash"}, {"local", "claude-haiku-4-5"}, {"local", "@cf/meta/llama-3.1-8b-instruct"},
	} {
		p, ok := tbl.Lookup(c.provider, c.model)
		if !ok {
			t.Errorf("%s %s: no built-in price", c.provider, c.model)
			continue
		}
		if p.Input <= 0 || p.Source == "" || p.Taken == "" {
			t.Errorf("%s %s: %+v: want a positive input price, a source and a date", c.provider, c.model, p)
		}
	}
	// Batch prices: half of OpenAI's standard $0.15 / $0.60 for gpt-4o-mini.
	if p, _ := tbl.Lookup("openai", "gpt-4o-mini"); p.Input != 0.075 || p.Output != 0.30 {
		t.Errorf("gpt-4o-mini batch price %+v", p)
	}
	for _, c := range []struct{ provider, model string }{{"openai", "no-such-model"}, {"groq", "gpt-4o-mini"}, {"anthropic", "gpt-4o-mini"}, {"local", "no-such-model"}} {
		if p, ok := tbl.Lookup(c.provider, c.model); ok {
			t.Errorf("%s %s: priced %+v, want unknown", c.provider, c.model, p)
		}
	}
}

func TestPricesFileOverridesAndExtends(t *testing.T) {
	dir := t.TempDir()
	js := filepath.Join(dir, "p.json")
	os.WriteFile(js, []byte(`{"providers": {
		"openai": {"models": {"gpt-4o-mini": {"input": 1, "output": 2}}},
		"groq": {"source": "my contract", "taken": "2026-01-01", "models": {"llama-3.1-8b-instant": {"input": 0.025, "output": 0.04, "max_output_tokens": 8192}}}}}`), 0o600)
	yml := filepath.Join(dir, "p.yaml")
	os.WriteFile(yml, []byte("providers:\n  openai:\n    models:\n      gpt-4o-mini: {input: 1, output: 2}\n  groq:\n    source: my contract\n    taken: \"2026-01-01\"\n    models:\n      llama-3.1-8b-instant:\n        input: 0.025\n        output: 0.04\n        max_output_tokens: 8192\n"), 0o600)
	for _, path := range []string{js, yml} {
		tbl, err := pricing.Load(path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if p, _ := tbl.Lookup("openai", "gpt-4o-mini"); p.Input != 1 || p.Output != 2 {
			t.Errorf("%s: override: %+v", path, p)
		}
		if p, ok := tbl.Lookup("openai", "gpt-4.1-nano"); !ok || p.Input != 0.05 {
			t.Errorf("%s: built-in entry lost: %+v %v", path, p, ok)
		}
		p, ok := tbl.Lookup("groq", "llama-3.1-8b-instant")
		if !ok || p.Input != 0.025 || p.MaxOutputTokens != 8192 || p.Source != "my contract" || p.Taken != "2026-01-01" {
			t.Errorf("%s: extension: %+v %v", path, p, ok)
		}
		if !strings.Contains(tbl.Source, path) {
			t.Errorf("source %q does not name the file", tbl.Source)
		}
	}
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"providers": {"openai": {"models": {"x": {"input": -1}}}}}`), 0o600)
	if _, err := pricing.Load(bad); err == nil {
		t.Error("negative price accepted")
	}
	os.WriteFile(bad, []byte(`{"provider": {}}`), 0o600)
	if _, err := pricing.Load(bad); err == nil {
		t.Error("misspelt key accepted")
	}
}

// TestEstimateHandComputed checks pricing.Of against figures worked out
// by hand.
func TestEstimateHandComputed(t *testing.T) {
	p := pricing.Price{Input: 0.5, Output: 2, MaxOutputTokens: 1000}
	w := pricing.Work{EstTokens: 10_000, MaxOutputTokens: 3_000, NoMaxRequests: 2}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-12 }

	// No lessons: input 10,000; output bound 3,000 + 2 x 1,000 = 5,000,
	// also the expectation. Cost 10,000 x 0.5/1e6 + 5,000 x 2/1e6 = 0.015;
	// upper bound input 12,500 (margin 1.25): 0.00625 + 0.01 = 0.01625.
	e := pricing.Of(p, true, sluice.Learned{}, w)
	if e.InputTokens != 10_000 || e.OutputTokens != 5_000 || e.MaxInputTokens != 12_500 || !near(e.Cost, 0.015) || !near(e.MaxCost, 0.01625) || e.Learned {
		t.Errorf("no lessons: %+v", e)
	}
	// Lessons: usage 1.2x the estimate, 0.1 output per input token. Input
	// 12,000; output 1,200 (under the bound); cost 0.006 + 0.0024 = 0.0084.
	// Bound input 10,000 x 1.2 x 1.25 = 15,000: 0.0075 + 0.01 = 0.0175.
	l := sluice.Learned{EstTokens: 1000, InputTokens: 1200, OutputTokens: 120}
	e = pricing.Of(p, true, l, w)
	if e.InputTokens != 12_000 || e.OutputTokens != 1_200 || e.MaxInputTokens != 15_000 || !near(e.Cost, 0.0084) || !near(e.MaxCost, 0.0175) || !e.Learned {
		t.Errorf("lessons: %+v", e)
	}
	// A ratio under 1 lowers the expectation, never the bound.
	e = pricing.Of(p, true, sluice.Learned{EstTokens: 1000, InputTokens: 800, OutputTokens: 8000}, w)
	if e.InputTokens != 8_000 || e.OutputTokens != 5_000 || e.MaxInputTokens != 12_500 {
		t.Errorf("ratio under 1: %+v", e)
	}
	// Unknown model: unknown, never zero.
	e = pricing.Of(pricing.Price{}, false, sluice.Learned{}, w)
	if !math.IsNaN(e.Cost) || !math.IsNaN(e.MaxCost) || e.Bounded() {
		t.Errorf("unknown price: %+v", e)
	}
	// No max_tokens and no ceiling: unbounded.
	e = pricing.Of(pricing.Price{Input: 1, Output: 1}, true, sluice.Learned{}, w)
	if !math.IsInf(e.MaxCost, 1) || e.Bounded() {
		t.Errorf("unbounded output: %+v", e)
	}
	// Embeddings: no output price, no bound needed.
	e = pricing.Of(pricing.Price{Input: 0.01}, true, sluice.Learned{}, pricing.Work{EstTokens: 1e6, NoMaxRequests: 5})
	if !near(e.Cost, 0.01) || !near(e.MaxCost, 0.0125) || !e.Bounded() {
		t.Errorf("embeddings: %+v", e)
	}
}
