// Package provider holds what every provider client shares: the table of
// provider presets (base URL, credentials, limits, endpoints) and the wire
// codecs that turn a validated input line into the bytes of a chunk file.
// The clients themselves live in the subpackages openai, anthropic,
// cloudflare, gemini, mistral and together.
//
// Presets is the one table of providers: a new provider is one struct
// literal in it (and, for a new wire shape, a Family and a client
// package). `sluice providers` prints it.
package provider

import (
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/sluice-batch/sluice"
)

// Family is the shape of a provider's batch API.
type Family string

const (
	FamilyOpenAI     Family = "openai"     // Files + Batches (OpenAI and compatible)
	FamilyAnthropic  Family = "anthropic"  // Message Batches
	FamilyCloudflare Family = "cloudflare" // Workers AI async batch
	FamilyMistral    Family = "mistral"    // Files + /v1/batch/jobs (docs/providers/mistral.md)
	FamilyTogether   Family = "together"   // Files (redirect upload) + /v1/batches (docs/providers/together.md)
	FamilyGemini     Family = "gemini"     // Gemini Developer API Batch Mode + Files API
	FamilyXAI        Family = "xai"        // xAI batches: named batch, add-requests calls, paginated results (docs/providers/xai.md)
	FamilyBedrock    Family = "bedrock"    // Amazon Bedrock model invocation jobs, input and output in S3
)

// Preset is everything sluice knows about one provider by default. Every
// field can be overridden from the command line or the environment.
type Preset struct {
	Name    string
	Family  Family
	BaseURL string // following the official SDK's convention (OpenAI-compatible URLs include the version)
	// BaseURLEnv names the environment variable that overrides BaseURL.
	BaseURLEnv string
	// KeyEnv names the environment variables holding the credential, first
	// found wins. Keys are read from the environment only.
	KeyEnv []string
	// AccountEnv names the variable holding the account id (Cloudflare).
	AccountEnv string
	// AuthHeader is the header carrying the key: "Authorization" (Bearer),
	// "api-key" (Azure) or "x-api-key" (Anthropic).
	AuthHeader string
	Limits     sluice.Limits
	// Endpoints are the batch endpoints (input line urls) it accepts.
	Endpoints []string
	// InputFormat names the input lines it accepts, for `sluice providers`:
	// every provider reads sluice's input format (custom_id, method, url,
	// body); this says what body the url calls for.
	InputFormat string
	// MaxCustomID bounds the length of a custom_id (0: no bound).
	MaxCustomID int
	// CompletionWindow is sent on batch create (OpenAI family, Together).
	CompletionWindow string
	// Window is how long a batch may run at the provider, as its documents
	// say it, for `sluice providers`.
	Window string
	// APIVersion is put between the base URL and every path (Gemini:
	// v1beta; the base URL carries no version, as the Google SDKs take it).
	APIVersion string
	// RequestsPerSecond and Burst are the client-side rate limit of API
	// calls (uploads, creates, polls, downloads), kept under the provider's
	// documented or usual limits so sluice does not collect 429s. Zero
	// RequestsPerSecond: unlimited.
	RequestsPerSecond float64
	Burst             int
	// ResultsRetention is how long the provider keeps an ended batch's
	// results (docs/providers.md, "Results expire"), counted from the
	// batch's creation: its results files are made when it ends, later, so
	// creation plus retention is the earliest they may go. 0: unknown
	// (--results-retention sets it). For presets with OutputExpiresAfter it
	// is --output-expires-after's default, the provider's maximum.
	ResultsRetention time.Duration
	// OutputExpiresAfter says creates accept output_expires_after (anchor
	// created_at, 1h to 30d): --output-expires-after is sent.
	OutputExpiresAfter bool
	// Notes is one line for --help and the README.
	Notes string
	// Quirks are the ways its API departs from OpenAI's, for `sluice
	// providers` and the provider docs.
	Quirks []string
}

// Presets is the table of known providers (docs/providers.md, "Limits");
// values no source confirmed are taken from the closest documented
// provider and are overridable (--max-batch-bytes, --max-batch-requests, ...).
var Presets = map[string]Preset{
	"local": {
		Name: "local", Family: FamilyOpenAI, BaseURL: "", AuthHeader: "Authorization",
		Limits:            sluice.Limits{MaxBatchBytes: 200_000_000, MaxBatchRequests: 50_000},
		Endpoints:         localEndpoints,
		CompletionWindow:  "24h",
		RequestsPerSecond: 50, Burst: 50,
		InputFormat: "every family's lines, each in its own API's format (OpenAI's, Anthropic's, Workers AI's, Gemini's)", Window: "24h",
		Notes:            "the built-in emulator, in-process; no key needed",
		ResultsRetention: outputMax, OutputExpiresAfter: true,
	},
	"openai": {
		Name: "openai", Family: FamilyOpenAI, BaseURL: "https://api.openai.com/v1", BaseURLEnv: "OPENAI_BASE_URL",
		KeyEnv: []string{"OPENAI_API_KEY"}, AuthHeader: "Authorization",
		Limits:           sluice.Limits{MaxBatchBytes: 200_000_000, MaxBatchRequests: 50_000},
		Endpoints:        openAIEndpoints,
		CompletionWindow: "24h",
		// Uploads are limited to 1,000/min per user; the rest depends on the tier.
		RequestsPerSecond: 5, Burst: 10,
		InputFormat: openAIInput, Window: "24h",
		Notes:            "200 MB / 50,000 requests per batch; enqueued-token limit per model",
		ResultsRetention: outputMax, OutputExpiresAfter: true,
	},
	"azure": {
		Name: "azure", Family: FamilyOpenAI, BaseURL: "", BaseURLEnv: "AZURE_OPENAI_BASE_URL",
		KeyEnv: []string{"AZURE_OPENAI_API_KEY"}, AuthHeader: "api-key",
		Limits: sluice.Limits{MaxBatchBytes: 200_000_000, MaxBatchRequests: 100_000, MaxLiveBatches: 500},
		// Azure's docs use endpoints without /v1; whether /v1 also works is
		// unconfirmed, so both are accepted and sent as written.
		Endpoints:         []string{"/chat/completions", "/v1/chat/completions", "/embeddings", "/v1/embeddings", "/responses", "/v1/responses"},
		CompletionWindow:  "24h",
		RequestsPerSecond: 5, Burst: 10,
		InputFormat: openAIInput, Window: "24h (not enforced: runs until cancelled)",
		Notes:  "base URL https://RESOURCE.openai.azure.com/openai/v1; body.model is the Global-Batch deployment name",
		Quirks: []string{"api-key header", "body.model is the Global-Batch deployment name, the same on every line", "endpoints with or without /v1"},
		// Whether Global Batch takes output_expires_after is unconfirmed:
		// none is sent, and retention is unknown (--results-retention).
	},
	"nebius": {
		Name: "nebius", Family: FamilyOpenAI, BaseURL: "https://api.studio.nebius.com/v1", BaseURLEnv: "NEBIUS_BASE_URL",
		KeyEnv: []string{"NEBIUS_API_KEY"}, AuthHeader: "Authorization",
		Limits:            sluice.Limits{MaxBatchBytes: 10_000_000_000, MaxBatchRequests: 5_000_000, MaxLiveBatches: 500},
		Endpoints:         []string{"/v1/chat/completions", "/v1/embeddings"},
		CompletionWindow:  "24h",
		RequestsPerSecond: 2, Burst: 5,
		InputFormat: openAIInput, Window: "24h",
		Notes: "10 GB / 5,000,000 requests per file; 500 batches",
	},
	"groq": {
		Name: "groq", Family: FamilyOpenAI, BaseURL: "https://api.groq.com/openai/v1", BaseURLEnv: "GROQ_BASE_URL",
		KeyEnv: []string{"GROQ_API_KEY"}, AuthHeader: "Authorization",
		// Requests per batch are unconfirmed: OpenAI's 50,000 is assumed.
		Limits:            sluice.Limits{MaxBatchBytes: 100_000_000, MaxBatchRequests: 50_000},
		Endpoints:         []string{"/v1/chat/completions"},
		CompletionWindow:  "24h",
		RequestsPerSecond: 2, Burst: 5,
		InputFormat: openAIInput, Window: "24h to 7d (--completion-window)",
		Notes: "100 MB per file; completion window 24h to 7d (--completion-window)",
	},
	"deepinfra": {
		Name: "deepinfra", Family: FamilyOpenAI, BaseURL: "https://api.deepinfra.com/v1/openai", BaseURLEnv: "DEEPINFRA_BASE_URL",
		KeyEnv: []string{"DEEPINFRA_API_KEY", "DEEPINFRA_TOKEN"}, AuthHeader: "Authorization",
		// Size and count limits are unconfirmed: OpenAI's are assumed.
		Limits:            sluice.Limits{MaxBatchBytes: 200_000_000, MaxBatchRequests: 50_000},
		Endpoints:         []string{"/v1/chat/completions", "/v1/completions", "/v1/embeddings"},
		CompletionWindow:  "24h",
		RequestsPerSecond: 2, Burst: 5,
		InputFormat: openAIInput, Window: "24h",
		Notes: "limits unconfirmed: OpenAI's assumed",
		// Output files are kept 30 days by default; whether creates take
		// output_expires_after is unconfirmed, so none is sent.
		ResultsRetention: outputMax,
	},
	"anthropic": {
		Name: "anthropic", Family: FamilyAnthropic, BaseURL: "https://api.anthropic.com", BaseURLEnv: "ANTHROPIC_BASE_URL",
		KeyEnv: []string{"ANTHROPIC_API_KEY"}, AuthHeader: "x-api-key",
		Limits:    sluice.Limits{MaxBatchBytes: 256_000_000, MaxBatchRequests: 100_000},
		Endpoints: []string{"/v1/messages", "/v1/chat/completions"}, // chat lines translated (docs/translation.md)
		// Tier 1 allows 50 requests/min across the Message Batches endpoints.
		RequestsPerSecond: 0.8, Burst: 4,
		InputFormat: "Anthropic Messages body (model, max_tokens, messages)", MaxCustomID: 64, Window: "24h, then expired",
		Notes:  "256 MB / 100,000 requests per batch; custom_id ^[a-zA-Z0-9_-]{1,64}$",
		Quirks: []string{"no file upload: the batch is the create body", "no metadata: a lost create is adopted by time and size, one create at a time"},
		// Results are available for 29 days after the batch was created.
		ResultsRetention: 29 * 24 * time.Hour,
	},
	"cloudflare": {
		Name: "cloudflare", Family: FamilyCloudflare, BaseURL: "https://api.cloudflare.com/client/v4", BaseURLEnv: "CLOUDFLARE_BASE_URL",
		KeyEnv: []string{"CLOUDFLARE_API_TOKEN"}, AccountEnv: "CLOUDFLARE_ACCOUNT_ID", AuthHeader: "Authorization",
		// "under 10 MB": the smaller reading, 10,000,000 bytes, minus one.
		Limits:    sluice.Limits{MaxBatchBytes: 9_999_999},
		Endpoints: []string{"/ai/run/{model}", "/ai/run", "/v1/chat/completions"}, // chat lines translated (docs/translation.md)
		// The Cloudflare API allows 1,200 requests per 5 minutes per user.
		RequestsPerSecond: 3, Burst: 5,
		InputFormat: "Workers AI model input (url names the model, or body.model with /ai/run)", Window: "unconfirmed",
		Notes:  "payload under 10 MB; no listing, so a crash inside submit cannot be reconciled",
		Quirks: []string{"$CLOUDFLARE_ACCOUNT_ID", "results come back in the final poll answer", "no listing: a lost create cannot be adopted"},
	},
	"mistral": {
		Name: "mistral", Family: FamilyMistral, BaseURL: "https://api.mistral.ai", BaseURLEnv: "MISTRAL_BASE_URL",
		KeyEnv: []string{"MISTRAL_API_KEY"}, AuthHeader: "Authorization",
		// Sources conflict on requests per batch (1,000,000 in the guide,
		// 100,000 on the known-limitations page) and on size (512 MB): the
		// smaller figures are taken. docs/providers/mistral.md.
		Limits: sluice.Limits{MaxBatchBytes: 512_000_000, MaxBatchRequests: 100_000},
		Endpoints: []string{"/v1/chat/completions", "/v1/embeddings", "/v1/fim/completions", "/v1/moderations",
			"/v1/chat/moderations", "/v1/ocr", "/v1/classifications", "/v1/chat/classifications", "/v1/conversations"},
		InputFormat: "OpenAI-shaped body of the endpoint (Mistral's chat, embeddings, fim, moderation...); sent as {custom_id, body}",
		Window:      "timeout_hours (default 24), then TIMEOUT_EXCEEDED",
		// Mistral's rate limits are per workspace tier; 1 call/s is the
		// free tier's.
		RequestsPerSecond: 1, Burst: 5,
		Notes: "base URL without /v1; 100,000 requests / 512 MB per batch (unconfirmed); job metadata names the chunk",
		Quirks: []string{"base URL without /v1 (paths carry it)", "POST /v1/batch/jobs with input_files[] and job-level model",
			"statuses QUEUED, RUNNING, SUCCESS, FAILED, TIMEOUT_EXCEEDED, CANCELLATION_REQUESTED, CANCELLED",
			"422 {detail:[...]} on validation errors", "results kept 24h after completion (unconfirmed)"},
		// Results kept 24h after completion (unconfirmed; --results-retention).
		ResultsRetention: 24 * time.Hour,
	},
	"together": {
		Name: "together", Family: FamilyTogether, BaseURL: "https://api.together.xyz/v1", BaseURLEnv: "TOGETHER_BASE_URL",
		KeyEnv: []string{"TOGETHER_API_KEY"}, AuthHeader: "Authorization",
		// 30 B enqueued tokens per model (sluice's own estimate of them).
		Limits:      sluice.Limits{MaxBatchBytes: 100_000_000, MaxBatchRequests: 50_000, MaxEnqueuedTokens: 30_000_000_000},
		Endpoints:   []string{"/v1/chat/completions", "/v1/completions"},
		InputFormat: "OpenAI chat or completions body with body.model; sent as {custom_id, body}",
		MaxCustomID: 64, CompletionWindow: "24h", Window: "24h (best effort)",
		RequestsPerSecond: 2, Burst: 5,
		Notes: "100 MB / 50,000 requests per batch; 30B enqueued tokens per model; custom_id up to 64 characters",
		Quirks: []string{"upload: POST /files answers 302 to a signed URL, PUT the bytes, POST /files/{id}/preprocess",
			"create answers 201 {job, warning}", "list answers a bare array", "batch errors {\"error\": \"text\"}",
			"no metadata: a lost create is adopted by its input file"},
	},
	"gemini": {
		Name: "gemini", Family: FamilyGemini, BaseURL: "https://generativelanguage.googleapis.com", BaseURLEnv: "GOOGLE_GEMINI_BASE_URL",
		// As the Google SDKs: GOOGLE_API_KEY wins over GEMINI_API_KEY.
		KeyEnv: []string{"GOOGLE_API_KEY", "GEMINI_API_KEY"}, AuthHeader: "x-goog-api-key",
		// 2 GB per input file; 100 concurrent batches per project. No
		// request count per batch is documented: 100,000 is sluice's
		// choice (docs/providers/gemini.md), overridable.
		Limits:      sluice.Limits{MaxBatchBytes: 2_000_000_000, MaxBatchRequests: 100_000, MaxLiveBatches: 100},
		Endpoints:   []string{"/v1beta/models/{model}:generateContent", "/v1/models/{model}:generateContent", "/v1/chat/completions"}, // chat lines translated (docs/translation.md)
		InputFormat: "Gemini GenerateContentRequest body (model from the url)",
		APIVersion:  "v1beta",
		// No batch-API rate limit is documented; kept low like Anthropic's.
		RequestsPerSecond: 2, Burst: 5,
		Notes:  "2 GB per input file, 100 concurrent batches, batches expire after 48h; model from the url",
		Window: "48h, then BATCH_STATE_EXPIRED",
		// Retention of results is undocumented: unknown (--results-retention).
	},
	"xai": {
		Name: "xai", Family: FamilyXAI, BaseURL: "https://api.x.ai/v1", BaseURLEnv: "XAI_BASE_URL",
		KeyEnv: []string{"XAI_API_KEY"}, AuthHeader: "Authorization",
		// No per-batch size is documented: batches over 100,000 requests
		// "may be throttled", so 100,000 is the bound; 200 MB is sluice's
		// choice (eight add-requests calls of 25 MB). docs/providers/xai.md.
		Limits:      sluice.Limits{MaxBatchBytes: 200_000_000, MaxBatchRequests: 100_000},
		Endpoints:   []string{"/v1/chat/completions"},
		InputFormat: "OpenAI chat completions body; sent as {batch_request_id, batch_request:{chat_get_completion}}",
		// At most 100 add-requests calls per 30 s per team (and one batch
		// created per second, paced apart in provider/xai).
		RequestsPerSecond: 3, Burst: 5,
		Window: "none documented (most finish within 24h); done when state.num_pending is 0",
		Notes:  "batch created by name, requests added in calls of at most 25 MB, results paginated; one batch created per second",
		Quirks: []string{"POST /v1/batches {name}, then POST /v1/batches/{id}/requests", "no status: done when state.num_pending is 0",
			"results paginated (pagination_token)", "one batch created per second per team", "JSONL input file (input_file_id) with --xai-input file"},
	},
	"bedrock": bedrockPreset,
}

// outputMax is the longest output_expires_after OpenAI accepts, and its
// default retention of batch output files: 30 days.
const outputMax = 30 * 24 * time.Hour

// openAIInput is the input format of the OpenAI family.
const openAIInput = "OpenAI batch input: the endpoint's request body, sent as the line itself"

var openAIEndpoints = []string{
	"/v1/responses", "/v1/chat/completions", "/v1/embeddings", "/v1/completions",
	"/v1/moderations", "/v1/images/generations", "/v1/images/edits", "/v1/videos",
}

// localEndpoints are the urls --provider local takes: its emulator serves
// every family, and MixedCodec writes each url in its family's format.
var localEndpoints = append(append([]string{}, openAIEndpoints...),
	"/v1/messages", "/ai/run/{model}", "/ai/run", "/v1beta/models/{model}:generateContent", "/v1/models/{model}:generateContent")

// Lookup returns the preset of a provider name.
func Lookup(name string) (Preset, error) {
	p, ok := Presets[strings.ToLower(name)]
	if !ok {
		return Preset{}, fmt.Errorf("unknown provider %q (known: %s)", name, strings.Join(Names(), ", "))
	}
	return p, nil
}

// Names lists the known providers, sorted.
func Names() []string {
	return slices.Sorted(maps.Keys(Presets))
}

// Codec returns the wire codec of a preset: its family's codec, wrapped to
// translate chat completions lines for the families that need it
// (PlanCodec), with no model map.
func (p Preset) Codec() sluice.Codec { return p.PlanCodec(ChatOptions{}) }

// nativeCodec is the codec of the preset's family.
func (p Preset) nativeCodec() sluice.Codec {
	switch p.Family {
	case FamilyAnthropic:
		return AnthropicCodec{}
	case FamilyCloudflare:
		return CloudflareCodec{}
	case FamilyMistral, FamilyTogether:
		return NewBodyLineCodec(p.Name, p.Endpoints, p.MaxCustomID)
	case FamilyGemini:
		return GeminiCodec{}
	case FamilyXAI:
		return XAICodec{MaxCustomID: p.MaxCustomID}
	case FamilyVertex:
		return VertexCodec{}
	case FamilyBedrock:
		return BedrockCodec{}
	}
	if p.Name == "local" {
		// The built-in emulator serves every family: so does local.
		return MixedCodec{OpenAI: NewOpenAICodec(p.Endpoints).Named(p.Name)}
	}
	return NewOpenAICodec(p.Endpoints).Named(p.Name)
}

// Resolve returns the preset a client of family runs with (p, or the
// preset named after the family when p is the zero Preset) and its base
// URL (raw, else the preset's), checked to be an http(s) URL, without a
// trailing slash, query or fragment.
func Resolve(p Preset, family Family, raw string) (Preset, *url.URL, error) {
	if p.Name == "" {
		p = Presets[string(family)]
	}
	if p.Family != family {
		return p, nil, fmt.Errorf("%s: preset %q is of family %q", family, p.Name, p.Family)
	}
	if raw == "" {
		raw = p.BaseURL
	}
	if raw == "" {
		where := "--base-url"
		if p.BaseURLEnv != "" {
			where += " or " + p.BaseURLEnv
		}
		return p, nil, fmt.Errorf("provider %s needs a base URL (%s)", p.Name, where)
	}
	base, err := url.Parse(strings.TrimRight(raw, "/"))
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return p, nil, fmt.Errorf("provider %s: base URL %q is not an http(s) URL", p.Name, raw)
	}
	base.Path = strings.TrimRight(base.Path, "/")
	return p, base, nil
}
