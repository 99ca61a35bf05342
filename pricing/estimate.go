package pricing

import (
	"math"

	"github.com/sluice-batch/sluice"
)

// InputMargin is how far above sluice's input estimate (corrected by what
// finished batches taught, when it is above 1) the upper bound of a
// chunk's input goes: the estimate has no hard bound, and the spend cap
// must hold while the first batches of a model are still teaching it
// (docs/money.md).
const InputMargin = 1.25

// Work is what an estimate of one chunk (or of several added up) needs.
type Work struct {
	EstTokens       int64 // sluice's input estimate
	MaxOutputTokens int64 // the sum of the max output tokens its requests set
	NoMaxRequests   int   // its requests that set none
}

// Estimate is the cost of some work before it is bought.
type Estimate struct {
	// Known is false when the model has no price: every cost is unknown.
	Known bool
	// InputTokens and OutputTokens are the expected usage: the estimate
	// corrected by the lessons of finished batches of the model where
	// there are any, else the estimate and the output's upper bound.
	InputTokens, OutputTokens int64
	// MaxInputTokens and MaxOutputTokens are the upper bound;
	// MaxOutputTokens is -1 when unbounded (requests without max_tokens for
	// a model whose ceiling is unknown).
	MaxInputTokens, MaxOutputTokens int64
	// Cost and MaxCost are in USD; +Inf when unbounded, NaN when unknown.
	Cost, MaxCost float64
	// Learned says the lessons of finished batches corrected it.
	Learned bool
}

// Estimate prices w for a model at price p (known: the model has one), with
// what finished batches of the model taught (l; zero when none).
func Of(p Price, known bool, l sluice.Learned, w Work) Estimate {
	e := Estimate{Known: known, InputTokens: w.EstTokens, MaxOutputTokens: w.MaxOutputTokens}
	in := 1.0
	if r, ok := l.InputRatio(); ok {
		in, e.Learned = r, true
		e.InputTokens = int64(math.Round(float64(w.EstTokens) * r))
	}
	e.MaxInputTokens = int64(math.Ceil(float64(w.EstTokens) * max(in, 1) * InputMargin))
	if w.NoMaxRequests > 0 {
		switch {
		case p.MaxOutputTokens > 0:
			e.MaxOutputTokens += int64(w.NoMaxRequests) * p.MaxOutputTokens
		case known && p.Output == 0:
			// No output is priced (embeddings): its bound does not matter.
		default:
			e.MaxOutputTokens = -1
		}
	}
	e.OutputTokens = e.MaxOutputTokens
	if r, ok := l.OutputRatio(); ok {
		e.Learned = true
		exp := int64(math.Round(float64(e.InputTokens) * r))
		if e.MaxOutputTokens < 0 || exp < e.MaxOutputTokens {
			e.OutputTokens = exp
		}
	}
	if !known {
		e.Cost, e.MaxCost = math.NaN(), math.NaN()
		return e
	}
	e.Cost, e.MaxCost = math.Inf(1), math.Inf(1)
	if e.OutputTokens >= 0 {
		e.Cost = p.Cost(e.InputTokens, e.OutputTokens)
	} else if p.Output == 0 {
		e.Cost = p.Cost(e.InputTokens, 0)
	}
	if e.MaxOutputTokens >= 0 {
		e.MaxCost = p.Cost(e.MaxInputTokens, e.MaxOutputTokens)
	} else if p.Output == 0 {
		e.MaxCost = p.Cost(e.MaxInputTokens, 0)
	}
	return e
}

// Bounded reports whether the estimate has a finite upper bound.
func (e Estimate) Bounded() bool {
	return e.Known && !math.IsInf(e.MaxCost, 0) && !math.IsNaN(e.MaxCost)
}

// WorkOf is the work of a chunk.
func WorkOf(c *sluice.Chunk) Work {
	return Work{EstTokens: c.EstTokens, MaxOutputTokens: c.MaxOutputTokens, NoMaxRequests: c.NoMaxRequests}
}
