package main

import (
	"context"
	"fmt"
	"math"
	"os"

	"github.com/spf13/cobra"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/dispatcher"
	"github.com/sluice-batch/sluice/pricing"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/tracker"
)

// Money on the command line (docs/money.md): prices, cost estimates, the
// spend cap and the reuse of earlier answers.

// moneyFlags are the flags of plan and run about money.
type moneyFlags struct {
	prices  string
	maxCost float64 // run only
}

func (m *moneyFlags) register(cmd *cobra.Command, f *jobFlags) {
	fs := cmd.Flags()
	fs.BoolVar(&f.reuse, "reuse", true, "answer a request whose body an earlier job in this state directory already bought (same provider, base URL, model, url and body, and --default-max-tokens when set) from that job's result instead of buying it again; --reuse=false buys everything (docs/money.md)")
	fs.StringVar(&m.prices, "prices", "", "JSON or YAML file of batch prices (USD per million tokens) that overrides or extends the built-in table (docs/money.md)")
}

// table is the price table in force.
func (m *moneyFlags) table() (*pricing.Table, error) {
	t, err := pricing.Load(m.prices)
	if err != nil {
		return nil, withCode(exitUsage, err)
	}
	activePrices = t
	return t, nil
}

// keyScope is what, besides model, url and body, makes a request's answer
// the same: the provider, the base URL it resolves to, and
// --default-max-tokens when set.
func keyScope(f *jobFlags, p provider.Preset) string {
	base := f.baseURL
	if base == "" && p.BaseURLEnv != "" {
		base = os.Getenv(p.BaseURLEnv)
	}
	if base == "" {
		base = p.BaseURL
	}
	// lifecycle.Prepare adds the job's --default-max-tokens, as planned
	// (a re-plan keeps the job's own when the command gives none).
	return p.Name + "\x00" + base
}

// registerRun adds the flags only run has.
func (m *moneyFlags) registerRun(cmd *cobra.Command) {
	cmd.Flags().Float64Var(&m.maxCost, "max-cost", 0, "spend cap in USD for this job: never submit a batch that could take its committed spend (actual cost of ended batches + upper bound of live ones + the new one) past it; when nothing more fits, let live batches end and exit 3 (docs/money.md). Needs a price for every model (--prices)")
}

// checkRun checks the money flags of run before any work and returns the
// price table.
func (m *moneyFlags) checkRun() (*pricing.Table, error) {
	if m.maxCost < 0 || math.IsNaN(m.maxCost) || math.IsInf(m.maxCost, 0) {
		return nil, usageErr("--max-cost %v: want a positive amount of USD", m.maxCost)
	}
	return m.table()
}

// priceOf prices the models of a job at preset p.
func priceOf(t *pricing.Table, p provider.Preset) func(string) (pricing.Price, bool) {
	return func(model string) (pricing.Price, bool) { return t.Lookup(p.Name, model) }
}

// capReached ends a run the spend cap stopped: exit 3 with what was
// committed.
func capReached(ctx context.Context, db tracker.Backend, job *sluice.Job, p provider.Preset, t *pricing.Table, limit float64) error {
	printProgressSummary(ctx, db, job)
	chunks, err := db.Chunks(ctx, job.ID)
	if err != nil {
		return err
	}
	learned, _ := db.Learned(ctx)
	s := dispatcher.SpendOf(chunks, priceOf(t, p), learned)
	return withCode(exitStopped, fmt.Errorf("%s; run again with a higher --max-cost to carry on", dispatcher.CapMessage(s.Committed, limit)))
}
