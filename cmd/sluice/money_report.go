package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/dispatcher"
	"github.com/sluice-batch/sluice/pricing"
	"github.com/sluice-batch/sluice/tracker"
)

// What plan, status and the run summary say about money (docs/money.md).

// planMoney prices a job's chunks.
type planMoney struct {
	job     *sluice.Job
	tbl     *pricing.Table
	learned map[string]sluice.Learned
	sources map[string]int64
}

func newPlanMoney(ctx context.Context, db tracker.Backend, job *sluice.Job, tbl *pricing.Table) (*planMoney, error) {
	learned, err := db.Learned(ctx)
	if err != nil {
		return nil, err
	}
	sources, err := db.ReuseSources(ctx, job.ID)
	if err != nil {
		return nil, err
	}
	return &planMoney{job: job, tbl: tbl, learned: learned, sources: sources}, nil
}

// chunkMoneyJSON is a chunk's cost in plan --json.
type chunkMoneyJSON struct {
	MaxOutputTokens int64 `json:"max_output_tokens"`
	NoMaxRequests   int   `json:"no_max_requests"`
	EstCost         *usd  `json:"est_cost_usd"` // null: unknown
	MaxCost         *usd  `json:"max_cost_usd"` // null: unknown or unbounded
}

// learnedJSON is what finished batches of a model taught.
type learnedJSON struct {
	sluice.Learned
	InputRatio  *float64 `json:"input_ratio"`  // provider input usage / sluice's estimate
	OutputRatio *float64 `json:"output_ratio"` // output / input usage
}

// planMoneyJSON is the plan's cost in plan --json.
type planMoneyJSON struct {
	EstCost     *usd                   `json:"est_cost_usd"` // null: unknown
	MaxCost     *usd                   `json:"max_cost_usd"` // null: unknown or unbounded
	PriceSource string                 `json:"price_source"`
	Prices      map[string]priceJSON   `json:"prices"`
	Unpriced    []string               `json:"unpriced_models"`
	Learned     map[string]learnedJSON `json:"learned"`
	Reused      int64                  `json:"reused_requests"`
	ReusedFrom  map[string]int64       `json:"reused_from"`
}

type priceJSON struct {
	pricing.Price
	Provider string `json:"provider"`
}

// usd is an amount of dollars in JSON: a decimal number rounded to
// usdDecimals places (a tenth of a millionth of a cent, far below one
// token's price), never float noise such as 0.0034045499999999997 nor an
// exponent.
type usd float64

const usdDecimals = 10

func (x usd) MarshalJSON() ([]byte, error) {
	s := strconv.FormatFloat(float64(x), 'f', usdDecimals, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	if s == "-0" {
		s = "0"
	}
	return []byte(s), nil
}

func finite(x float64) *usd {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	u := usd(x)
	return &u
}

func ratioPtr(r float64, ok bool) *float64 {
	if !ok {
		return nil
	}
	return &r
}

func (pm *planMoney) estimate(c *sluice.Chunk) pricing.Estimate {
	p, ok := pm.tbl.Lookup(pm.job.Provider, c.Model)
	return pricing.Of(p, ok, pm.learned[c.Model], pricing.WorkOf(c))
}

func (pm *planMoney) chunk(c *sluice.Chunk) chunkMoneyJSON {
	e := pm.estimate(c)
	return chunkMoneyJSON{MaxOutputTokens: c.MaxOutputTokens, NoMaxRequests: c.NoMaxRequests,
		EstCost: finite(e.Cost), MaxCost: finite(e.MaxCost)}
}

// total adds up the first attempts' chunks: the plan.
func (pm *planMoney) total(chunks []*sluice.Chunk) planMoneyJSON {
	doc := planMoneyJSON{PriceSource: pm.tbl.Source, Prices: map[string]priceJSON{}, Unpriced: []string{},
		Learned: map[string]learnedJSON{}, Reused: pm.job.Reused, ReusedFrom: pm.sources}
	est, most := 0.0, 0.0
	for _, c := range chunks {
		if c.Attempt != 1 {
			continue
		}
		e := pm.estimate(c)
		est += e.Cost
		most += e.MaxCost
		if p, ok := pm.tbl.Lookup(pm.job.Provider, c.Model); ok {
			doc.Prices[c.Model] = priceJSON{Price: p, Provider: pm.job.Provider}
		} else if !contains(doc.Unpriced, c.Model) {
			doc.Unpriced = append(doc.Unpriced, c.Model)
		}
		if l, ok := pm.learned[c.Model]; ok {
			r, rok := l.InputRatio()
			o, ook := l.OutputRatio()
			doc.Learned[c.Model] = learnedJSON{Learned: l, InputRatio: ratioPtr(r, rok), OutputRatio: ratioPtr(o, ook)}
		}
	}
	doc.EstCost, doc.MaxCost = finite(est), finite(most)
	return doc
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// costCell is a cost in a table: unknown is said, never 0.
func costCell(x *usd) string {
	if x == nil {
		return "unknown"
	}
	return dispatcher.USD(float64(*x))
}

func writePlanMoney(w io.Writer, m *planMoneyJSON) {
	switch {
	case m.EstCost != nil:
		fmt.Fprintf(w, "estimated cost: %s", dispatcher.USD(float64(*m.EstCost)))
		if m.MaxCost != nil {
			fmt.Fprintf(w, ", at most %s", dispatcher.USD(float64(*m.MaxCost)))
		}
		fmt.Fprintf(w, " (prices: %s)\n", m.PriceSource)
	case len(m.Unpriced) > 0:
		fmt.Fprintf(w, "estimated cost: unknown: no price for %s (give prices with --prices FILE; docs/money.md)\n", strings.Join(m.Unpriced, ", "))
	default:
		fmt.Fprintf(w, "estimated cost: unknown: requests without max_tokens for a model whose output ceiling is unknown (prices: %s)\n", m.PriceSource)
	}
	for _, model := range slices.Sorted(maps.Keys(m.Learned)) {
		l := m.Learned[model]
		if l.InputRatio != nil {
			fmt.Fprintf(w, "  %s: input estimate corrected by x%.3f, learned from finished batches (%s estimated, %s reported)",
				model, *l.InputRatio, commas(l.EstTokens), commas(l.InputTokens))
			if l.OutputRatio != nil {
				fmt.Fprintf(w, "; expected output %.3f tokens per input token", *l.OutputRatio)
			}
			fmt.Fprintln(w)
		}
	}
	if m.Reused > 0 {
		fmt.Fprintf(w, "reused: %s requests answered from earlier jobs' results, not bought again (%s)\n", commas(m.Reused), fromJobs(m.ReusedFrom))
	}
}

// fromJobs says which jobs reused answers came from.
func fromJobs(m map[string]int64) string {
	var parts []string
	for _, j := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s from job %s", commas(m[j]), j))
	}
	return strings.Join(parts, ", ")
}

// activePrices is the price table of this command (--prices, else the
// built-in one), for the summaries that print spend.
var activePrices *pricing.Table

func pricesInForce() *pricing.Table {
	if activePrices == nil {
		activePrices = pricing.Builtin()
	}
	return activePrices
}

// spendJSON is a job's money in status --json and the run summary.
type spendJSON struct {
	ActualUSD    *usd     `json:"actual_usd"`    // priced provider usage of ended batches; null: unknown
	CommittedUSD *usd     `json:"committed_usd"` // actual + upper bound of live batches; null: unknown
	CapUSD       *usd     `json:"cap_usd"`       // the last run's --max-cost; null: none
	PriceSource  string   `json:"price_source"`
	Unpriced     []string `json:"unpriced_models"`
	// EstInputTokens is sluice's input estimate of the job's planned
	// requests (the job's est_input_tokens); InputTokens is the usage the
	// provider reported, UsageEstInputTokens sluice's estimate of exactly
	// the requests whose results reported it, InputRatio the one over the
	// other (issue 11 item 5: estimate vs actual).
	EstInputTokens      int64            `json:"est_input_tokens"`
	InputTokens         int64            `json:"input_tokens"`
	UsageEstInputTokens int64            `json:"usage_est_input_tokens"`
	InputRatio          *float64         `json:"input_ratio"`
	Reused              int64            `json:"reused_requests"`
	ReusedFrom          map[string]int64 `json:"reused_from"`
}

func jobMoney(ctx context.Context, db tracker.Backend, job *sluice.Job, chunks []*sluice.Chunk) *spendJSON {
	tbl := pricesInForce()
	learned, _ := db.Learned(ctx)
	s := dispatcher.SpendOf(chunks, func(m string) (pricing.Price, bool) { return tbl.Lookup(job.Provider, m) }, learned)
	m := &spendJSON{PriceSource: tbl.Source, Unpriced: s.Unpriced, Reused: job.Reused}
	if m.Unpriced == nil {
		m.Unpriced = []string{}
	}
	if len(s.Unpriced) == 0 {
		m.ActualUSD, m.CommittedUSD = finite(s.Actual), finite(s.Committed)
	}
	if c, _ := db.MaxCost(ctx, job.ID); c != nil {
		m.CapUSD = finite(*c)
	}
	var l sluice.Learned
	for _, c := range chunks {
		l = l.Add(sluice.Learned{EstTokens: c.UsageEstTokens, InputTokens: c.InputTokens, OutputTokens: c.OutputTokens})
		if c.Attempt == 1 {
			m.EstInputTokens += c.EstTokens // as status's est_input_tokens
		}
	}
	m.UsageEstInputTokens, m.InputTokens = l.EstTokens, l.InputTokens
	m.InputRatio = ratioPtr(l.InputRatio())
	m.ReusedFrom, _ = db.ReuseSources(ctx, job.ID)
	return m
}

// writeMoney prints a job's money lines, indented as prefix says.
func writeMoney(w io.Writer, m *spendJSON, label func(string) string) {
	if m == nil {
		return
	}
	line := costCell(m.ActualUSD) + " spent (provider usage priced with " + m.PriceSource + " prices)"
	if m.CommittedUSD != nil && m.ActualUSD != nil && *m.CommittedUSD > *m.ActualUSD {
		line += ", committed " + costCell(m.CommittedUSD) + " with live batches at their upper bound"
	}
	if m.CapUSD != nil {
		line += ", cap " + dispatcher.USD(float64(*m.CapUSD))
	}
	if len(m.Unpriced) > 0 {
		line += "; no price for " + strings.Join(m.Unpriced, ", ")
	}
	fmt.Fprintln(w, label("spend")+line)
	if m.InputRatio != nil {
		fmt.Fprintf(w, "%sinput tokens ~%s estimated, %s reported by the provider (x%.3f)\n", label("estimate"),
			commas(m.UsageEstInputTokens), commas(m.InputTokens), *m.InputRatio)
	}
	if m.Reused > 0 {
		fmt.Fprintf(w, "%s%s requests answered from earlier jobs' results, not bought again (%s)\n", label("reused"), commas(m.Reused), fromJobs(m.ReusedFrom))
	}
}
