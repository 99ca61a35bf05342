package lifecycle

// Files left at the provider. Once a job's output is
// written, the files sluice made at the provider for it (each chunk's
// uploaded input, each batch's output and error files) are deleted, so
// they do not count against the user's storage and file limits there. The
// step is recorded in the tracker (jobs.provider_files, migration 0006): a
// run that dies between the merge and the end of the cleanup leaves the
// job done with its files "live", and the next run of the same command
// finishes the cleanup. Deleting is idempotent: a file already gone is
// not an error (provider.Forget).

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/sluice-batch/sluice"
)

// SettleProviderFiles deletes a done job's files at the provider, or
// records that they are kept (--keep-provider-files), and returns how long
// the deleting took. A failure is logged, not fatal: the output is
// written; the next run tries again. newProv returns the run's provider
// client (made on first use: a re-run of a done job made none). The
// deleting is logged when it starts and every cleanupProgressEvery while
// it lasts: it makes calls (rate-limited, concurrency at a time) for
// every batch of the job after the output is written.
func SettleProviderFiles(ctx context.Context, db Store, job *sluice.Job, keep bool, concurrency int,
	newProv func() (sluice.Provider, error), log zerolog.Logger) time.Duration {
	switch {
	case job.State != sluice.JobDone || job.ProviderFiles == sluice.ProviderFilesDeleted:
		return 0
	case keep:
		if job.ProviderFiles != sluice.ProviderFilesKept {
			if err := db.SetProviderFiles(ctx, job.ID, sluice.ProviderFilesKept); err != nil {
				log.Warn().Err(err).Msg("could not record that the provider files are kept")
			}
			job.ProviderFiles = sluice.ProviderFilesKept
		}
		return 0
	}
	start := time.Now()
	n, err := deleteProviderFiles(ctx, db, job, concurrency, newProv, log)
	took := time.Since(start)
	if err != nil {
		log.Warn().Err(err).Msg("could not delete the job's files at the provider; the next run of this command tries again (or keep them with --keep-provider-files)")
		return took
	}
	if err := db.SetProviderFiles(ctx, job.ID, sluice.ProviderFilesDeleted); err != nil {
		log.Warn().Err(err).Msg("could not record the provider files as deleted")
		return took
	}
	job.ProviderFiles = sluice.ProviderFilesDeleted
	log.Info().Int("files", n).Dur("took", took).Msg("deleted the job's files at the provider")
	return took
}

// cleanupProgressEvery is how often a long deletion of provider files says
// how far it is.
const cleanupProgressEvery = 5 * time.Second

// deleteProviderFiles deletes, for every chunk, its uploaded input file and
// its batch's result files, and returns how many it asked to delete.
func deleteProviderFiles(ctx context.Context, db Store, job *sluice.Job, concurrency int, newProv func() (sluice.Provider, error), log zerolog.Logger) (int, error) {
	chunks, err := db.Chunks(ctx, job.ID)
	if err != nil {
		return 0, err
	}
	prov, err := newProv()
	if err != nil {
		return 0, err
	}
	log.Info().Int("batches", len(chunks)).Int("concurrency", max(concurrency, 1)).
		Msg("deleting the job's files at the provider (each batch's input and result files; the output is written)")
	var finished atomic.Int64
	stopProgress := make(chan struct{})
	defer close(stopProgress)
	go func() {
		t := time.NewTicker(cleanupProgressEvery)
		defer t.Stop()
		for {
			select {
			case <-stopProgress:
				return
			case <-t.C:
				log.Info().Int64("done", finished.Load()).Int("batches", len(chunks)).Msg("deleting the job's files at the provider")
			}
		}
	}()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(concurrency, 1))
	counts := make([]int, len(chunks))
	for i, c := range chunks {
		g.Go(func() error {
			ref := c.Ref(job.Dir)
			var ids []string
			if c.FileID != "" {
				ids = append(ids, c.FileID)
			}
			if c.BatchID != "" && !c.Realtime() && prov.Capabilities().Files { // a realtime chunk has no batch
				// The batch names its result files; a batch the provider no
				// longer knows has none left to delete.
				b, err := prov.Poll(gctx, ref, c.BatchID)
				switch {
				case errors.Is(err, sluice.ErrNotFound):
				case err != nil:
					return fmt.Errorf("chunk %d: look up batch %s: %w", c.ID, c.BatchID, err)
				default:
					ids = append(ids, b.OutputFileID, b.ErrorFileID)
				}
			}
			for _, id := range ids {
				if id != "" {
					counts[i]++
				}
			}
			if err := prov.Forget(gctx, ref, ids...); err != nil {
				return fmt.Errorf("chunk %d: %w", c.ID, err)
			}
			finished.Add(1)
			return nil
		})
	}
	err = g.Wait()
	total := 0
	for _, n := range counts {
		total += n
	}
	return total, err
}
