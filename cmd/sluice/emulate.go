package main

import (
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-batch/sluice/emulator"
)

func newEmulateCmd(g *globalFlags) *cobra.Command {
	var addr string
	var o emulator.Options
	cmd := &cobra.Command{
		Use:   "emulate",
		Short: "Serve the local provider emulator (OpenAI, Anthropic, Cloudflare, Gemini, Mistral, Together and xAI batch APIs on one port)",
		Long: `emulate serves a faithful local copy of the OpenAI Files and Batches API (and
every OpenAI-compatible one), Anthropic Message Batches, Cloudflare Workers
AI async batch, Gemini Batch Mode with the Files API, Mistral batch jobs,
Together batches and xAI batches, with a deterministic fake model, the real limits, and fault
injection. It prints every family's base URL at start; point an SDK at it:

  OPENAI_BASE_URL=http://127.0.0.1:8080/v1 OPENAI_API_KEY=any
  ANTHROPIC_BASE_URL=http://127.0.0.1:8080 ANTHROPIC_API_KEY=any
  CLOUDFLARE_BASE_URL=http://127.0.0.1:8080/client/v4 CLOUDFLARE_API_TOKEN=any CLOUDFLARE_ACCOUNT_ID=acct
  GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:8080/gemini GEMINI_API_KEY=any
  MISTRAL_BASE_URL=http://127.0.0.1:8080/mistral MISTRAL_API_KEY=any
  TOGETHER_BASE_URL=http://127.0.0.1:8080/together/v1 TOGETHER_API_KEY=any
  XAI_BASE_URL=http://127.0.0.1:8080/xai/v1 XAI_API_KEY=any

When $SLUICE_EMULATOR_API_KEY is set, only that key is accepted (else any).
GET /_emulator/info answers {"base_urls": {family: URL}}; GET /_emulator/stats
answers counters, among them requests_processed_more_than_once (the same
custom_id of one job executed twice: money spent twice), also per family.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return emulator.ListenAndServe(ctx, addr, o, func(a string) {
				fmt.Fprint(os.Stderr, emulatorBanner(a))
			})
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&addr, "addr", "127.0.0.1:8080", "listen address")
	fs.StringVar(&o.DataDir, "data", "", "keep state on disk in this directory, so a restart loses no batch (default: in memory)")
	fs.DurationVar(&o.BatchTime, "batch-time", 0, "time from create to completed for every batch (default 0: done at the first poll)")
	fs.Float64Var(&o.HTTPFaultRate, "http-fault-rate", 0, "share of API calls answered 429 with Retry-After, 5xx, or a reset connection")
	fs.Int64Var(&o.Seed, "seed", 1, "seed of the fault plan and of output order")
	fs.Float64Var(&o.ExpireRate, "expire-rate", 0, "share of batches that expire with part of their lines done")
	fs.Float64Var(&o.ValidationFailRate, "validation-fail-rate", 0, "share of batches that fail validation")
	fs.Float64Var(&o.LineErrorRate, "line-error-rate", 0, "share of lines answered with a per-request error")
	fs.Float64Var(&o.OmitRate, "omit-rate", 0, "share of lines left out of both output and error files")
	fs.Int64Var(&o.EnqueuedTokenLimit, "enqueued-token-limit", 0, "per-model enqueued-token limit: batches past it fail with token_limit_exceeded (0 = none)")
	fs.Float64Var(&o.MalformedLineRate, "malformed-line-rate", 0, "share of result lines replaced by a line that is not a result (cut JSON, or no custom_id)")
	fs.Float64Var(&o.UnknownCustomIDRate, "unknown-custom-id-rate", 0, "share of result lines followed by an extra line for a custom_id never sent")
	fs.Float64Var(&o.DuplicateLineRate, "duplicate-line-rate", 0, "share of result lines written twice (a success's copy is a 500 error)")
	fs.Float64Var(&o.TruncateDownloadRate, "truncate-download-rate", 0, "share of result downloads cut in the middle while promising the full Content-Length")
	fs.Float64Var(&o.OutputFile404Rate, "output-file-404-rate", 0, "share of completed batches whose output answers 404")
	fs.Float64Var(&o.StuckRate, "stuck-rate", 0, "share of batches stuck in --stuck-phase forever (until cancelled)")
	fs.StringVar(&o.StuckPhase, "stuck-phase", "finalizing", "phase stuck batches stay in: finalizing or validating")
	fs.Float64Var(&o.ForgetBatchRate, "forget-batch-rate", 0, "share of batches forgotten right after create (polls answer 404)")
	fs.Float64Var(&o.ResultRetentionScale, "result-retention-scale", 0, "multiply how long batch result files are kept (output_expires_after, else 30 days; 0 = 1): 0.001 makes 1h last 3.6s, for tests of expiry")
	fs.DurationVar(&o.RetryAfter, "retry-after", time.Second, "Retry-After sent with injected 429s")
	fs.Float64Var(&o.SlowRate, "slow-rate", 0, "share of API calls delayed by --slow-delay")
	fs.DurationVar(&o.SlowDelay, "slow-delay", time.Second, "delay of slow calls")
	fs.IntVar(&o.SyncLimit, "sync-limit", 0, "synchronous calls admitted each --sync-window, announced in x-ratelimit-* headers; past it a 429 (0: no limit)")
	fs.DurationVar(&o.SyncWindow, "sync-window", time.Minute, "the window of --sync-limit")
	fs.DurationVar(&o.SyncDelay, "sync-delay", 0, "how long each synchronous call (POST /v1/chat/completions, ...) takes to answer")
	fs.DurationVar(&o.VertexMinBatchTime, "vertex-min-batch-time", 2*time.Second, "least time a Vertex AI batch prediction job lives, whatever --batch-time says (PENDING its first tenth), so that cancel can be exercised; 0 means the default, a negative value no minimum")
	fs.IntVar(&o.BedrockMinRecords, "bedrock-min-records", 0, "Bedrock jobs of fewer records fail validation, as Bedrock's per-model minimum of records per job makes them (0: no minimum)")
	fs.BoolVar(&o.CloudflareAnyModel, "cloudflare-any-model", false, "queue Workers AI batches for any model (default: only the async-capable models docs/providers.md names; the live API refuses the others with 400 code 5007)")
	o.APIKey = os.Getenv("SLUICE_EMULATOR_API_KEY")
	o.GCSHost = os.Getenv("STORAGE_EMULATOR_HOST") // the Vertex AI family's Cloud Storage
	return cmd
}

// emulatorBanner says where the emulator listens and, one line per
// family, the base URL to give each provider's SDK (and sluice), with the
// variable that SDK reads it from: the table GET /_emulator/info answers
// from (emulator.Families).
func emulatorBanner(addr string) string {
	root := "http://" + addr
	var b strings.Builder
	fmt.Fprintf(&b, "sluice emulator listening on %s\n", root)
	for _, f := range emulator.Families {
		fmt.Fprintf(&b, "  %-11s %s=%s%s\n", f.Name+":", f.Env, root, f.Path)
	}
	return b.String()
}
