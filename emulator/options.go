package emulator

import (
	"slices"
	"time"
)

// Options configures a Server. The zero value is a valid, fault-free emulator
// whose batches complete at the first poll after create. See the package
// documentation for the meaning of every knob and the decisions taken where
// docs/providers.md marks a behaviour as unconfirmed.
type Options struct {
	// BatchTime is the total time from create to completed. It is split into
	// phases: OpenAI validating 10%, in_progress 80%, finalizing 10%;
	// Anthropic in_progress 100%; Cloudflare queued 10%, running 90%.
	// 0 means a batch is done at the first read after create. A batch
	// keeps the BatchTime it was created under (recorded with it in
	// DataDir): a server restarted with another applies it to new batches.
	BatchTime time.Duration
	// DataDir, if set, keeps all state (files, batches, results, counters) on
	// disk so that a new Server on the same directory loses nothing. If empty,
	// metadata is in memory and contents are spooled to a temporary directory
	// removed by Close.
	DataDir string
	// Seed makes ids, fault choices and per-line fates reproducible.
	Seed int64

	// HTTPFaultRate is the share of API calls answered with a fault: 429 with
	// Retry-After, 500/502/503, or a connection reset mid-body.
	HTTPFaultRate float64
	// FaultKinds restricts the injected faults to a subset of "429", "500",
	// "502", "503", "reset". Empty means all of them.
	FaultKinds []string
	// FaultScript, when set, decides the fault of every API call in place
	// of HTTPFaultRate: it gets the call's method and URL path (no query)
	// and returns "" (no fault) or one of the fault kinds above (anything
	// else is no fault). Tests use it to play an exact sequence, such as a
	// create reset after it ran followed by failing listings. It is called
	// under a lock, one call at a time, in the order calls arrive.
	FaultScript func(method, path string) string
	// SlowRate is the share of API calls delayed by SlowDelay.
	SlowRate  float64
	SlowDelay time.Duration
	// SyncDelay is how long each synchronous (direct) call, such as POST
	// /v1/chat/completions, takes to answer after the model ran (and
	// counted it processed): the latency a realtime fallback meets, and a
	// window in which a client killed mid-call loses an answer it paid for.
	SyncDelay time.Duration
	// SyncLimit, when positive, is how many synchronous calls each
	// SyncWindow (default 1m) admits. Every answer then carries the
	// family's rate-limit headers (OpenAI: x-ratelimit-limit-requests,
	// -remaining-requests, -reset-requests as a duration; Anthropic:
	// anthropic-ratelimit-requests-limit, -remaining, -reset as RFC 3339);
	// a call past the limit gets a 429 with Retry-After, counted in
	// Stats.SyncRateLimited.
	SyncLimit  int
	SyncWindow time.Duration
	// RetryAfter is sent on injected 429s as Retry-After (whole seconds,
	// rounded up) and retry-after-ms. Default 1s.
	RetryAfter time.Duration

	// ExpireRate is the share of batches that expire with only part of their
	// lines done (the rest come back batch_expired / Anthropic "expired").
	ExpireRate float64
	// ExpireDoneFraction is the fraction of lines done in an expiring batch.
	// 0 means the default 0.5; a negative value means none.
	ExpireDoneFraction float64
	// ValidationFailRate is the share of OpenAI, Mistral and Together
	// batches that fail validation.
	ValidationFailRate float64
	// LineErrorRate is the share of lines that come back as per-request
	// errors: a quarter 429, a quarter 500 (retryable), half 400 (permanent).
	LineErrorRate float64
	// OmitRate is the share of lines missing from every result file (they are
	// still executed and counted).
	OmitRate float64
	// Hostile output: result files and batch lifecycles a client must not
	// trust. Each rate is a share (0..1); fates are pure functions of the
	// seed and the batch id (and line), except TruncateDownloadRate, drawn
	// per download of each result. See the package documentation.

	// MalformedLineRate is the share of result lines replaced by a line
	// that does not parse as a result: half cut in the middle (not JSON;
	// Cloudflare: a bare JSON string, as its answer is one document), half
	// JSON without the custom_id (Cloudflare: without id and
	// external_reference). The request was executed; its result is lost.
	MalformedLineRate float64
	// UnknownCustomIDRate is the share of result lines followed by an
	// extra line for a custom_id that was never sent ("ghost-…").
	UnknownCustomIDRate float64
	// DuplicateLineRate is the share of result lines written twice. The
	// copy of a succeeded line is a retryable 500 error for the same
	// custom_id, written before it (OpenAI: in the error file); the copy of
	// any other line is identical.
	DuplicateLineRate float64
	// TruncateDownloadRate is the share of result downloads (OpenAI file
	// content, Anthropic results, Cloudflare final poll answers) that
	// promise the full Content-Length but send half the body and drop the
	// connection.
	TruncateDownloadRate float64
	// OutputFile404Rate is the share of batches whose output (OpenAI,
	// Mistral, Together: output file content; Anthropic: results) answers
	// 404 although the batch says it completed. Not applied to Cloudflare.
	OutputFile404Rate float64
	// StuckRate is the share of batches that get stuck in StuckPhase and
	// never leave it, far past the 24h window, until cancelled.
	StuckRate float64
	// StuckPhase is "finalizing" (default: every line ran; OpenAI
	// finalizing, Anthropic in_progress, Cloudflare running, Mistral
	// RUNNING, Together IN_PROGRESS) or "validating" (nothing ran; OpenAI
	// validating, Anthropic in_progress, Cloudflare queued, Mistral QUEUED,
	// Together VALIDATING).
	StuckPhase string
	// ForgetBatchRate is the share of batches the emulator forgets right
	// after create answered (Together: 201): polls get 404 (Cloudflare: 400, unknown
	// request_id), listings omit them, and none of their lines run.
	ForgetBatchRate float64

	// EnqueuedTokenLimit is, per model, the maximum sum of estimated input
	// tokens of running batches. An OpenAI batch beyond it ends failed with
	// token_limit_exceeded after create returned 200; an Anthropic create
	// beyond it gets 429 rate_limit_error. Not applied to Mistral and
	// Together (how they report it is unconfirmed). 0 = unlimited.
	EnqueuedTokenLimit int64

	// OpenAI limits: requests per batch (default 50000), bytes of a batch
	// input file (default 200_000_000), bytes of any uploaded file (default
	// 512_000_000).
	MaxRequestsPerBatch int
	MaxBatchBytes       int64
	MaxFileBytes        int64
	// Anthropic limits: requests per batch (default 100000) and request body
	// bytes (default 256_000_000).
	AnthropicMaxRequests int
	AnthropicMaxBytes    int64
	// Mistral limits: requests per job (default 1_000_000, the guide's
	// figure; docs/providers/mistral.md). Its files are bounded by
	// MaxFileBytes.
	MistralMaxRequests int
	// Together limits: requests per batch (default 50000) and bytes of a
	// batch input file (default 100_000_000).
	TogetherMaxRequests int
	TogetherMaxBytes    int64
	// BedrockMinRecords: a Bedrock job of fewer records fails validation,
	// as the service's per-model minimum makes it (0: no minimum).
	BedrockMinRecords int
	// CloudflareMaxBytes: a payload of this size or more gets 413 / 3006
	// (default 10_000_000).
	CloudflareMaxBytes int64
	// CloudflareModels is the list of async-capable models (default: the
	// models docs/providers.md lists): a batch queued for another model is
	// refused 400 code 5007, as the live API refuses it, unless
	// CloudflareAnyModel is set. Synchronous runs take any model.
	CloudflareModels   []string
	CloudflareAnyModel bool
	// CloudflareItemErrorString makes failed Cloudflare items carry
	// "error":"message" instead of the default "error":{"code":N,"message":"…"}.
	CloudflareItemErrorString bool

	// Gemini limits: bytes of an uploaded file (default 2 GB, the Files API
	// and batch input limit) and batches pending or running at once
	// (default 100; create beyond it answers 429 RESOURCE_EXHAUSTED).
	GeminiMaxFileBytes     int64
	GeminiMaxActiveBatches int
	// GeminiUploadGranularity is the X-Goog-Upload-Chunk-Granularity a
	// resumable upload announces (default 8 MiB): chunks other than the last
	// must be a multiple of it, and a chunk cut short keeps only whole
	// multiples of it.
	GeminiUploadGranularity int64
	// GeminiLineErrorField names the field of a failed line in a Gemini
	// responses file: "status" (default) or "error" (the shape is
	// unconfirmed).
	GeminiLineErrorField string

	// VertexMinBatchTime is the least time a Vertex AI batch prediction
	// job takes from create to its end (default 2s; BatchTime when
	// longer): the real service takes minutes, and a job that ended at
	// its first poll could never be cancelled.
	VertexMinBatchTime time.Duration
	// GCSHost is the GCS-compatible server (host:port or URL) the Vertex
	// AI family reads job input from and writes predictions to (`sluice
	// emulate` passes $STORAGE_EMULATOR_HOST); without one, creating a job
	// answers 400 FAILED_PRECONDITION.
	GCSHost string

	// EmbeddingDim is the dimension of fake embeddings (default 8), for
	// OpenAI and Cloudflare embedding models of unknown size; the bge models
	// answer their real sizes.
	EmbeddingDim int

	// APIKey, if non-empty, is enforced: OpenAI "Authorization: Bearer" (or
	// Azure "api-key"), Anthropic "x-api-key" plus "anthropic-version",
	// Cloudflare, Mistral and Together "Authorization: Bearer". If empty, anything is accepted.
	APIKey string

	// ResultRetentionScale multiplies how long the result (output and
	// error) files of OpenAI, Mistral and Together batches are kept:
	// output_expires_after.seconds when the create sent it, else 30 days.
	// A result file past its expires_at is gone: its metadata and content
	// answer 404, as the live API's deleted files do. 0 means 1; a test
	// sets 0.001 to see one hour's retention end after 3.6 seconds.
	ResultRetentionScale float64
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logf, if set, receives one line per lifecycle event.
	Logf func(format string, args ...any)
}

// DefaultCloudflareModels are the async-batch models named in
// docs/providers.md.
var DefaultCloudflareModels = []string{
	"@cf/meta/llama-3.3-70b-instruct-fp8-fast",
	"@cf/baai/bge-small-en-v1.5",
	"@cf/baai/bge-base-en-v1.5",
	"@cf/baai/bge-large-en-v1.5",
	"@cf/baai/bge-m3",
	"@cf/meta/m2m100-1.2b",
	"@cf/qwen/qwen2.5-coder-32b-instruct",
	"@cf/qwen/qwq-32b",
	"@cf/mistralai/mistral-small-3.1-24b-instruct",
	"@cf/google/gemma-3-12b-it",
	"@cf/openai/gpt-oss-120b",
}

// allFaultKinds are the faults the emulator can inject.
var allFaultKinds = []string{"429", "500", "502", "503", "reset"}

func (o *Options) applyDefaults() {
	positiveOr(&o.RetryAfter, time.Second)
	if o.ExpireDoneFraction == 0 {
		o.ExpireDoneFraction = 0.5
	} else if o.ExpireDoneFraction < 0 {
		o.ExpireDoneFraction = 0
	} else if o.ExpireDoneFraction > 1 {
		o.ExpireDoneFraction = 1
	}
	positiveOr(&o.MaxRequestsPerBatch, 50000)
	positiveOr(&o.MaxBatchBytes, 200_000_000)
	positiveOr(&o.MaxFileBytes, 512_000_000)
	positiveOr(&o.AnthropicMaxRequests, 100000)
	positiveOr(&o.AnthropicMaxBytes, 256_000_000)
	positiveOr(&o.MistralMaxRequests, 1_000_000)
	positiveOr(&o.TogetherMaxRequests, 50000)
	positiveOr(&o.TogetherMaxBytes, 100_000_000)
	positiveOr(&o.CloudflareMaxBytes, 10_000_000)
	if o.CloudflareModels == nil {
		o.CloudflareModels = DefaultCloudflareModels
	}
	positiveOr(&o.GeminiMaxFileBytes, 2_000_000_000)
	zeroOr(&o.GeminiMaxActiveBatches, 100)
	positiveOr(&o.GeminiUploadGranularity, 8<<20)
	zeroOr(&o.VertexMinBatchTime, 2*time.Second)
	zeroOr(&o.GeminiLineErrorField, "status")
	positiveOr(&o.EmbeddingDim, 8)
	if o.Now == nil {
		o.Now = time.Now
	}
	zeroOr(&o.StuckPhase, stFinalizing)
	if len(o.FaultKinds) == 0 {
		o.FaultKinds = slices.Clone(allFaultKinds)
	}
}

// positiveOr sets *p to def when it is zero or negative.
func positiveOr[T int | int64 | time.Duration](p *T, def T) {
	if *p <= 0 {
		*p = def
	}
}

// zeroOr sets *p to def when it is the zero value.
func zeroOr[T comparable](p *T, def T) {
	var zero T
	if *p == zero {
		*p = def
	}
}
