package main

// A job's identity and settings (issue 11, items 2 and 9): which job a
// command means is decided by resolved values, never by how they were
// given; two jobs never write one output; and what a command says about a
// job that exists either takes effect or is refused, never silently
// ignored. README.md, section 4 ("Which job a command means", "Flags on a
// job that exists"), is the user's side.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/rs/zerolog"

	"github.com/sluice-batch/sluice"
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

// normalizeURL drops what does not change where a URL points: a trailing
// slash and the case of its scheme and host; and any credentials in it,
// which are never stored or shown.
func normalizeURL(s string) string {
	s = strings.TrimRight(strings.TrimSpace(s), "/")
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		if i := strings.LastIndex(s, "@"); i >= 0 { // unparsable: drop what may be user:password@
			if j := strings.Index(s, "://"); j >= 0 && j < i {
				return s[:j+3] + s[i+1:]
			}
		}
		return s
	}
	u.User = nil
	u.Scheme, u.Host = strings.ToLower(u.Scheme), strings.ToLower(u.Host)
	return strings.TrimRight(u.String(), "/")
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

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

// derivedJobName is the derived job name: the input's base name, the provider,
// and a hash of the input's path, the provider and key.
func derivedJobName(absInput, prov, key string) string {
	base := filepath.Base(absInput)
	for _, ext := range []string{".gz", ".zst", ".jsonl", ".json", ".ndjson", ".txt"} {
		base = strings.TrimSuffix(base, ext)
	}
	base = unsafeName.ReplaceAllString(base, "_")
	if len(base) > 40 {
		base = base[:40]
	}
	sum := sha256.Sum256([]byte(absInput + "\x00" + prov + "\x00" + key))
	return fmt.Sprintf("%s-%s-%s", strings.Trim(base, "._-"), prov, hex.EncodeToString(sum[:4]))
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
	legacy := f.legacyJobID(absInput)
	if legacy == id {
		return id, nil
	}
	if _, err := db.Job(ctx, id); err == nil || !errors.Is(err, tracker.ErrNotFound) {
		return id, err
	}
	j, err := db.Job(ctx, legacy)
	switch {
	case errors.Is(err, tracker.ErrNotFound):
		return id, nil
	case err != nil:
		return "", err
	case j.Endpoint != "": // planned by this version: another endpoint's job
		return id, nil
	}
	return legacy, nil
}

// checkOutputFree refuses to run the job of input into an output path that another
// job, not done yet, will write: two jobs never write one file. A done
// job's output is written; it no longer holds the path (a new job may
// replace the file, as any command writing there would).
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
	jobs, err := db.Jobs(ctx)
	if err != nil {
		return err
	}
	for _, j := range jobs {
		if j.ID == id || j.Output != out || j.State == sluice.JobDone {
			continue
		}
		return usageErr("--out %s is the output of job %s (%s, input %s): two jobs never write one file; "+
			"continue that job (sluice run ... --job %s), wait until it is done, or choose another --out",
			out, j.ID, j.State, j.Input, j.ID)
	}
	return nil
}

// checkSettings compares what this command says with a job that exists.
// What shaped the plan (provider, endpoint, model, the per-batch limits)
// cannot change: a flag that says otherwise is refused, naming it. What
// may change while a job runs (live batches, enqueued tokens, attempts) is
// recorded and takes effect; the rest of run's flags (rate, concurrency,
// poll intervals, deadline, stuck-after) are never stored and always do.
func (f *jobFlags) checkSettings(ctx context.Context, db tracker.Backend, job *sluice.Job, p provider.Preset, log zerolog.Logger) error {
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
