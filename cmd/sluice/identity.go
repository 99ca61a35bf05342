package main

// A job's identity and settings (issue 11, items 2 and 9): which job a
// command means is decided by resolved values, never by how they were
// given; two jobs never write one output; and what a command says about a
// job that exists either takes effect or is refused, never silently
// ignored. README.md, section 4 ("Which job a command means", "Flags on a
// job that exists"), is the user's side.

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"github.com/rs/zerolog"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/lifecycle"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/tracker"
)

// resolvedBaseURL is the base URL the provider client talks to: --base-url,
// else the provider's environment variable (OPENAI_BASE_URL, ...), else its
// preset's default.
func (f *jobFlags) resolvedBaseURL(p provider.Preset) string {
	if f.baseURL != "" {
		return f.baseURL
	}
	if p.BaseURLEnv != "" {
		if v := os.Getenv(p.BaseURLEnv); v != "" {
			return v
		}
	}
	return p.BaseURL
}

// endpoint names where a job's batches live: the resolved base URL,
// normalised, and for Cloudflare the account. Empty for the built-in
// emulator, whose batches live in the state directory.
func (f *jobFlags) endpoint(p provider.Preset) string {
	if p.Name == "local" {
		return ""
	}
	return normalizeURL(f.resolvedBaseURL(p)) + accountOf(p)
}

// accountOf is the account part of an endpoint (Cloudflare), or "".
func accountOf(p provider.Preset) string {
	if p.AccountEnv != "" {
		if a := os.Getenv(p.AccountEnv); a != "" {
			return " account " + a
		}
	}
	return ""
}

// normalizeURL is lifecycle.NormalizeURL.
func normalizeURL(s string) string { return lifecycle.NormalizeURL(s) }

// jobID is --job, or a name derived from the input's absolute path, the
// provider and its resolved endpoint, so the same command finds the same
// job whether the base URL came from --base-url or from the environment.
// The provider's default endpoint hashes as empty, as it did before
// endpoints were resolved, so jobs planned then keep their names.
func (f *jobFlags) jobID(absInput string) string {
	if f.job != "" {
		return f.job
	}
	ep := ""
	if p, err := provider.Lookup(f.provider); err == nil && p.Name != "local" {
		if u := normalizeURL(f.resolvedBaseURL(p)); u != normalizeURL(p.BaseURL) {
			ep = u
		}
		ep += accountOf(p)
	}
	return derivedJobName(absInput, f.provider, ep+f.requestsKey())
}

// requestsKey is what else makes other requests of the same input: a model
// map and a default max_tokens (translation) are another job. Empty
// without them, so names stay as they were.
func (f *jobFlags) requestsKey() string {
	if f.modelMap == "" && f.maxTokens == 0 {
		return ""
	}
	return "\x00" + f.modelMap + "\x00" + strconv.FormatInt(f.maxTokens, 10)
}

// derivedJobName is lifecycle.DerivedJobName.
func derivedJobName(absInput, prov, key string) string {
	return lifecycle.DerivedJobName(absInput, prov, key)
}

// legacyJobID is the name earlier versions derived: from --base-url as
// typed, the empty string when the endpoint came from the environment.
func (f *jobFlags) legacyJobID(absInput string) string {
	return derivedJobName(absInput, f.provider, f.baseURL+f.requestsKey())
}

// findJobID is the job this command means: jobID, or a job an earlier
// version planned under its legacy name for the same endpoint given from
// the environment, so upgrading sluice mid-job never starts the job over
// and buys its batches again.
func (f *jobFlags) findJobID(ctx context.Context, db *tracker.DB, absInput string) (string, error) {
	id := f.jobID(absInput)
	if f.job != "" {
		return id, nil
	}
	return lifecycle.FindJobID(ctx, db, id, f.legacyJobID(absInput))
}

// checkOutputFree refuses to run the job of input into an output path
// that another job, not done yet, will write (lifecycle.CheckOutputFree).
func checkOutputFree(ctx context.Context, g *globalFlags, f *jobFlags, input, out string) error {
	db, err := g.openDB(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	id, err := f.findJobID(ctx, db, input)
	if err != nil {
		return err
	}
	return lifecycle.CheckOutputFree(ctx, db, id, out)
}

// checkSettings compares what this command says with a job that exists.
// What shaped the plan (provider, endpoint, model, the per-batch limits)
// cannot change: a flag that says otherwise is refused, naming it. What
// may change while a job runs (live batches, enqueued tokens, attempts) is
// recorded and takes effect; the rest of run's flags (rate, concurrency,
// poll intervals, deadline, stuck-after) are never stored and always do.
func (f *jobFlags) checkSettings(ctx context.Context, db *tracker.DB, job *sluice.Job, p provider.Preset, log zerolog.Logger) error {
	given := func(name string) bool { return f.given != nil && f.given(name) }
	refuse := func(flag, now, was string) error {
		return usageErr("%s %s: job %s was planned with %s, and what shaped a plan cannot change; "+
			"run with --job NEW_NAME to plan a new job with it (or leave %s out to continue this one)", flag, now, job.ID, was, flag)
	}
	if job.Provider != p.Name {
		return refuse("--provider", p.Name, "--provider "+job.Provider)
	}
	if ep := f.endpoint(p); job.Endpoint != "" && ep != job.Endpoint {
		flag := "--base-url"
		if f.baseURL == "" && p.BaseURLEnv != "" {
			flag = "$" + p.BaseURLEnv
		}
		return usageErr("%s points at %s: job %s has its batches at %s; run with --job NEW_NAME to start a new job there", flag, ep, job.ID, job.Endpoint)
	}
	if given("model") && f.model != job.Model {
		was := "--model " + job.Model
		if job.Model == "" {
			was = "no --model"
		}
		return refuse("--model", quoteEmpty(f.model), was)
	}
	eff := p.Limits.Override(f.limits)
	for _, c := range []struct {
		flag     string
		now, was int64
	}{
		{"max-batch-bytes", eff.MaxBatchBytes, job.Limits.MaxBatchBytes},
		{"max-batch-requests", int64(eff.MaxBatchRequests), int64(job.Limits.MaxBatchRequests)},
		{"max-batch-tokens", eff.MaxBatchTokens, job.Limits.MaxBatchTokens},
	} {
		if given(c.flag) && c.now != c.was {
			return refuse("--"+c.flag, fmt.Sprint(c.now), fmt.Sprintf("--%s %d", c.flag, c.was))
		}
	}
	lim, attempts := job.Limits, job.MaxAttempts
	if given("max-live-batches") {
		lim.MaxLiveBatches = eff.MaxLiveBatches
	}
	if given("max-enqueued-tokens") {
		lim.MaxEnqueuedTokens = eff.MaxEnqueuedTokens
	}
	if given("max-attempts") {
		attempts = f.maxAttempts
	}
	if lim == job.Limits && attempts == job.MaxAttempts {
		return nil
	}
	if err := db.SetJobSettings(ctx, job.ID, lim, attempts); err != nil {
		return err
	}
	log.Info().Int("max_live_batches", lim.MaxLiveBatches).Int64("max_enqueued_tokens", lim.MaxEnqueuedTokens).
		Int("max_attempts", attempts).Msg("job settings changed")
	job.Limits, job.MaxAttempts = lim, attempts
	return nil
}

func quoteEmpty(s string) string {
	if s == "" {
		return `""`
	}
	return s
}
