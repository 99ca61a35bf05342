package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/dispatcher"
)

func newCancelCmd(g *globalFlags) *cobra.Command {
	var f jobFlags
	var net netFlags
	var wait bool
	cmd := &cobra.Command{
		Use:   "cancel JOB",
		Short: "Cancel the job's live batches at the provider; completed lines are kept and merged",
		Long: `cancel asks the provider to cancel every live batch of JOB, records it, and
marks the job cancelled: nothing new is submitted, requests that did not
complete fail as cancelled, and the lines that did complete are kept. With
--wait (the default) it then waits for the batches to end and merges the
output to the path of the job's last run.`,
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
			switch job.State {
			case sluice.JobDone, sluice.JobMerging:
				return usageErr("job %s is already %s", job.ID, job.State)
			case sluice.JobPlanning:
				return usageErr("job %s was never fully planned; nothing to cancel", job.ID)
			case sluice.JobPlanned, sluice.JobRunning:
				if err := db.SetJobState(ctx, job.ID, job.State, sluice.JobCancelled); err != nil {
					return err
				}
				job.State = sluice.JobCancelled
			}
			prov, closeProv, err := newProvider(ctx, &f, &net, p, db, log)
			if err != nil {
				return err
			}
			defer closeProv()
			chunks, err := db.Chunks(ctx, job.ID)
			if err != nil {
				return err
			}
			n := 0
			for _, c := range chunks {
				if c.State != sluice.ChunkSubmitted {
					continue
				}
				b, err := prov.Cancel(ctx, c.BatchID)
				if err != nil {
					log.Error().Err(err).Int64("chunk", c.ID).Str("batch_id", c.BatchID).Msg("cancel failed")
					continue
				}
				from := c.State
				c.BatchStatus, c.NextPollAt = b.ProviderStatus, b2now()
				if err := db.UpdateChunk(ctx, c, from); err != nil {
					return err
				}
				n++
				log.Info().Int64("chunk", c.ID).Str("batch_id", c.BatchID).Msg("batch cancel requested")
			}
			fmt.Printf("job %s: cancel requested for %d live batches\n", job.ID, n)
			if !wait {
				return nil
			}
			d := dispatcher.New(db, prov, job, dispatcher.Options{Log: log, PollInterval: pollDefault(p.Name), MaxPollInterval: maxPollDefault(p.Name)})
			if _, err := d.Run(ctx, nil); err != nil {
				return err
			}
			if err := db.SetJobState(ctx, job.ID, sluice.JobCancelled, sluice.JobMerging); err != nil {
				return err
			}
			job.State = sluice.JobMerging
			if job.Output == "" {
				fmt.Printf("job %s: every batch has ended; run 'sluice run' with --out to write the output\n", job.ID)
				return nil
			}
			sum, err := mergeJob(ctx, db, job, job.Output, "", "input", log)
			if err != nil {
				return err
			}
			fmt.Printf("job %s cancelled: %d succeeded, %d failed; output %s\n", job.ID, sum.Succeeded, sum.Failed, sum.Output)
			return nil
		},
	}
	net.register(cmd)
	cmd.Flags().StringVar(&f.baseURL, "base-url", "", "provider API base URL (as for run)")
	cmd.Flags().BoolVar(&wait, "wait", true, "wait for the cancelled batches to end and merge the output")
	return cmd
}
