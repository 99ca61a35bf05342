package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/lifecycle"
)

func newCancelCmd(g *globalFlags) *cobra.Command {
	var f jobFlags
	var net netFlags
	var wait bool
	var pollInterval, maxPollInterval time.Duration
	cmd := &cobra.Command{
		Use:   "cancel JOB",
		Short: "Cancel the job's live batches at the provider; completed lines are kept and merged",
		Long: `cancel asks the provider to cancel every live batch of JOB, records it, and
marks the job cancelled: nothing new is submitted, requests that did not
complete fail as cancelled (code cancelled, or the provider's own such as
batch_cancelled), and the lines that did complete are kept. With --wait (the
default) it then waits for the batches to end and merges the output, one
line per input request, to the path of the job's last run; the exit code is
then as for run: 0 if every request had completed anyway, 4 if some were
cancelled (they are in the errors file).

The provider is the job's own (from the state database); its base URL comes
from --base-url, else the provider's environment variable (OPENAI_BASE_URL,
ANTHROPIC_BASE_URL, ...), else its default; the key from the environment as
for run. A run driving the job holds its lock: stop it first.

Interrupting the wait is safe: the job stays cancelled, and 'sluice cancel
JOB' or the job's 'sluice run' command again finishes the merge.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			log, err := g.logger(os.Stderr)
			if err != nil {
				return err
			}
			db, err := g.openDB(ctx)
			if err != nil {
				return err
			}
			defer db.Close()
			job, err := db.Job(ctx, args[0])
			if err != nil {
				return withCode(exitUsage, err)
			}
			lock, err := db.LockJob(job.ID)
			if err != nil {
				return err
			}
			defer lock.Unlock()
			f.provider = job.Provider
			p, err := f.preset()
			if err != nil {
				return err
			}
			files, err := jobStore(ctx, &f, db.Dir()) // --store (objects.go)
			if err != nil {
				return err
			}
			if err := lifecycle.CacheIn(db, job, files); err != nil {
				return err
			}
			start := time.Now()
			// The provider is built first: a cancel refused for its
			// settings (a missing key, bucket, project) leaves the job
			// as it was, not cancelled with its batches still running.
			prov, closeProv, err := newProvider(ctx, &f, &net, p, db, log)
			if err != nil {
				return err
			}
			defer closeProv()
			if err := lifecycle.MarkCancelled(ctx, db, job, log); err != nil {
				return err
			}
			c := lifecycle.NewCanceller(db, prov, job, log)
			if err := c.CancelLive(ctx); err != nil {
				return err
			}
			fmt.Printf("job %s: cancel requested for %d of %s\n", job.ID, c.Accepted(), plural(int64(c.Asked()), "live batch", "live batches"))
			if !wait {
				fmt.Printf("job %s: 'sluice cancel %s' again, or the job's 'sluice run' command, waits for the batches to end and merges\n", job.ID, job.ID)
				return nil
			}
			bar := newRunProgress(os.Stderr, db, job)
			err = c.Wait(ctx, lifecycle.WaitOptions{Log: log, PollInterval: pollInterval, MaxPollInterval: maxPollInterval, OnTick: bar.tick, Files: files})
			bar.done()
			if err != nil {
				return err
			}
			if job.Output == "" {
				fmt.Printf("job %s: every batch has ended; run 'sluice run INPUT --out OUTPUT' to write the output\n", job.ID)
				return nil
			}
			sum, err := lifecycle.Merge(ctx, db, job, lifecycle.MergeOptions{Output: job.Output, Log: log, Objects: objects, Files: files})
			if err != nil {
				return err
			}
			printSummary(os.Stdout, ctx, db, job, sum, runWall{total: time.Since(start)})
			if lifecycle.FailedAny(sum) {
				return silent(sluice.CodeFailures)
			}
			return nil
		},
	}
	net.register(cmd)
	fs := cmd.Flags()
	// cancel creates no batch: a completion window would change nothing.
	_ = fs.MarkHidden("completion-window")
	fs.StringVar(&f.baseURL, "base-url", "", "provider API base URL, as for run (default: the provider's environment variable, e.g. OPENAI_BASE_URL, else its preset)")
	fs.BoolVar(&wait, "wait", true, "wait for the cancelled batches to end and merge the output")
	fs.StringVar(&f.store, "store", "", "where the job's chunk and results files are kept, as for run (default $SLUICE_STORE, else the state directory)")
	fs.DurationVar(&pollInterval, "poll-interval", 0, "first wait before polling a cancelled batch (default "+sluice.CancelPollInterval.String()+"; "+sluice.LocalCancelPollInterval.String()+" for --provider local)")
	fs.DurationVar(&maxPollInterval, "max-poll-interval", 0, "longest wait between polls of a cancelled batch (default "+sluice.CancelMaxPollInterval.String()+"; "+sluice.LocalCancelMaxPollInterval.String()+" for --provider local)")
	return cmd
}
