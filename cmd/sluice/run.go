package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/dispatcher"
	"github.com/sluice-batch/sluice/lifecycle"
	"github.com/sluice-batch/sluice/merger"
)

type runFlags struct {
	jobFlags
	out             string
	errorsOut       string
	order           string
	concurrency     int
	pollInterval    time.Duration
	maxPollInterval time.Duration
	deadline        string
	fallback        string
	fallbackAt      string
	once            bool
	reconcileGrace  time.Duration
	stuckAfter      time.Duration
	net             netFlags
	// keepProviderFiles keeps the job's files at the provider once its
	// output is written (lifecycle/cleanup.go).
	keepProviderFiles bool
	// join makes this run one of several workers of the job on this
	// machine; leaseTTL is how long a worker's leases outlive its last
	// heartbeat (cmd/sluice/worker.go, docs/scale-out.md).
	join     bool
	leaseTTL time.Duration
	// notify and metrics: events POSTed when the run ends (notify.go) and
	// Prometheus metrics while it lives (metrics.go).
	notify  notifyFlags
	metrics metricsFlags
}

func newRunCmd(g *globalFlags) *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run INPUT --out OUTPUT",
		Short: "Plan, submit, poll, download and merge; re-run the same command to resume",
		Long: `run drives INPUT to OUTPUT: it plans the job (or reuses the plan of the same
unchanged input), submits batches with bounded concurrency under the
provider's limits, polls them, downloads results, retries what can be
retried in new batches, and merges every result into OUTPUT, one line per
input request in input order (.gz or .zst names are compressed). Requests
that failed for good are also written to the errors file.

INPUT and OUTPUT may be objects in S3 or an S3-compatible store
(s3://BUCKET/KEY): the input is streamed in ranged reads, the output
uploaded whole by multipart upload. --store keeps the job's chunk and
results files in a store as well (docs/scale-out.md, "Object storage").
Credentials and endpoint as the AWS SDKs read them: AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION, AWS_ENDPOINT_URL_S3.

Everything is recorded in the state directory before and after each call to
the provider, so killing sluice at any moment and running the same command
again resumes the job without buying any batch twice.

Money (docs/money.md): --max-cost USD never lets the job's committed spend
pass the cap (exit 3 when nothing more fits; run again with a higher cap),
and --reuse (the default) answers requests an earlier job already bought
from its results instead of buying them again.

Workers (docs/scale-out.md): one run drives a job, and a second run of it
refuses while the first holds its lock. Runs started with --join share the
job instead: one plans, each batch's next step is leased to one of them at
a time (a killed worker's leases pass to the others --lease-ttl after its
last heartbeat), one merges and the others exit 0.

Stopping: the first SIGINT/SIGTERM stops new submissions and lets calls in
flight record their outcome; a second one cancels them (the next run
reconciles). Batches keep running at the provider either way.

Monitoring (docs/monitoring.md): --notify URL POSTs an event (Standard
Webhooks, signed with $SLUICE_WEBHOOK_SECRET) when the job is done, finishes
with failures, stops, fails or has a batch stuck, recorded first in the
tracker so that each is sent once across re-runs, crashes and workers;
--metrics-addr serves Prometheus metrics while the run lives and
--metrics-file writes them when it ends (node_exporter's textfile collector).

` + credentialsHelp() + `
` + exitCodesHelp,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runJob(cmd.Context(), g, &f, args[0]) },
	}
	f.register(cmd)
	f.registerRun(cmd)
	f.net.register(cmd)
	f.net.registerExpiry(cmd)
	f.money.registerRun(cmd)
	f.notify.register(cmd)
	f.metrics.register(cmd)
	fs := cmd.Flags()
	fs.StringVarP(&f.out, "out", "o", "", "output file or s3://BUCKET/KEY (required); .gz or .zst compresses")
	fs.StringVar(&f.errorsOut, "errors", "", "errors file (or s3://BUCKET/KEY) for requests that failed for good (default: OUTPUT with .errors before the extension)")
	fs.StringVar(&f.order, "order", "input", "output order: input (the input's order) or any (as results came, cheaper)")
	fs.IntVar(&f.concurrency, "concurrency", sluice.DefaultConcurrency, "provider calls in flight at once (uploads, creates, polls, downloads)")
	fs.DurationVar(&f.pollInterval, "poll-interval", 0, "first wait before polling a batch; grows by half each poll (default "+sluice.DefaultPollInterval.String()+"; "+sluice.LocalPollInterval.String()+" for --provider local)")
	fs.DurationVar(&f.maxPollInterval, "max-poll-interval", 0, "longest wait between polls of one batch (default "+helpDuration(sluice.DefaultMaxPollInterval)+"; "+sluice.LocalMaxPollInterval.String()+" for --provider local)")
	fs.StringVar(&f.deadline, "deadline", "", "stop submitting and polling at this time, leaving batches running at the provider, and exit 3: a clock time (07:00, the next one to come) or a duration (8h)")
	fs.StringVar(&f.fallback, "fallback", "", "realtime: at --fallback-at, cancel the live batches (keeping every line they finished) and send every request still unanswered through the provider's synchronous API, at the full (non-batch) rate under --max-cost, --concurrency calls at once; batches cancelled as stuck (--stuck-after) fall back the same way (Cloudflare, which cannot cancel, lets them end first; docs/crash-safety.md)")
	fs.StringVar(&f.fallbackAt, "fallback-at", "", "when --fallback begins: a clock time (06:30, the next one to come), RFC 3339, or a duration meaning that long before --deadline (30m)")
	fs.BoolVar(&f.once, "once", false, "do every step that is ready now (submit, poll each batch once, download, merge) and exit without sleeping: exit 0/4 when done, 3 when work is still running (for cron and systemd timers)")
	fs.DurationVar(&f.reconcileGrace, "reconcile-grace", sluice.DefaultReconcileGrace, "after a crash, how long to keep looking at the provider for a batch or file the killed run may still have created before submitting again")
	fs.DurationVar(&f.stuckAfter, "stuck-after", sluice.DefaultStuckAfter, "a batch not ended this long after it was submitted (stuck in validating or finalizing) is cancelled; what it finished is kept and the rest retried in a new batch (and --notify sends batch.stuck)")
	fs.BoolVar(&f.keepProviderFiles, "keep-provider-files", false, "once the output is written, keep the job's files at the provider (uploaded inputs, result files) instead of deleting them")
	fs.BoolVar(&f.join, "join", false, "join the job as one more worker beside the runs of it already going (started with --join too) on this state directory, instead of refusing while one runs: one worker plans, each batch's next step is leased to one worker at a time, one merges, the others exit 0 (also $SLUICE_JOIN=1)")
	fs.DurationVar(&f.leaseTTL, "lease-ttl", DefaultLeaseTTL, "how long a worker's leases on its batches last past its last heartbeat (it beats every third of this): a worker killed mid-step leaves its batches to the others this long after")
	cmd.MarkFlagRequired("out")
	return cmd
}

// parseDeadline reads "07:00" (the next such clock time) or "8h".
func parseDeadline(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, usageErr("--deadline %q must be positive", s)
		}
		return now.Add(d), nil
	}
	for _, layout := range []string{"15:04", "15:04:05"} {
		if t, err := time.ParseInLocation(layout, s, now.Location()); err == nil {
			at := time.Date(now.Year(), now.Month(), now.Day(), t.Hour(), t.Minute(), t.Second(), 0, now.Location())
			if !at.After(now) {
				at = at.AddDate(0, 0, 1)
			}
			return at, nil
		}
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	return time.Time{}, usageErr("--deadline %q: want a clock time like 07:00, a duration like 8h, or RFC 3339", s)
}

// parseFallback reads --fallback and --fallback-at: the time the realtime
// fallback begins (zero without --fallback). A duration counts back from
// the deadline; a clock time is the next one to come, before the deadline.
func parseFallback(mode, at string, deadline, now time.Time) (time.Time, error) {
	switch {
	case mode == "" && at == "":
		return time.Time{}, nil
	case mode == "":
		return time.Time{}, usageErr("--fallback-at needs --fallback realtime")
	case mode != "realtime":
		return time.Time{}, usageErr("--fallback %q: want realtime", mode)
	case at == "":
		return time.Time{}, usageErr("--fallback realtime needs --fallback-at (a clock time like 06:30, or a duration before --deadline like 30m)")
	}
	if d, err := time.ParseDuration(at); err == nil {
		if deadline.IsZero() {
			return time.Time{}, usageErr("--fallback-at %q is a duration before --deadline, and no --deadline is set", at)
		}
		if d < 0 {
			return time.Time{}, usageErr("--fallback-at %q must not be negative", at)
		}
		return deadline.Add(-d), nil
	}
	t, err := parseDeadline(at, now)
	if err != nil {
		return time.Time{}, usageErr("--fallback-at %q: want a clock time like 06:30, a duration before --deadline like 30m, or RFC 3339", at)
	}
	if !deadline.IsZero() && !t.Before(deadline) {
		return time.Time{}, usageErr("--fallback-at %s is not before --deadline %s", t.Format(time.RFC3339), deadline.Format(time.RFC3339))
	}
	return t, nil
}

func runJob(parent context.Context, g *globalFlags, f *runFlags, inputArg string) (err error) {
	var cancelled atomic.Bool // by a second signal
	defer func() { err = stoppedBySignal(err, cancelled.Load()) }()
	if err := f.check(); err != nil {
		return err
	}
	if f.order != "input" && f.order != "any" {
		return usageErr("--order %q: want input or any", f.order)
	}
	if f.concurrency < 1 {
		return usageErr("--concurrency must be at least 1")
	}
	deadline, err := parseDeadline(f.deadline, time.Now())
	if err != nil {
		return err
	}
	fallbackAt, err := parseFallback(f.fallback, f.fallbackAt, deadline, time.Now())
	if err != nil {
		return err
	}
	prices, err := f.money.checkRun()
	if err != nil {
		return err
	}
	p, err := f.preset()
	if err != nil {
		return err
	}
	if !fallbackAt.IsZero() && (f.join || os.Getenv("SLUICE_JOIN") == "1") {
		return usageErr("--fallback realtime runs on a single worker: it cannot be used with --join")
	}
	if os.Getenv("SLUICE_JOIN") == "1" {
		f.join = true
	}
	if f.join && p.Name == "local" {
		return usageErr("--join: --provider local runs its emulator inside each process, so workers would not see each other's batches; run 'sluice emulate' and use --provider openai with OPENAI_BASE_URL pointing at it")
	}
	if _, err := f.notify.dests(); err != nil {
		return err
	}
	if _, err := webhookSigner(); err != nil {
		return err
	}
	retention, err := f.net.resultsExpiry(p)
	if err != nil {
		return err
	}
	if f.leaseTTL < 30*time.Millisecond {
		return usageErr("--lease-ttl %s is too short: want at least 30ms (default %s)", f.leaseTTL, DefaultLeaseTTL)
	}
	log, err := g.logger(os.Stderr)
	if err != nil {
		return err
	}
	input, err := pathArg(inputArg) // a file, or s3://BUCKET/KEY (objects.go)
	if err != nil {
		return err
	}
	out, err := pathArg(f.out)
	if err != nil {
		return err
	}
	if err := preflight(f, p, input, out); err != nil {
		return err
	}

	// Two-phase shutdown: the first signal closes stop, the second cancels.
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	stop := make(chan struct{})
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		n := 0
		var first time.Time
		for {
			select {
			case <-sigs:
				// timeout(1) and process-group kills deliver one stop as two
				// signals at once: a second signal counts only a moment later.
				if n == 1 && time.Since(first) < 500*time.Millisecond {
					continue
				}
				n++
				if n == 1 {
					first = time.Now()
					log.Warn().Msg("stopping: no new submissions; waiting for calls in flight (signal again to cancel them)")
					close(stop)
				} else {
					log.Warn().Msg("cancelling calls in flight")
					cancelled.Store(true)
					cancel()
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()

	if err := checkOutputFree(ctx, g, &f.jobFlags, p, input, out, f.join, log); err != nil {
		return err
	}
	db, pr, wk, closeJob, err := openJob(ctx, g, &f.jobFlags, p, input, log, &workerOpts{join: f.join, ttl: f.leaseTTL, stop: stop})
	if errors.Is(err, errStopped) {
		log.Info().Msg("stopped while waiting for another worker's plan")
		return silent(sluice.CodeStopped)
	}
	if err != nil {
		return err
	}
	defer closeJob()
	// The job's lock lost for good (its PostgreSQL connection dropped and
	// another run took the job) or the worker's leases lapsed stop the
	// run, named as its cause (lockgate.go).
	wk.watchLock(log, cancel)
	defer func() { err = wk.failureCause(err) }()
	if err := wk.lock.Lost(); err != nil {
		return err
	}
	job := pr.Job
	mt, err := startMetrics(&f.metrics, db, job, log)
	if err != nil {
		return err
	}
	defer func() { mt.close(runExitCode(err, cancelled.Load()), log) }()
	nt, err := newNotifier(&f.notify, db, job, log)
	if err != nil {
		return err
	}
	var end runEnd // the event this run ends with (notify.go)
	nt.start()
	defer func() {
		job.Output = out
		notifyEnd(nt, db, job, end, err, cancelled.Load())
	}()
	doneBefore := job.State == sluice.JobDone
	files, err := jobStore(ctx, &f.jobFlags, db.Dir())
	if err != nil {
		return err
	}
	if pr.Reused {
		log.Info().Str("state", string(job.State)).Msg("resuming job")
		noteSkipInvalid(log, &f.jobFlags, pr)
	} else {
		log.Info().Int64("requests", job.Requests).Int64("rejected", job.Rejected).Msg("job planned")
	}
	if job.Output != "" && job.Output != out && job.State != sluice.JobPlanned {
		log.Warn().Str("was", job.Output).Str("now", out).Msg("output path differs from the first run's; writing to the new one")
	}
	start := time.Now()
	var prov sluice.Provider
	var closers []func()
	getProv := func() (sluice.Provider, error) {
		if prov == nil {
			pv, closeProv, err := newProvider(ctx, &f.jobFlags, &f.net, p, db, log)
			if err != nil {
				return nil, err
			}
			prov, closers = gateProvider(pv, wk), append(closers, closeProv)
		}
		return prov, nil
	}
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	var runProv sluice.Provider
	var bar *runProgress
	var onTick func([]*sluice.Chunk)
	if lifecycle.Dispatches(job) {
		if runProv, err = getProv(); err != nil {
			return err
		}
		bar = newRunProgress(os.Stderr, db, job)
		onTick = func(c []*sluice.Chunk) { bar.tick(c); nt.onTick(c) }
	}
	// Through the database going away and coming back, the dispatch starts
	// over from the tracker's state (lockgate.go).
	outcome, err := wk.ride(ctx, log, func() (dispatcher.Outcome, error) {
		return lifecycle.Run(ctx, withLeases(db, wk), runProv, job, lifecycle.RunOptions{Output: out,
			Concurrency: f.concurrency, PollInterval: f.pollInterval, MaxPollInterval: f.maxPollInterval,
			Deadline: deadline, FallbackAt: fallbackAt, StuckFallback: f.fallback != "", Once: f.once, Log: log, OnTick: onTick, ReconcileGrace: f.reconcileGrace,
			StuckAfter: f.stuckAfter, MaxCost: f.money.maxCost, Price: priceOf(prices, p), Files: files,
			Claim: wk.claim, ResultsRetention: retention}, stop)
	})
	if bar != nil {
		bar.done()
	}
	if err != nil {
		return err
	}
	switch outcome {
	case dispatcher.CapReached:
		end = runEnd{evStopped, stableID(job.ID, evStopped, "spend_cap", fmt.Sprint(f.money.maxCost)), "spend_cap"}
		return capReached(ctx, db, job, p, prices, f.money.maxCost)
	case dispatcher.Stopped:
		why := "stopped"
		end = runEnd{evStopped, randomID("evt_"), "signal"}
		switch {
		case f.once:
			why = "--once: batches still running at the provider"
			end.reason = "once"
		case !deadline.IsZero() && !time.Now().Before(deadline):
			why = "--deadline reached: batches left running at the provider"
			end = runEnd{evStopped, stableID(job.ID, evStopped, "deadline", deadline.UTC().Format(time.RFC3339)), "deadline"}
		}
		log.Info().Str("reason", why).Msg("state saved; run the same command again to continue")
		printProgressSummary(ctx, db, job)
		return silent(sluice.CodeStopped)
	}
	// One worker merges; the others exit 0 once it has.
	var sum *merger.Summary
	var cleanup time.Duration // deleting the job's files at the provider
	merged, err := wk.mergeOnce(ctx, stop, doneBefore, func(fresh *sluice.Job) error {
		job.State = fresh.State
		var err error
		sum, err = lifecycle.Merge(ctx, db, job, lifecycle.MergeOptions{Output: out, Errors: f.errorsOut,
			Order: f.order, Log: log, Objects: objects, Files: files})
		if err != nil {
			return err
		}
		cleanup = lifecycle.SettleProviderFiles(ctx, db, job, f.keepProviderFiles, f.concurrency, getProv, log)
		return nil
	})
	if errors.Is(err, errStopped) {
		end = runEnd{evStopped, randomID("evt_"), "signal"}
		log.Info().Msg("stopped while another worker merges; run the same command again to continue")
		return silent(sluice.CodeStopped)
	}
	if err != nil {
		return err
	}
	if !merged {
		log.Info().Str("job", job.ID).Msg("job done: another worker merged it")
		return nil
	}
	printSummary(os.Stdout, ctx, db, job, sum, runWall{time.Since(start), cleanup})
	if lifecycle.FailedAny(sum) {
		end = runEnd{evFailures, stableID(job.ID, evFailures), ""}
		return silent(sluice.CodeFailures)
	}
	end = runEnd{evDone, stableID(job.ID, evDone), ""}
	return nil
}

func errorsPathFor(out string) string { return lifecycle.ErrorsPathFor(out) }
