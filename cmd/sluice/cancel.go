package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/dispatcher"
	"github.com/sluice-batch/sluice/tracker"
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
			start := time.Now()
			switch job.State {
			case sluice.JobDone, sluice.JobMerging:
				return usageErr("job %s is already %s: nothing to cancel", job.ID, job.State)
			case sluice.JobPlanning:
				return usageErr("job %s was never fully planned: nothing to cancel", job.ID)
			case sluice.JobPlanned, sluice.JobRunning:
				at, err := db.CancelJob(ctx, job.ID, job.State)
				if err != nil {
					return err
				}
				job.State, job.CancelRequestedAt = sluice.JobCancelled, at
				log.Info().Str("job", job.ID).Msg("job cancelled: nothing new will be submitted")
			}
			prov, closeProv, err := newProvider(ctx, &f, &net, p, db, log)
			if err != nil {
				return err
			}
			defer closeProv()
			c := &canceller{db: db, prov: prov, log: log.With().Str("job", job.ID).Logger(), asked: map[string]bool{}}
			chunks, err := db.Chunks(ctx, job.ID)
			if err != nil {
				return err
			}
			if err := c.cancelLive(ctx, chunks); err != nil {
				return err
			}
			fmt.Printf("job %s: cancel requested for %d of %s\n", job.ID, c.ok, plural(int64(len(c.asked)), "live batch", "live batches"))
			if !wait {
				fmt.Printf("job %s: 'sluice cancel %s' again, or the job's 'sluice run' command, waits for the batches to end and merges\n", job.ID, job.ID)
				return nil
			}
			bar := newRunProgress(os.Stderr, db, job)
			d := dispatcher.New(db, prov, job, dispatcher.Options{Log: log,
				PollInterval:    orDefault(pollInterval, cancelPollDefault(p.Name)),
				MaxPollInterval: orDefault(maxPollInterval, cancelMaxPollDefault(p.Name)),
				OnTick: func(chunks []*sluice.Chunk) {
					// A batch that a crashed run left mid-create and that the
					// dispatcher just adopted is live too: cancel it as well.
					if err := c.cancelLive(ctx, chunks); err != nil {
						log.Error().Err(err).Msg("record a cancel")
					}
					bar.tick(chunks)
				}})
			_, err = d.Run(ctx, nil)
			bar.done()
			if err != nil {
				return err
			}
			if err := db.SetJobState(ctx, job.ID, sluice.JobCancelled, sluice.JobMerging); err != nil {
				return err
			}
			job.State = sluice.JobMerging
			if job.Output == "" {
				fmt.Printf("job %s: every batch has ended; run 'sluice run INPUT --out OUTPUT' to write the output\n", job.ID)
				return nil
			}
			sum, err := mergeJob(ctx, db, job, job.Output, "", "input", log)
			if err != nil {
				return err
			}
			printSummary(os.Stdout, ctx, db, job, sum, time.Since(start))
			if failedAny(sum) {
				return silent(exitFailures)
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
	fs.DurationVar(&pollInterval, "poll-interval", 0, "first wait before polling a cancelled batch (default 5s; 200ms for --provider local)")
	fs.DurationVar(&maxPollInterval, "max-poll-interval", 0, "longest wait between polls of a cancelled batch (default 30s; 1s for --provider local)")
	return cmd
}

func cancelPollDefault(provider string) time.Duration {
	if provider == "local" {
		return 200 * time.Millisecond
	}
	return 5 * time.Second
}

func cancelMaxPollDefault(provider string) time.Duration {
	if provider == "local" {
		return time.Second
	}
	return 30 * time.Second
}

// canceller asks the provider to cancel each live batch once.
type canceller struct {
	db    tracker.Backend
	prov  sluice.Provider
	log   zerolog.Logger
	asked map[string]bool // batch ids already asked
	ok    int             // cancels the provider accepted
}

func (k *canceller) cancelLive(ctx context.Context, chunks []*sluice.Chunk) error {
	for _, c := range chunks {
		if c.State != sluice.ChunkSubmitted || c.BatchID == "" || k.asked[c.BatchID] {
			continue
		}
		k.asked[c.BatchID] = true
		log := k.log.With().Int64("chunk", c.ID).Str("batch_id", c.BatchID).Logger()
		b, err := k.prov.Cancel(ctx, c.BatchID)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			// Most often the batch ended before the cancel reached it: its
			// results are read at the next poll like any other.
			log.Warn().Err(err).Msg("cancel refused; the batch is polled for its results")
		} else {
			k.ok++
			c.BatchStatus = b.ProviderStatus
			log.Info().Str("status", b.ProviderStatus).Msg("batch cancel requested")
		}
		// Poll it now rather than at the schedule of the last run.
		c.NextPollAt = time.Now()
		if err := k.db.UpdateChunk(ctx, c, sluice.ChunkSubmitted); err != nil {
			return err
		}
	}
	return nil
}
