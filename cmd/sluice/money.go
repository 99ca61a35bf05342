package main

import (
	"os"
	"path/filepath"
	"sort"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/pricing"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/splitter"
	"github.com/sluice-batch/sluice/tracker"
)

// Money on the command line (docs/money.md): prices, cost estimates, the
// spend cap and the reuse of earlier answers.

// moneyFlags are the flags of plan and run about money.
type moneyFlags struct {
	prices string
}

func (m *moneyFlags) register(cmd *cobra.Command, f *jobFlags) {
	fs := cmd.Flags()
	fs.BoolVar(&f.reuse, "reuse", true, "answer a request whose body an earlier job in this state directory already bought (same provider, base URL, model, url and body) from that job's result instead of buying it again; --reuse=false buys everything (docs/money.md)")
	fs.StringVar(&m.prices, "prices", "", "JSON or YAML file of batch prices (USD per million tokens) that overrides or extends the built-in table (docs/money.md)")
}

// table is the price table in force.
func (m *moneyFlags) table() (*pricing.Table, error) {
	t, err := pricing.Load(m.prices)
	if err != nil {
		return nil, withCode(exitUsage, err)
	}
	return t, nil
}

// keyScope is what, besides model, url and body, makes a request's answer
// the same: the provider and the base URL it resolves to.
func keyScope(f *jobFlags, p provider.Preset) string {
	base := f.baseURL
	if base == "" && p.BaseURLEnv != "" {
		base = os.Getenv(p.BaseURLEnv)
	}
	if base == "" {
		base = p.BaseURL
	}
	return p.Name + "\x00" + base
}

// recordReuse records in the plan the requests answered from earlier jobs.
func recordReuse(plan *tracker.Plan, res *splitter.Result, log zerolog.Logger) error {
	if res.ReuseRefused > 0 {
		log.Warn().Int64("requests", res.ReuseRefused).Msg("earlier answers whose results file is gone or changed were not reused; those requests will be bought")
	}
	if res.Reused == 0 {
		return nil
	}
	ev := log.Info().Int64("reused", res.Reused)
	for _, s := range sortedKeys(res.ReuseSources) {
		ev = ev.Int64("from "+s, res.ReuseSources[s])
	}
	ev.Msg("requests answered from earlier jobs' results; not bought again")
	return plan.SetReused(res.Reused, res.ReuseSources)
}

// reusedFiles are the job's results files of reused answers.
func reusedFiles(job *sluice.Job) []string {
	m, _ := filepath.Glob(filepath.Join(job.Dir, "results", "reused-*.results"))
	sort.Strings(m)
	return m
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
