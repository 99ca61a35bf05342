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
	"strings"

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
func (f *jobFlags) findJobID(ctx context.Context, db tracker.Backend, absInput string) (string, error) {
	id := f.jobID(absInput)
	if f.job != "" {
		return id, nil
	}
	return lifecycle.FindJobID(ctx, db, id, f.legacyJobID(absInput))
}

// checkOutputFree refuses to run the job of input into an output path
// that another job, not done yet, will write (lifecycle.CheckOutputFree).
// When that job is of the same input, planned otherwise than this command
// says (another endpoint, model map, ...), it is this command's job
// planned before: with nothing of it at the provider it is replaced (the
// command plans its own); else the refusal names what differs, what is at
// the provider, and the ways out (planChange).
func checkOutputFree(ctx context.Context, g *globalFlags, f *jobFlags, p provider.Preset, input, out string, shared bool, log zerolog.Logger) error {
	db, err := g.openDB(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	id, err := f.findJobID(ctx, db, input)
	if err != nil {
		return err
	}
	holder, err := lifecycle.OutputHolder(ctx, db, id, out)
	if err != nil || holder == nil {
		return err
	}
	ds := f.planDiffs(holder, p, true)
	if holder.Input != input || len(ds) == 0 {
		return lifecycle.OutputTaken(holder, out)
	}
	lock, err := db.LockJob(holder.ID)
	if err != nil {
		return err
	}
	defer lock.Unlock()
	if holder, err = db.Job(ctx, holder.ID); err != nil { // as it is under its lock
		return err
	}
	fp, err := lifecycle.JobFootprint(ctx, db, holder.ID)
	if err != nil {
		return err
	}
	if shared || !lifecycle.Replaceable(holder, fp) {
		return planChange(holder, ds, fp, shared, true)
	}
	if err := lifecycle.DeleteReplaceable(ctx, db, holder); err != nil {
		return err
	}
	log.Warn().Str("job", holder.ID).Str("now", id).Msgf("job %s, planned for this input and --out with %s, had nothing at the provider: replaced by job %s", holder.ID, wasList(ds), id)
	return nil
}

// planDiff is a value that shaped a job's plan which a command gives
// otherwise: the flag, the command's value, and the plan's as a phrase
// ("--model-map a=b", "no --model").
type planDiff struct{ flag, now, was string }

// planDiffs lists what this command says otherwise than job about what
// shaped its plan. The provider and the endpoint are always compared
// (resolved, whichever way they were given); the other flags only when
// given, unless all (a job of another name holding this command's --out:
// the command's values define its job whole).
func (f *jobFlags) planDiffs(job *sluice.Job, p provider.Preset, all bool) []planDiff {
	given := func(name string) bool { return all || f.given != nil && f.given(name) }
	was := func(flag, v string) string {
		if v == "" {
			return "no " + flag
		}
		return flag + " " + v
	}
	if job.Provider != p.Name { // the rest compares within one provider
		return []planDiff{{"--provider", p.Name, "--provider " + job.Provider}}
	}
	var ds []planDiff
	if ep := f.endpoint(p); job.Endpoint != "" && ep != job.Endpoint {
		flag := "--base-url"
		if f.baseURL == "" && p.BaseURLEnv != "" {
			flag = "$" + p.BaseURLEnv
		}
		ds = append(ds, planDiff{flag, ep, "the endpoint " + job.Endpoint})
	}
	if job.Bucket != "" && f.bucket != "" && f.bucket != job.Bucket { // bucket.go
		ds = append(ds, planDiff{f.bucketFlag, f.bucket, f.bucketFlag + " " + job.Bucket})
	}
	if given("model") && f.model != job.Model {
		ds = append(ds, planDiff{"--model", quoteEmpty(f.model), was("--model", job.Model)})
	}
	if job.PlanFlagsKnown {
		if mm := lifecycle.CanonicalModelMap(f.modelMap); given("model-map") && mm != job.ModelMap {
			ds = append(ds, planDiff{"--model-map", quoteEmpty(mm), was("--model-map", job.ModelMap)})
		}
		if given("default-max-tokens") && f.maxTokens != job.DefaultMaxTokens {
			ds = append(ds, planDiff{"--default-max-tokens", fmt.Sprint(f.maxTokens), was("--default-max-tokens", nonZero(job.DefaultMaxTokens))})
		}
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
			ds = append(ds, planDiff{"--" + c.flag, fmt.Sprint(c.now), fmt.Sprintf("--%s %d", c.flag, c.was)})
		}
	}
	return ds
}

// nowList and wasList say a list of planDiffs as the command gives them
// and as the plan had them.
func nowList(ds []planDiff) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = d.flag + " " + d.now
	}
	return strings.Join(parts, ", ")
}

func wasList(ds []planDiff) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = d.was
	}
	return strings.Join(parts, ", ")
}

// planChange refuses (exit 2) what ds say about job, which cannot take
// them: something of it is at the provider (fp), it is past running, or
// it is shared by workers (--join). The message names the flags, both
// values, what is at the provider, and the ways out. other: job is not
// the one this command names but holds its --out.
func planChange(job *sluice.Job, ds []planDiff, fp lifecycle.Footprint, shared, other bool) error {
	var why string
	switch {
	case !fp.Empty():
		why = fmt.Sprintf("it has %s at the provider", fp)
	case shared:
		why = "it is shared by workers (--join); plan it again from a run without --join"
	default:
		why = fmt.Sprintf("it is %s", job.State)
	}
	ways := fmt.Sprintf("continue it as planned (sluice run ... --job %s with its flags), ", job.ID)
	if job.State == sluice.JobPlanned || job.State == sluice.JobRunning {
		ways += fmt.Sprintf("stop it with 'sluice cancel %s' (what finished is merged into its output), ", job.ID)
	}
	ways += "or run with --job NEW_NAME to plan a new job"
	if other {
		ways += fmt.Sprintf(" into another --out (%s is this job's)", job.Output)
	}
	return usageErr("%s: job %s was planned with %s, and what shaped a plan changes only while nothing of the job is at the provider: %s; %s",
		nowList(ds), job.ID, wasList(ds), why, ways)
}

// checkSettings compares what this command says with a job that exists.
// What shaped the plan (provider, endpoint, model, model map, default
// max_tokens, the per-batch limits) takes effect only on a job with
// nothing at the provider, which is planned again (a *lifecycle.Replan;
// what the command leaves out keeps the job's values); otherwise a flag
// that says otherwise is refused, naming it (planChange). What may change
// while a job runs (live batches, enqueued tokens, attempts) is recorded
// and takes effect; the rest of run's flags (rate, concurrency, poll
// intervals, deadline, stuck-after) are never stored and always do.
// shared: the job's lock is shared with other workers (--join), which
// never plan a job again.
func (f *jobFlags) checkSettings(ctx context.Context, db tracker.Backend, job *sluice.Job, p provider.Preset, shared bool, log zerolog.Logger) error {
	given := func(name string) bool { return f.given != nil && f.given(name) }
	if ds := f.planDiffs(job, p, false); len(ds) > 0 {
		fp, err := lifecycle.JobFootprint(ctx, db, job.ID)
		if err != nil {
			return err
		}
		if shared || !lifecycle.Replaceable(job, fp) {
			return planChange(job, ds, fp, shared, false)
		}
		return &lifecycle.Replan{Why: fmt.Sprintf("%s (was %s)", nowList(ds), wasList(ds)), Keep: f.keep(job, p)}
	}
	if job.Bucket == "" && f.bucket != "" { // planned before the bucket was recorded (bucket.go)
		if err := db.SetJobBucket(ctx, job.ID, f.bucket); err != nil {
			return err
		}
		job.Bucket = f.bucket
	}
	eff := p.Limits.Override(f.limits)
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

// keep gives the Spec of job's new plan the job's own values of what
// this command leaves out (a job planned with --max-batch-requests 5 and
// run again with only another --base-url keeps its 5).
func (f *jobFlags) keep(job *sluice.Job, p provider.Preset) func(*lifecycle.Spec) {
	given := func(name string) bool { return f.given != nil && f.given(name) }
	return func(s *lifecycle.Spec) {
		if !given("model") {
			s.Model = job.Model
		}
		if job.PlanFlagsKnown && !given("model-map") {
			s.ModelMap = job.ModelMap
		}
		if job.PlanFlagsKnown && !given("default-max-tokens") {
			s.DefaultMaxTokens = job.DefaultMaxTokens
		}
		if job.Provider != p.Name { // limits and attempts are the new provider's
			return
		}
		l, jl := &s.Limits, job.Limits
		for _, c := range []struct {
			flag string
			keep func()
		}{
			{"max-batch-bytes", func() { l.MaxBatchBytes = jl.MaxBatchBytes }},
			{"max-batch-requests", func() { l.MaxBatchRequests = jl.MaxBatchRequests }},
			{"max-batch-tokens", func() { l.MaxBatchTokens = jl.MaxBatchTokens }},
			{"max-live-batches", func() { l.MaxLiveBatches = jl.MaxLiveBatches }},
			{"max-enqueued-tokens", func() { l.MaxEnqueuedTokens = jl.MaxEnqueuedTokens }},
			{"max-attempts", func() { s.MaxAttempts = job.MaxAttempts }},
		} {
			if !given(c.flag) {
				c.keep()
			}
		}
	}
}

func nonZero(n int64) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprint(n)
}

func quoteEmpty(s string) string {
	if s == "" {
		return `""`
	}
	return s
}
