package splitter_test

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/pkoukk/tiktoken-go"
	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"

	"github.com/sluice-batch/sluice/internal/gen/corpus"
	"github.com/sluice-batch/sluice/splitter"
)

// o200k is OpenAI's o200k_base tokenizer (gpt-4o, gpt-4.1, o-series), from
// files embedded in the loader module: no network.
func o200k(t *testing.T) *tiktoken.Tiktoken {
	t.Helper()
	tiktoken.SetBpeLoader(tiktoken_loader.NewOfflineLoader())
	enc, err := tiktoken.GetEncoding("o200k_base")
	if err != nil {
		t.Fatal(err)
	}
	return enc
}

type chatBody struct {
	Model    string `json:"model"`
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
	Input string `json:"input"`
}

// exactTokens counts a chat body's input tokens as OpenAI's cookbook does
// for its chat models (3 per message, its role and content, 3 to prime the
// reply) or an embeddings body's input.
func exactTokens(enc *tiktoken.Tiktoken, body []byte) int {
	var b chatBody
	if err := json.Unmarshal(body, &b); err != nil {
		panic(err)
	}
	if b.Messages == nil {
		return len(enc.Encode(b.Input, nil, nil))
	}
	n := 3
	for _, m := range b.Messages {
		n += 3 + len(enc.Encode(m.Role, nil, nil)) + len(enc.Encode(m.Content, nil, nil))
	}
	return n
}

func chat(text string) []byte {
	b, _ := json.Marshal(map[string]any{"model": "gpt-4o-mini", "messages": []map[string]string{
		{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": text}}})
	return b
}

// TestEstimateTokensAgainstTokenizer measures EstimateTokens against the
// exact o200k count on prose, requests, code and tables in 11 languages
// (testdata/tokens), as chat and as embeddings bodies: within 25% on each
// (a table of numbers, which tokenizes densely, within 40% under), ~10% on
// average, and far closer than bytes/4, the estimate peers use. The
// benchmark corpus (random words) is only logged.
func TestEstimateTokensAgainstTokenizer(t *testing.T) {
	enc := o200k(t)
	files, _ := filepath.Glob("../../splitter/testdata/tokens/*.txt")
	if len(files) < 10 {
		t.Fatalf("samples: %v", files)
	}
	type sample struct {
		name string
		body []byte
	}
	var samples []sample
	for _, f := range files {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(filepath.Base(f), ".txt")
		samples = append(samples, sample{name + " (chat)", chat(string(text))})
		emb, _ := json.Marshal(map[string]string{"model": "text-embedding-3-small", "input": string(text)})
		samples = append(samples, sample{name + " (embeddings)", emb})
	}
	g := corpus.New(corpus.Options{Size: 2 << 20, Seed: 7})
	var corpusEst, corpusExact, corpusQuarter float64
	for {
		line := g.Next()
		if len(line) == 0 {
			break
		}
		var l struct {
			Body json.RawMessage `json:"body"`
		}
		if err := json.Unmarshal(line, &l); err != nil {
			t.Fatal(err)
		}
		corpusEst += float64(splitter.EstimateTokens(l.Body))
		corpusExact += float64(exactTokens(enc, l.Body))
		corpusQuarter += float64(len(l.Body)) / 4
		if corpusExact > 400_000 {
			break
		}
	}
	var errs, quarterErrs []float64
	for _, s := range samples {
		exact := float64(exactTokens(enc, s.body))
		est := float64(splitter.EstimateTokens(s.body))
		quarter := float64(len(bytes.TrimSpace(s.body))) / 4
		e, q := (est-exact)/exact, (quarter-exact)/exact
		errs, quarterErrs = append(errs, e), append(quarterErrs, q)
		lo := -0.25
		if strings.HasPrefix(s.name, "data-table") {
			lo = -0.40
		}
		if e < lo || e > 0.25 {
			t.Errorf("%s: estimate %.0f tokens, exact %.0f: off by %+.1f%%", s.name, est, exact, 100*e)
		}
		t.Logf("%-22s exact %5.0f  estimate %5.0f (%+5.1f%%)  bytes/4 %5.0f (%+6.1f%%)", s.name, exact, est, 100*e, quarter, 100*q)
	}
	t.Logf("%-22s exact %5.0f  estimate %5.0f (%+5.1f%%)  bytes/4 %5.0f (%+6.1f%%)", "corpus", corpusExact, corpusEst,
		100*(corpusEst-corpusExact)/corpusExact, corpusQuarter, 100*(corpusQuarter-corpusExact)/corpusExact)
	mae := func(v []float64) float64 {
		s := 0.0
		for _, x := range v {
			s += math.Abs(x)
		}
		return s / float64(len(v))
	}
	worst := func(v []float64) float64 {
		w := append([]float64(nil), v...)
		sort.Float64s(w)
		return w[0]
	}
	t.Logf("mean |error|: estimate %.1f%%, bytes/4 %.1f%%; worst under-estimate: estimate %.1f%%, bytes/4 %.1f%%",
		100*mae(errs), 100*mae(quarterErrs), 100*worst(errs), 100*worst(quarterErrs))
	if mae(errs) > 0.10 || mae(errs) > mae(quarterErrs)/3 {
		t.Errorf("mean |error| %.1f%%: want at most 10%% and a third of bytes/4's %.1f%%", 100*mae(errs), 100*mae(quarterErrs))
	}
}
