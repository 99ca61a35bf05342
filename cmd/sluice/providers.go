package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/emulator"
	"github.com/sluice-batch/sluice/lifecycle"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/provider/anthropic"
	"github.com/sluice-batch/sluice/provider/cloudflare"
	"github.com/sluice-batch/sluice/provider/gemini"
	"github.com/sluice-batch/sluice/provider/httpx"
	"github.com/sluice-batch/sluice/provider/mistral"
	"github.com/sluice-batch/sluice/provider/openai"
	"github.com/sluice-batch/sluice/provider/together"
	"github.com/sluice-batch/sluice/provider/xai"
	"github.com/sluice-batch/sluice/tracker"
)

// netFlags tune the HTTP side of provider clients.
type netFlags struct {
	rate             float64
	burst            int
	retries          int
	maxRetryWait     time.Duration
	completionWindow string
	localBatchTime   time.Duration
	// outputExpiresAfter is --output-expires-after (0: the preset's
	// maximum, for presets that accept it); resultsRetention is
	// --results-retention (0: the preset's).
	outputExpiresAfter time.Duration
	resultsRetention   time.Duration
	togetherUpload     string
	mistralTimeout     int
	bedrock            bedrockFlags
	gemini             struct {
		apiVersion   string
		chunkBytes   int64
		downloadPath string
		mimeType     string
	}
	xai struct {
		input      string
		addBytes   int64
		cancelPath string
	}
	vertex vertexFlags // vertex.go
}

func (n *netFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.Float64Var(&n.rate, "rate", 0, "client-side limit on API calls per second to the provider, so sluice never causes the 429s it then has to wait out (default: the provider's preset; negative: none)")
	fs.IntVar(&n.burst, "burst", 0, "API calls allowed at once under --rate (default: --rate rounded up)")
	fs.IntVar(&n.retries, "http-attempts", 0, "attempts per API call on connection errors, 408, 409, 429 and 5xx, with exponential backoff and jitter, honouring Retry-After (default "+strconv.Itoa(httpx.DefaultMaxAttempts)+")")
	fs.DurationVar(&n.maxRetryWait, "http-max-wait", 0, "longest total wait in retries of one API call (default "+helpDuration(httpx.DefaultMaxTotalWait)+")")
	fs.StringVar(&n.completionWindow, "completion-window", "", "completion_window sent on batch create (OpenAI family; default 24h; Groq takes 24h to 7d)")
	fs.StringVar(&n.togetherUpload, "together-upload", "redirect", "--provider together: upload flow, redirect (POST /files, PUT to the signed URL, preprocess; as the Python and JS SDKs) or multipart (POST /files/upload; as the Go SDK)")
	fs.IntVar(&n.mistralTimeout, "mistral-timeout-hours", 24, "--provider mistral: timeout_hours sent on job create (1-168); a job past it ends TIMEOUT_EXCEEDED and its unfinished requests are retried")
	fs.DurationVar(&n.localBatchTime, "local-batch-time", 0, "--provider local: how long each emulated batch takes from create to completed (default 0: done at the first poll); a batch keeps the time it was submitted under, so on a resumed run it applies to new batches only")
	fs.StringVar(&n.gemini.apiVersion, "gemini-api-version", "", "--provider gemini: API version put after the base URL (default v1beta; @google/genai 3.x uses v1)")
	fs.Int64Var(&n.gemini.chunkBytes, "gemini-upload-chunk-bytes", 0, "--provider gemini: bytes per resumable-upload request (default 8 MiB, the SDKs' size; rounded up to the server's granularity)")
	fs.StringVar(&n.gemini.mimeType, "gemini-mime-type", "", "--provider gemini: mimeType of uploaded chunk files (default application/jsonl; Google's docs pass jsonl)")
	fs.StringVar(&n.xai.input, "xai-input", xai.InputRequests, "--provider xai: how a batch gets its requests: requests (add-requests calls of at most --xai-add-bytes) or file (a JSONL file uploaded to /v1/files, then create with input_file_id)")
	fs.Int64Var(&n.xai.addBytes, "xai-add-bytes", xai.DefaultAddBytes, "--provider xai: bytes of one add-requests call at most (the docs' 25 MB)")
	fs.StringVar(&n.xai.cancelPath, "xai-cancel-path", xai.CancelColon, "--provider xai: cancel call, :cancel (POST /v1/batches/{id}:cancel, the proto's method) or /cancel (POST /v1/batches/{id}/cancel)")
	n.vertex.register(cmd)
	n.bedrock.register(fs)
	fs.StringVar(&n.gemini.downloadPath, "gemini-download-path", "download", "--provider gemini: where responses files are downloaded from: download (/download/{version}/files/{id}:download, the docs' path) or api (/{version}/files/{id}:download, the SDKs' path)")
}

// Bounds of output_expires_after.seconds (the OpenAI spec's
// BatchFileExpirationAfter: 3600 to 2592000).
const (
	minOutputExpiry = time.Hour
	maxOutputExpiry = 30 * 24 * time.Hour
)

// resultsExpiry checks --output-expires-after and --results-retention
// against the preset p and returns how long p keeps an ended batch's
// results, counted from its creation (0: unknown): what
// --output-expires-after sends, else --results-retention, else the
// preset's (docs/providers.md, "Results expire").
func (n *netFlags) resultsExpiry(p provider.Preset) (time.Duration, error) {
	if o := n.outputExpiresAfter; o != 0 {
		if p.Family != provider.FamilyOpenAI {
			return 0, usageErr("--output-expires-after: provider %s (family %s) has no output_expires_after; --results-retention says how long it keeps results", p.Name, p.Family)
		}
		if o < minOutputExpiry || o > maxOutputExpiry || o%time.Second != 0 {
			return 0, usageErr("--output-expires-after %s: want whole seconds from 1h to 720h (30 days), as output_expires_after.seconds takes 3600 to 2592000", o)
		}
	}
	if n.resultsRetention < 0 {
		return 0, usageErr("--results-retention %s must be positive", n.resultsRetention)
	}
	if d := n.sentExpiry(p); d > 0 {
		return d, nil
	}
	if n.resultsRetention > 0 {
		return n.resultsRetention, nil
	}
	return p.ResultsRetention, nil
}

// sentExpiry is the output_expires_after creates of preset p send (0:
// none): --output-expires-after, else the maximum for presets that take it.
func (n *netFlags) sentExpiry(p provider.Preset) time.Duration {
	switch {
	case p.Family != provider.FamilyOpenAI:
		return 0
	case n.outputExpiresAfter != 0:
		return n.outputExpiresAfter
	case p.OutputExpiresAfter:
		return maxOutputExpiry
	}
	return 0
}

// registerExpiry adds run's flags of results expiry (docs/providers.md,
// "Results expire"): only run creates batches and orders their fetches.
func (n *netFlags) registerExpiry(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.DurationVar(&n.outputExpiresAfter, "output-expires-after", 0, "OpenAI family: output_expires_after sent on batch create, how long the provider keeps a batch's output and error files after they are made, 1h to 720h (default 720h, the maximum, for the presets that take it: openai and local; given, it is sent for any OpenAI-family preset)")
	fs.DurationVar(&n.resultsRetention, "results-retention", 0, "how long the provider keeps an ended batch's results, counted from its creation, for status's expiry warning and the order run fetches them in (default: the preset's, as docs/providers.md lists it; needed where it is unknown, as for Gemini)")
}

// credential returns the first of the preset's key variables that is set.
// Keys come from the environment only.
func credential(p provider.Preset) string {
	for _, k := range p.KeyEnv {
		if v := os.Getenv(k); v != "" {
			return v
		}
	}
	return ""
}

// keyEnvText names the variables a preset's key may be in: "$A or $B".
func keyEnvText(p provider.Preset) string { return "$" + strings.Join(p.KeyEnv, " or $") }

// missingKey is the usage error of a provider whose key is in none of its
// variables: every variable it reads is named.
func missingKey(p provider.Preset) error {
	return usageErr("provider %s needs a key in %s (keys are read from the environment only)", p.Name, keyEnvText(p))
}

// credentialsHelp lists, for run --help, the variables each provider
// reads its credentials from.
func credentialsHelp() string {
	var b strings.Builder
	b.WriteString("Credentials come from the environment only (local needs none):\n")
	for _, name := range provider.Names() {
		p := provider.Presets[name]
		if name == "bedrock" { // no key of its own: the AWS SDK's chain
			fmt.Fprintf(&b, "  %-11s the AWS credential chain (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, roles), and AWS_REGION\n", name)
			continue
		}
		if len(p.KeyEnv) == 0 {
			continue
		}
		fmt.Fprintf(&b, "  %-11s %s", name, strings.Join(p.KeyEnv, " or "))
		if p.AccountEnv != "" {
			fmt.Fprintf(&b, ", and %s", p.AccountEnv)
		}
		if name == "vertex" {
			b.WriteString(", else Application Default Credentials; GOOGLE_CLOUD_PROJECT and GOOGLE_CLOUD_LOCATION")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// newProvider builds the provider client of a preset. For "local" it
// starts the emulator in this process on a loopback port, keeping its state
// under the state directory so a killed run resumes against the same
// batches.
func newProvider(ctx context.Context, f *jobFlags, n *netFlags, p provider.Preset, db tracker.Backend, log zerolog.Logger) (sluice.Provider, func(), error) {
	stateDir := db.Dir()
	retry := httpx.Retry{MaxAttempts: n.retries, MaxTotalWait: n.maxRetryWait}
	rl := httpx.RateLimit{PerSecond: n.rate, Burst: n.burst}
	plog := log.With().Str("provider", p.Name).Logger()
	baseURL := f.resolvedBaseURL(p)
	closer := func() {}
	key := credential(p)
	if p.Name == "local" {
		srv, err := emulator.New(emulator.Options{DataDir: filepath.Join(stateDir, "emulator"), BatchTime: n.localBatchTime,
			GCSHost: os.Getenv("STORAGE_EMULATOR_HOST")})
		if err != nil {
			return nil, nil, fmt.Errorf("start the local emulator: %w", err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, nil, fmt.Errorf("start the local emulator: %w", err)
		}
		hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
		served := lifecycle.Serve(hs, ln)
		closer = func() {
			served.Stop()
			srv.Close()
		}
		baseURL, key = "http://"+ln.Addr().String()+"/v1", "local"
		if rl.PerSecond == 0 {
			rl.PerSecond = -1
		}
	} else if key == "" && p.Family != provider.FamilyVertex && p.Family != provider.FamilyBedrock { // vertex: else Application Default Credentials; Bedrock: the AWS credential chain
		return nil, nil, missingKey(p)
	}
	var prov sluice.Provider
	var err error
	// What every family's client takes; each case adds its own.
	pc := provider.Config{Preset: p, BaseURL: baseURL, APIKey: key, Retry: retry, RateLimit: rl, Limits: f.limits, Logger: plog}
	switch p.Family {
	case provider.FamilyOpenAI:
		prov, err = openai.New(openai.Config{Config: pc, CompletionWindow: n.completionWindow, OutputExpiresAfter: n.sentExpiry(p)})
	case provider.FamilyAnthropic:
		prov, err = anthropic.New(anthropic.Config{Config: pc,
			// Batches this job already records are never adopted by Find.
			Claimed: func(id string) bool { return db.BatchKnown(context.WithoutCancel(ctx), id) }})
	case provider.FamilyCloudflare:
		acct := os.Getenv(p.AccountEnv)
		if acct == "" {
			closer()
			return nil, nil, usageErr("provider %s needs $%s", p.Name, p.AccountEnv)
		}
		tmp := filepath.Join(stateDir, "tmp")
		if err := os.MkdirAll(tmp, 0o700); err != nil {
			return nil, nil, err
		}
		prov, err = cloudflare.New(cloudflare.Config{Preset: p, BaseURL: baseURL, AccountID: acct, APIToken: key,
			Retry: retry, RateLimit: rl, Limits: f.limits, Logger: plog, TempDir: tmp})
	case provider.FamilyMistral:
		prov, err = mistral.New(mistral.Config{Config: pc, TimeoutHours: n.mistralTimeout})
	case provider.FamilyTogether:
		prov, err = together.New(together.Config{Config: pc, Upload: n.togetherUpload, CompletionWindow: n.completionWindow})
	case provider.FamilyGemini:
		if dp := n.gemini.downloadPath; dp != "download" && dp != "api" {
			closer()
			return nil, nil, usageErr("--gemini-download-path %q: want download or api", dp)
		}
		prov, err = gemini.New(gemini.Config{Config: pc, APIVersion: n.gemini.apiVersion, ChunkSize: n.gemini.chunkBytes,
			SDKDownloadPath: n.gemini.downloadPath == "api", MimeType: n.gemini.mimeType})
	case provider.FamilyXAI:
		prov, err = xai.New(xai.Config{Config: pc, Input: n.xai.input, AddBytes: n.xai.addBytes, CancelPath: n.xai.cancelPath})
	case provider.FamilyVertex:
		if prov, err = newVertex(ctx, f, n, pc); err != nil {
			return nil, nil, err // with its exit code (vertex.go)
		}
	case provider.FamilyBedrock:
		if prov, err = newBedrock(ctx, f, &n.bedrock, pc); err != nil {
			return nil, nil, err // with its exit code (bedrock.go)
		}
	default:
		err = errors.New("unknown provider family " + string(p.Family))
	}
	if err == nil && p.Name == "local" {
		prov, err = localFamilies(ctx, prov, strings.TrimSuffix(baseURL, "/v1"), stateDir, pc, db)
	}
	if err != nil {
		closer()
		return nil, nil, withCode(exitUsage, err)
	}
	return prov, closer, nil
}

// localFamilies makes --provider local take every family's lines: the
// in-process emulator at root serves them all (see lifecycle.MixedLocal).
func localFamilies(ctx context.Context, oa sluice.Provider, root, stateDir string, pc provider.Config, db tracker.Backend) (sluice.Provider, error) {
	local := provider.Presets["local"]
	retry, rl, log := pc.Retry, pc.RateLimit, pc.Logger
	// Each family's client keeps its wire format and limits, but calls the
	// in-process emulator at local's rate, not the real API's.
	ap := provider.Presets["anthropic"]
	ap.Name, ap.RequestsPerSecond, ap.Burst = local.Name, local.RequestsPerSecond, local.Burst
	pc.Preset, pc.BaseURL, pc.APIKey = ap, root, "local"
	an, err := anthropic.New(anthropic.Config{Config: pc,
		Claimed: func(id string) bool { return db.BatchKnown(context.WithoutCancel(ctx), id) }})
	if err != nil {
		return nil, err
	}
	cp := provider.Presets["cloudflare"]
	cp.Name, cp.RequestsPerSecond, cp.Burst = local.Name, local.RequestsPerSecond, local.Burst
	tmp := filepath.Join(stateDir, "tmp")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return nil, err
	}
	cf, err := cloudflare.New(cloudflare.Config{Preset: cp, BaseURL: root + "/client/v4", AccountID: "local", APIToken: "local",
		Retry: retry, RateLimit: rl, Limits: pc.Limits, Logger: log, TempDir: tmp})
	if err != nil {
		return nil, err
	}
	gp := provider.Presets["gemini"]
	gp.Name = local.Name
	pc.Preset, pc.BaseURL = gp, root+"/gemini"
	gm, err := gemini.New(gemini.Config{Config: pc})
	if err != nil {
		return nil, err
	}
	return lifecycle.NewMixedLocal(oa, an, cf, gm, local.Codec()), nil
}
