// Package pricing is sluice's table of batch prices: per provider and
// model, USD per million input, cached input and output tokens with the
// provider's batch discount already applied, and where and when each price
// was taken. The built-in table is prices.json in this directory (embedded
// in the binary); a user file of the same shape, in JSON or YAML
// (--prices FILE), overrides or extends it. docs/money.md lists the
// sources and how sluice uses the prices.
//
// A model that is in neither is unknown: its cost is unknown, never zero.
package pricing

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

//go:embed prices.json
var builtin []byte

// Price is one model's batch price.
type Price struct {
	// Input, CachedInput and Output are USD per million tokens, batch
	// discount applied. CachedInput is nil where the provider has no
	// cached-input price for batches.
	Input       float64  `json:"input" yaml:"input"`
	CachedInput *float64 `json:"cached_input,omitempty" yaml:"cached_input,omitempty"`
	Output      float64  `json:"output" yaml:"output"`
	// MaxOutputTokens bounds the output of a request that sets no
	// max_tokens (the model's own ceiling); 0 when unknown.
	MaxOutputTokens int64 `json:"max_output_tokens,omitempty" yaml:"max_output_tokens,omitempty"`
	// Source and Taken say where and when the price was taken; an entry
	// without them inherits its provider's.
	Source string `json:"source,omitempty" yaml:"source,omitempty"`
	Taken  string `json:"taken,omitempty" yaml:"taken,omitempty"`
	// RealtimeInput and RealtimeOutput are the full (synchronous API)
	// rates, USD per million tokens, when the table knows them; without
	// them the full rate is StandardFactor times the batch price.
	RealtimeInput  *float64 `json:"realtime_input,omitempty" yaml:"realtime_input,omitempty"`
	RealtimeOutput *float64 `json:"realtime_output,omitempty" yaml:"realtime_output,omitempty"`
}

// StandardFactor is the full rate over the batch price where the table
// gives no realtime price: every provider in prices.json sells batches at
// 50% of its standard rate (each entry's source).
const StandardFactor = 2.0

// Standard is the price of the same model through the provider's
// synchronous API (the realtime fallback): RealtimeInput and
// RealtimeOutput where set, else StandardFactor times the batch price.
func (p Price) Standard() Price {
	s := p
	s.Input, s.Output = p.Input*StandardFactor, p.Output*StandardFactor
	if p.CachedInput != nil {
		c := *p.CachedInput * StandardFactor
		s.CachedInput = &c
	}
	if p.RealtimeInput != nil {
		s.Input = *p.RealtimeInput
	}
	if p.RealtimeOutput != nil {
		s.Output = *p.RealtimeOutput
	}
	return s
}

// Provider is one provider's prices.
type Provider struct {
	Source string           `json:"source,omitempty" yaml:"source,omitempty"`
	Taken  string           `json:"taken,omitempty" yaml:"taken,omitempty"`
	Models map[string]Price `json:"models" yaml:"models"`
}

// File is the shape of prices.json and of a --prices file.
type File struct {
	Providers map[string]Provider `json:"providers" yaml:"providers"`
}

// Table is the prices in force: the built-in ones, overlaid by a user file.
type Table struct {
	providers map[string]Provider
	// Source names what the table was built from: "built-in" or
	// "built-in + FILE".
	Source string
}

// aliases are providers priced as another: the emulator (local) answers as
// OpenAI, and Azure's global batch deployments are priced as OpenAI's.
var aliases = map[string]string{"local": "openai", "azure": "openai"}

// Builtin returns the built-in table.
func Builtin() *Table {
	var f File
	if err := json.Unmarshal(builtin, &f); err != nil {
		panic("pricing: built-in prices.json: " + err.Error())
	}
	t := &Table{providers: map[string]Provider{}, Source: "built-in"}
	t.overlay(f)
	return t
}

// Load returns the built-in table overlaid with the file at path ("" for
// none). A file's provider replaces the built-in source and date when it
// gives them; its models are added, or replace built-in ones whole.
func Load(path string) (*Table, error) {
	t := Builtin()
	if path == "" {
		return t, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("prices: %w", err)
	}
	var f File
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yaml", ".yml":
		err = yaml.Unmarshal(b, &f)
	default:
		dec := json.NewDecoder(strings.NewReader(string(b)))
		dec.DisallowUnknownFields()
		err = dec.Decode(&f)
	}
	if err != nil {
		return nil, fmt.Errorf("prices file %s: %w", path, err)
	}
	if len(f.Providers) == 0 {
		return nil, fmt.Errorf("prices file %s: no providers (want {\"providers\": {NAME: {\"models\": {MODEL: {\"input\": USD, \"output\": USD}}}}})", path)
	}
	for pn, p := range f.Providers {
		for mn, m := range p.Models {
			if m.Input < 0 || m.Output < 0 || (m.CachedInput != nil && *m.CachedInput < 0) || m.MaxOutputTokens < 0 {
				return nil, fmt.Errorf("prices file %s: %s %s: prices must not be negative", path, pn, mn)
			}
		}
	}
	t.overlay(f)
	t.Source = "built-in + " + path
	return t, nil
}

func (t *Table) overlay(f File) {
	for name, p := range f.Providers {
		cur, ok := t.providers[name]
		if !ok {
			cur = Provider{Models: map[string]Price{}}
		}
		if p.Source != "" {
			cur.Source = p.Source
		}
		if p.Taken != "" {
			cur.Taken = p.Taken
		}
		for m, pr := range p.Models {
			if pr.Source == "" {
				pr.Source = p.Source
			}
			if pr.Taken == "" {
				pr.Taken = p.Taken
			}
			cur.Models[m] = pr
		}
		t.providers[name] = cur
	}
}

// dated matches a model snapshot's date suffix: -2024-07-18, -20241022.
var dated = regexp.MustCompile(`-(\d{4}-\d{2}-\d{2}|\d{8})$`)

// localFamilies are the tables --provider local looks in after openai's:
// its emulator serves every family's lines, each model at its own
// provider's price.
var localFamilies = []string{"anthropic", "cloudflare", "gemini", "mistral", "together"}

// Lookup returns the price of model at provider (a --provider name). A
// provider without an entry of its own is looked up as the one it is
// priced as (local and azure as openai); local, which runs every family's
// lines, then as each family's provider; a dated snapshot of a model
// (gpt-4o-mini-2024-07-18) without an entry of its own takes the model's.
func (t *Table) Lookup(provider, model string) (Price, bool) {
	names := []string{provider, aliases[provider]}
	if provider == "local" {
		names = append(names, localFamilies...)
	}
	for _, name := range names {
		p, ok := t.providers[name]
		if !ok {
			continue
		}
		if pr, ok := p.Models[model]; ok {
			return fill(pr, p), true
		}
		if base := dated.ReplaceAllString(model, ""); base != model {
			if pr, ok := p.Models[base]; ok {
				return fill(pr, p), true
			}
		}
		if provider != "local" {
			return Price{}, false
		}
	}
	return Price{}, false
}

func fill(pr Price, p Provider) Price {
	if pr.Source == "" {
		pr.Source = p.Source
	}
	if pr.Taken == "" {
		pr.Taken = p.Taken
	}
	return pr
}

// Models lists the priced (provider, model) pairs, sorted.
func (t *Table) Models() [][2]string {
	var out [][2]string
	for pn, p := range t.providers {
		for m := range p.Models {
			out = append(out, [2]string{pn, m})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i][0] != out[j][0] {
			return out[i][0] < out[j][0]
		}
		return out[i][1] < out[j][1]
	})
	return out
}

// Cost is the price of in input and out output tokens, in USD.
func (p Price) Cost(in, out int64) float64 {
	return float64(in)*p.Input/1e6 + float64(out)*p.Output/1e6
}
