package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/dispatcher"
	"github.com/sluice-batch/sluice/lifecycle"
	"github.com/sluice-batch/sluice/merger"
	"github.com/sluice-batch/sluice/objstore"
	"github.com/sluice-batch/sluice/pricing"
	"github.com/sluice-batch/sluice/provider"
	"github.com/sluice-batch/sluice/tracker"
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
	// heartbeat (lifecycle/worker.go, docs/scale-out.md).
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
	fs.DurationVar(&f.leaseTTL, "lease-ttl", lifecycle.DefaultLeaseTTL, "how long a worker's leases on its batches last past its last heartbeat (it beats every third of this): a worker killed mid-step leaves its batches to the others this long after")
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

// runPlan is what run's flags and arguments resolve to, all checked
// before anything starts.
type runPlan struct {
	deadline, fallbackAt time.Time
	prices               *pricing.Table
	preset               provider.Preset
	retention            time.Duration
	log                  zerolog.Logger
	input, out           string
}

// resolve checks run's flags and arguments (usage errors, exit 2) and the
// paths they name (preflight.go).
func (f *runFlags) resolve(g *globalFlags, inputArg string) (*runPlan, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	if f.order != "input" && f.order != "any" {
		return nil, usageErr("--order %q: want input or any", f.order)
	}
	if f.concurrency < 1 {
		return nil, usageErr("--concurrency must be at least 1")
	}
	var rp runPlan
	var err error
	if rp.deadline, err = parseDeadline(f.deadline, time.Now()); err != nil {
		return nil, err
	}
	if rp.fallbackAt, err = parseFallback(f.fallback, f.fallbackAt, rp.deadline, time.Now()); err != nil {
		return nil, err
	}
	if rp.prices, err = f.money.checkRun(); err != nil {
		return nil, err
	}
	if rp.preset, err = f.preset(); err != nil {
		return nil, err
	}
	if !rp.fallbackAt.IsZero() && (f.join || os.Getenv("SLUICE_JOIN") == "1") {
		return nil, usageErr("--fallback realtime runs on a single worker: it cannot be used with --join")
	}
	if os.Getenv("SLUICE_JOIN") == "1" {
		f.join = true
	}
	if f.join && rp.preset.Name == "local" {
		return nil, usageErr("--join: --provider local runs its emulator inside each process, so workers would not see each other's batches; run 'sluice emulate' and use --provider openai with OPENAI_BASE_URL pointing at it")
	}
	if _, err := f.notify.dests(); err != nil {
		return nil, err
	}
	if _, err := webhookSigner(); err != nil {
		return nil, err
	}
	if rp.retention, err = f.net.resultsExpiry(rp.preset); err != nil {
		return nil, err
	}
	if f.leaseTTL < 30*time.Millisecond {
		return nil, usageErr("--lease-ttl %s is too short: want at least 30ms (default %s)", f.leaseTTL, lifecycle.DefaultLeaseTTL)
	}
	if rp.log, err = g.logger(os.Stderr); err != nil {
		return nil, err
	}
	if rp.input, err = pathArg(inputArg); err != nil { // a file, or s3://BUCKET/KEY (objects.go)
		return nil, err
	}
	if rp.out, err = pathArg(f.out); err != nil {
		return nil, err
	}
	f.bucket, f.bucketFlag = f.net.providerBucket(&f.jobFlags, rp.preset)
	return &rp, preflight(f, rp.preset, rp.input, rp.out)
}

// runJob is `sluice run`: its life (signals, the worker, the database,
// the provider) is a lifecycle.Life; runJob resolves the flags, reports
// and names the end.
func runJob(parent context.Context, g *globalFlags, f *runFlags, inputArg string) (err error) {
	rp, err := f.resolve(g, inputArg)
	if err != nil {
		return err
	}
	life := lifecycle.Start(parent, rp.log)
	defer func() { err = stoppedBySignal(err, life.Cancelled()) }()
	defer life.Stop()
	ctx, log := life.Context(), rp.log
	if err := checkOutputFree(ctx, g, &f.jobFlags, rp.preset, rp.input, rp.out, f.join, log); err != nil {
		return err
	}
	db, pr, wk, closeJob, err := openJob(ctx, g, &f.jobFlags, rp.preset, rp.input, log, &workerOpts{join: f.join, ttl: f.leaseTTL, stop: life.Stopping()})
	if errors.Is(err, lifecycle.ErrStopped) {
		log.Info().Msg("stopped while waiting for another worker's plan")
		return silent(sluice.CodeStopped)
	}
	if err != nil {
		return err
	}
	life.Own(closeJob)
	// The job's lock lost for good (its PostgreSQL connection dropped and
	// another run took the job) or the worker's leases lapsed stop the
	// run, named as its cause (lifecycle/lockgate.go).
	wk.WatchLock(log, life.Cancel)
	defer func() { err = wk.FailureCause(err) }()
	if err := wk.LockLost(); err != nil {
		return err
	}
	r := &jobRun{f: f, rp: rp, life: life, db: db, job: pr.Job, wk: wk}
	mt, err := startMetrics(&f.metrics, db, r.job, log)
	if err != nil {
		return err
	}
	defer func() { mt.close(runExitCode(err, life.Cancelled()), log) }()
	if r.nt, err = newNotifier(&f.notify, db, r.job, log); err != nil {
		return err
	}
	r.nt.start()
	defer func() {
		r.job.Output = rp.out
		notifyEnd(r.nt, db, r.job, r.end, err, life.Cancelled())
	}()
	return r.run(pr)
}

// jobRun is one run of a job once it is planned and this process is its
// worker.
type jobRun struct {
	f    *runFlags
	rp   *runPlan
	life *lifecycle.Life
	db   tracker.Backend
	job  *sluice.Job
	wk   *lifecycle.Worker
	nt   *notifier
	prov sluice.Provider
	end  runEnd // the event this run ends with (notify.go)
}

// provider is the run's provider behind the worker's gate, built on first
// use and stopped with the run's life.
func (r *jobRun) provider() (sluice.Provider, error) {
	if r.prov == nil {
		pv, closeProv, err := newProvider(r.life.Context(), &r.f.jobFlags, &r.f.net, r.rp.preset, r.db, r.rp.log)
		if err != nil {
			return nil, err
		}
		r.life.Own(closeProv)
		r.prov = lifecycle.GateProvider(pv, r.wk)
	}
	return r.prov, nil
}

// run dispatches the job, then merges it (or another worker does).
func (r *jobRun) run(pr *lifecycle.Prepared) error {
	ctx, f, job, log := r.life.Context(), r.f, r.job, r.rp.log
	doneBefore := job.State == sluice.JobDone
	files, err := jobStore(ctx, &f.jobFlags, r.db.Dir())
	if err != nil {
		return err
	}
	if pr.Reused {
		log.Info().Str("state", string(job.State)).Msg("resuming job")
		noteSkipInvalid(log, &f.jobFlags, pr)
	} else {
		log.Info().Int64("requests", job.Requests).Int64("rejected", job.Rejected).Msg("job planned")
	}
	if job.Output != "" && job.Output != r.rp.out && job.State != sluice.JobPlanned {
		log.Warn().Str("was", job.Output).Str("now", r.rp.out).Msg("output path differs from the first run's; writing to the new one")
	}
	start := time.Now()
	outcome, err := r.dispatch(files)
	if err != nil {
		return err
	}
	if outcome != dispatcher.Finished {
		return r.stopped(outcome)
	}
	return r.merge(files, doneBefore, start)
}

// dispatch runs the job's batches to their end, or until it stops.
func (r *jobRun) dispatch(files objstore.Store) (dispatcher.Outcome, error) {
	ctx, f, rp := r.life.Context(), r.f, r.rp
	var runProv sluice.Provider
	var bar *runProgress
	var onTick func([]*sluice.Chunk)
	if lifecycle.Dispatches(r.job) {
		var err error
		if runProv, err = r.provider(); err != nil {
			return 0, err
		}
		bar = newRunProgress(os.Stderr, r.db, r.job)
		defer bar.done()
		onTick = func(c []*sluice.Chunk) { bar.tick(c); r.nt.onTick(c) }
	}
	// Through the database going away and coming back, the dispatch starts
	// over from the tracker's state (lifecycle/lockgate.go).
	return r.wk.Ride(ctx, rp.log, func() (dispatcher.Outcome, error) {
		return lifecycle.Run(ctx, lifecycle.WithLeases(r.db, r.wk), runProv, r.job, lifecycle.RunOptions{Output: rp.out,
			Concurrency: f.concurrency, PollInterval: f.pollInterval, MaxPollInterval: f.maxPollInterval,
			Deadline: rp.deadline, FallbackAt: rp.fallbackAt, StuckFallback: f.fallback != "", Once: f.once, Log: rp.log, OnTick: onTick, ReconcileGrace: f.reconcileGrace,
			StuckAfter: f.stuckAfter, MaxCost: f.money.maxCost, Price: priceOf(rp.prices, rp.preset), Files: files,
			Claim: r.wk.Claim, ResultsRetention: rp.retention}, r.life.Stopping())
	})
}

// stopped ends a run whose dispatch stopped with work left (exit 3).
func (r *jobRun) stopped(outcome dispatcher.Outcome) error {
	ctx, job, deadline := r.life.Context(), r.job, r.rp.deadline
	if outcome == dispatcher.CapReached {
		r.end = runEnd{evStopped, stableID(job.ID, evStopped, "spend_cap", fmt.Sprint(r.f.money.maxCost)), "spend_cap"}
		return capReached(ctx, r.db, job, r.rp.preset, r.rp.prices, r.f.money.maxCost)
	}
	why := "stopped"
	r.end = runEnd{evStopped, randomID("evt_"), "signal"}
	switch {
	case r.f.once:
		why = "--once: batches still running at the provider"
		r.end.reason = "once"
	case !deadline.IsZero() && !time.Now().Before(deadline):
		why = "--deadline reached: batches left running at the provider"
		r.end = runEnd{evStopped, stableID(job.ID, evStopped, "deadline", deadline.UTC().Format(time.RFC3339)), "deadline"}
	}
	r.rp.log.Info().Str("reason", why).Msg("state saved; run the same command again to continue")
	printProgressSummary(ctx, r.db, job)
	return silent(sluice.CodeStopped)
}

// merge writes the output, once: one worker merges, the others exit 0
// once it has.
func (r *jobRun) merge(files objstore.Store, doneBefore bool, start time.Time) error {
	ctx, f, job, log := r.life.Context(), r.f, r.job, r.rp.log
	var sum *merger.Summary
	var cleanup time.Duration // deleting the job's files at the provider
	merged, err := r.wk.MergeOnce(ctx, r.life.Stopping(), doneBefore, func(fresh *sluice.Job) error {
		job.State = fresh.State
		var err error
		sum, err = lifecycle.Merge(ctx, r.db, job, lifecycle.MergeOptions{Output: r.rp.out, Errors: f.errorsOut,
			Order: f.order, Log: log, Objects: objects, Files: files})
		if err != nil {
			return err
		}
		cleanup = lifecycle.SettleProviderFiles(ctx, r.db, job, f.keepProviderFiles, f.concurrency, r.provider, log)
		return nil
	})
	if errors.Is(err, lifecycle.ErrStopped) {
		r.end = runEnd{evStopped, randomID("evt_"), "signal"}
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
	printSummary(os.Stdout, ctx, r.db, job, sum, runWall{time.Since(start), cleanup})
	if lifecycle.FailedAny(sum) {
		r.end = runEnd{evFailures, stableID(job.ID, evFailures), ""}
		return silent(sluice.CodeFailures)
	}
	r.end = runEnd{evDone, stableID(job.ID, evDone), ""}
	return nil
}

func errorsPathFor(out string) string { return lifecycle.ErrorsPathFor(out) }
