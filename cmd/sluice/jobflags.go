package main

import (
	"regexp"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/provider"
)

// jobFlags are the flags that define a job: shared by plan and run.
type jobFlags struct {
	provider    string
	baseURL     string
	job         string
	model       string
	modelMap    string
	maxTokens   int64
	skipInvalid bool
	rejects     string
	limits      sluice.Limits
	maxAttempts int
	money       moneyFlags
	reuse       bool
	store       string // --store (objects.go)
	// bucket is the bucket the provider's batches live in, as resolved
	// (Vertex, Bedrock; bucket.go), and bucketFlag the flag naming it.
	bucket, bucketFlag string
	// given reports whether a flag was given on the command line (see
	// checkSettings).
	given func(name string) bool
}

// register adds the flags that shape a plan (plan and run take them);
// registerRun adds those only a run uses.
func (f *jobFlags) register(cmd *cobra.Command) {
	f.maxAttempts = sluice.DefaultMaxAttempts
	fs := cmd.Flags()
	f.given = fs.Changed
	fs.StringVar(&f.provider, "provider", "local", "provider: "+strings.Join(provider.Names(), ", ")+" (local = the built-in emulator, no key needed; it takes OpenAI, Anthropic, Cloudflare and Gemini lines)")
	fs.StringVar(&f.baseURL, "base-url", "", "provider API base URL, as the provider's official SDK takes it (OpenAI-compatible: https://HOST/v1; Anthropic: https://api.anthropic.com; Cloudflare: https://api.cloudflare.com/client/v4; Gemini: https://generativelanguage.googleapis.com, no version); default from the provider's environment variable (e.g. OPENAI_BASE_URL) or its preset")
	fs.StringVar(&f.job, "job", "", "job name (default: derived from the input path, the provider and the endpoint its base URL resolves to, so re-running the same command resumes the same job)")
	fs.StringVar(&f.model, "model", "", "model for input lines whose body has no model")
	fs.StringVar(&f.modelMap, "model-map", "", "old=new,...: send /v1/chat/completions lines written for model old to model new (e.g. gpt-4o-mini=claude-haiku-4-5); chat lines are translated for anthropic, cloudflare, gemini, mistral and together (docs/translation.md)")
	fs.Int64Var(&f.maxTokens, "default-max-tokens", 0, "max_tokens for translated /v1/chat/completions lines that set neither max_tokens nor max_completion_tokens (Anthropic requires one; without this flag such lines are refused)")
	fs.BoolVar(&f.skipInvalid, "skip-invalid", false, "reject bad input lines instead of stopping at the first one: each is written with its line number and reason to the rejects file and the errors file (code invalid_request), and, when it has a custom_id no earlier line took, to the output in its place; the run then exits 4")
	fs.StringVar(&f.rejects, "rejects", "", "where --skip-invalid writes bad lines (default: rejects.jsonl in the job directory)")
	fs.Int64Var(&f.limits.MaxBatchBytes, "max-batch-bytes", 0, "bytes per batch on the provider's wire, envelope included (default: the provider's limit)")
	fs.IntVar(&f.limits.MaxBatchRequests, "max-batch-requests", 0, "requests per batch (default: the provider's limit)")
	fs.Int64Var(&f.limits.MaxBatchTokens, "max-batch-tokens", 0, "estimated input tokens per batch (default: no limit)")
	registerMinBatch(fs, &f.limits)
	fs.Int64Var(&f.limits.MaxEnqueuedTokens, "max-enqueued-tokens", 0, "estimated input tokens live at the provider per model, e.g. your OpenAI tier's enqueued-token limit (default: no limit)")
	fs.StringVar(&f.store, "store", "", "where the job's chunk and results files are kept: s3://BUCKET/PREFIX or a directory shared by the machines of a job; the state directory is then a cache of them (default $SLUICE_STORE, else the state directory itself; docs/scale-out.md)")
	f.money.register(cmd, f)
}

func (f *jobFlags) registerRun(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.IntVar(&f.limits.MaxLiveBatches, "max-live-batches", 0, "batches live at the provider at once (per model for Bedrock, whose quota is per model; default: the provider's limit, else no limit)")
	fs.IntVar(&f.maxAttempts, "max-attempts", sluice.DefaultMaxAttempts, "attempts per request: requests that expire, are cancelled, or fail with 429/5xx are retried in new batches up to this many times")
}

func (f *jobFlags) preset() (provider.Preset, error) {
	p, err := provider.Lookup(f.provider)
	if err != nil {
		return p, withCode(exitUsage, err)
	}
	return p, nil
}

func (f *jobFlags) check() error {
	l := f.limits
	if l.MaxBatchBytes < 0 || l.MaxBatchRequests < 0 || l.MaxBatchTokens < 0 || l.MaxLiveBatches < 0 || l.MaxEnqueuedTokens < 0 || l.MinBatchRequests < 0 {
		return usageErr("limits must not be negative")
	}
	if f.maxAttempts < 1 {
		return usageErr("--max-attempts must be at least 1")
	}
	if f.maxTokens < 0 {
		return usageErr("--default-max-tokens must not be negative")
	}
	if _, err := provider.ParseModelMap(f.modelMap); err != nil {
		return withCode(exitUsage, err)
	}
	if f.job != "" && !jobName.MatchString(f.job) {
		return usageErr("--job %q: use letters, digits, '.', '_' and '-' (at most 100)", f.job)
	}
	return nil
}

var jobName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`)
