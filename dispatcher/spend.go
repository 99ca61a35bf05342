package dispatcher

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"strconv"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/pricing"
)

// Spend and lessons (docs/money.md).
//
// With Options.MaxCost the dispatcher never submits a chunk that could take
// the job's committed spend past the cap: committed is the actual cost of
// the chunks that ended (the provider's usage, priced), plus the upper
// bound of every chunk that may be live at the provider (submitted, or
// caught mid-call), plus the upper bound of the chunk to submit. The upper
// bound of a chunk is its requests' max output tokens and its input
// estimate with a margin (pricing.Of). When nothing more fits and nothing
// is live, Run returns CapReached.
//
// With Options.Learned the input estimate of every chunk is corrected by
// what finished batches of its model taught (provider usage / estimate),
// or what refusals taught if more, before it counts against
// MaxEnqueuedTokens (split.go).

// CapReached: the spend cap leaves no room for any chunk still to submit,
// and nothing is live. Running again with a higher cap carries on.
const CapReached Outcome = Stopped + 1

// Spend is what a job has spent and committed, in USD.
type Spend struct {
	Actual    float64 // priced provider usage of the chunks that ended
	Committed float64 // Actual plus the upper bound of live chunks
	// Unpriced lists models with usage but no price (their spend is not
	// in the figures).
	Unpriced []string
}

// inFlight reports whether a chunk in state s may have, or get, a batch
// at the provider without another admission: it counts against the cap.
func inFlight(s sluice.ChunkState) bool {
	return s == sluice.ChunkUploading || s == sluice.ChunkCreating || s == sluice.ChunkSubmitted
}

// SpendOf adds up the spend of chunks with prices price and lessons
// learned.
func SpendOf(chunks []*sluice.Chunk, price func(model string) (pricing.Price, bool), learned map[string]sluice.Learned) Spend {
	var s Spend
	seen := map[string]bool{}
	for _, c := range chunks {
		p, ok := price(c.Model)
		if c.Realtime() {
			p = p.Standard() // the synchronous API's full rate
		}
		switch {
		case c.State.Terminal() || c.InputTokens > 0 || c.OutputTokens > 0:
			if !ok {
				if (c.InputTokens > 0 || c.OutputTokens > 0) && !seen[c.Model] {
					seen[c.Model] = true
					s.Unpriced = append(s.Unpriced, c.Model)
				}
				continue
			}
			cost := p.Cost(c.InputTokens, c.OutputTokens)
			s.Actual += cost
			s.Committed += cost
		case inFlight(c.State):
			if ok {
				s.Committed += pricing.Of(p, true, learned[c.Model], pricing.WorkOf(c)).MaxCost
			}
		}
	}
	return s
}

// lessons refreshes what finished batches taught, when anything uses it.
func (d *Dispatcher) lessons(ctx context.Context) map[string]sluice.Learned {
	if d.opts.Learned == nil || (d.opts.MaxCost <= 0 && d.job.Limits.MaxEnqueuedTokens <= 0) {
		return nil
	}
	l, err := d.opts.Learned(ctx)
	if err != nil {
		d.log.Warn().Err(err).Msg("could not read what finished batches taught; using the plain estimate")
		return nil
	}
	d.setUsage(l)
	return l
}

// capCheck is the spend cap's state during one scheduling pass.
type capCheck struct {
	d         *Dispatcher
	learned   map[string]sluice.Learned
	committed float64
	blocked   int // chunks left waiting because they do not fit
}

func (d *Dispatcher) newCapCheck(chunks []*sluice.Chunk, learned map[string]sluice.Learned) *capCheck {
	if d.opts.MaxCost <= 0 {
		return nil
	}
	s := SpendOf(chunks, d.price, learned)
	return &capCheck{d: d, learned: learned, committed: s.Committed}
}

func (d *Dispatcher) price(model string) (pricing.Price, bool) {
	if d.opts.Price == nil {
		return pricing.Price{}, false
	}
	return d.opts.Price(model)
}

// admit reports whether c fits under the cap, and if so commits its upper
// bound.
func (k *capCheck) admit(c *sluice.Chunk) bool {
	if k == nil {
		return true
	}
	p, ok := k.d.price(c.Model)
	if c.Realtime() {
		p = p.Standard()
	}
	e := pricing.Of(p, ok, k.learned[c.Model], pricing.WorkOf(c))
	if !e.Bounded() || k.committed+e.MaxCost > k.d.opts.MaxCost {
		k.blocked++
		return false
	}
	k.committed += e.MaxCost
	return true
}

// CapMessage is what a run stopped by the cap says.
func CapMessage(committed, limit float64) string {
	return fmt.Sprintf("spend cap reached: %s committed of %s", USD(committed), USD(limit))
}

// USD formats an amount of dollars with the precision small amounts need.
func USD(x float64) string {
	switch {
	case x >= 1:
		return fmt.Sprintf("$%.2f", x)
	case x >= 0.01:
		return fmt.Sprintf("$%.4f", x)
	}
	return fmt.Sprintf("$%.6f", x)
}

// maxOutputKeys are the names of a request's max output tokens, as JSON
// keys with their quotes (Gemini's generationConfig.maxOutputTokens too);
// choiceKeys the names of how many answers it asks for, each up to that.
var (
	maxOutputKeys = [][]byte{[]byte(`"max_tokens"`), []byte(`"max_completion_tokens"`), []byte(`"max_output_tokens"`), []byte(`"maxOutputTokens"`)}
	choiceKeys    = [][]byte{[]byte(`"n"`), []byte(`"best_of"`), []byte(`"candidateCount"`)}
)

// itemMaxOutput is the upper bound of the output of one wire item of a
// chunk, for the chunks of a retry (their requests' max output tokens are
// not stored apart): the largest number given to one of the max output
// keys anywhere in the item, times the largest number of answers asked
// for. A key inside a string cannot match (its quotes are escaped there),
// and one nested deeper only raises the bound. ok is false when the item
// sets none.
func itemMaxOutput(item []byte) (n int64, ok bool) {
	if n, ok = largestNumber(item, maxOutputKeys); !ok {
		return 0, false
	}
	if c, cok := largestNumber(item, choiceKeys); cok && c > 1 {
		if n > 1e15/c {
			return 1e15, true
		}
		n *= c
	}
	return n, true
}

// largestNumber is the largest non-negative number given to one of keys
// anywhere in item; ok is false when none is.
func largestNumber(item []byte, keys [][]byte) (n int64, ok bool) {
	for _, k := range keys {
		rest := item
		for {
			i := bytes.Index(rest, k)
			if i < 0 {
				break
			}
			rest = rest[i+len(k):]
			j := 0
			for j < len(rest) && (rest[j] == ' ' || rest[j] == '\t' || rest[j] == '\n' || rest[j] == '\r') {
				j++
			}
			if j >= len(rest) || rest[j] != ':' {
				continue
			}
			j++
			for j < len(rest) && (rest[j] == ' ' || rest[j] == '\t' || rest[j] == '\n' || rest[j] == '\r') {
				j++
			}
			end := j
			for end < len(rest) && (rest[end] >= '0' && rest[end] <= '9' || rest[end] == '.' || rest[end] == 'e' || rest[end] == 'E' || rest[end] == '+' || rest[end] == '-') {
				end++
			}
			if end == j {
				continue
			}
			f, err := strconv.ParseFloat(string(rest[j:end]), 64)
			if err != nil || f < 0 || f > 1e15 {
				continue
			}
			if v := int64(math.Ceil(f)); !ok || v > n {
				n, ok = v, true
			}
		}
	}
	return n, ok
}
