package lifecycle

import (
	"context"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/pricing"
)

// checkCap refuses (ErrBadInput) a spend cap that cannot be kept: a model of a chunk
// still to run without a price, or without a bound on its output. It
// records the cap (status shows it) before anything is submitted.
func checkCap(ctx context.Context, db Store, job *sluice.Job, o RunOptions) error {
	if o.MaxCost <= 0 {
		return db.SetMaxCost(ctx, job.ID, nil)
	}
	chunks, err := db.Chunks(ctx, job.ID)
	if err != nil {
		return err
	}
	for _, c := range chunks {
		if c.State.Terminal() {
			continue
		}
		var pr pricing.Price
		ok := false
		if o.Price != nil {
			pr, ok = o.Price(c.Model)
		}
		if !ok {
			return badInputf("--max-cost: no price for model %q at provider %s, so its cost is unknown and the cap could not be kept; give its batch prices with --prices FILE (docs/money.md)", c.Model, job.Provider)
		}
		if e := pricing.Of(pr, true, sluice.Learned{}, pricing.WorkOf(c)); !e.Bounded() {
			return badInputf("--max-cost: %d request(s) for model %q set no max_tokens and the model's output ceiling is unknown, so the cap could not be kept; set max_tokens in the requests or max_output_tokens for the model with --prices FILE", c.NoMaxRequests, c.Model)
		}
	}
	return db.SetMaxCost(ctx, job.ID, &o.MaxCost)
}
