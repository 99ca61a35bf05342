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

	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/sluice-batch/sluice"
)

// SettleProviderFiles deletes a done job's files at the provider, or
// records that they are kept (--keep-provider-files). A failure is logged,
// not fatal: the output is written; the next run tries again. newProv
// returns the run's provider client (made on first use: a re-run of a done
// job made none).
func SettleProviderFiles(ctx context.Context, db Store, job *sluice.Job, keep bool, concurrency int,
	newProv func() (sluice.Provider, error), log zerolog.Logger) {
	switch {
	case job.State != sluice.JobDone || job.ProviderFiles == sluice.ProviderFilesDeleted:
		return
	case keep:
		if job.ProviderFiles != sluice.ProviderFilesKept {
			if err := db.SetProviderFiles(ctx, job.ID, sluice.ProviderFilesKept); err != nil {
				log.Warn().Err(err).Msg("could not record that the provider files are kept")
			}
			job.ProviderFiles = sluice.ProviderFilesKept
		}
		return
	}
	n, err := deleteProviderFiles(ctx, db, job, concurrency, newProv)
	if err != nil {
		log.Warn().Err(err).Msg("could not delete the job's files at the provider; the next run of this command tries again (or keep them with --keep-provider-files)")
		return
	}
	if err := db.SetProviderFiles(ctx, job.ID, sluice.ProviderFilesDeleted); err != nil {
		log.Warn().Err(err).Msg("could not record the provider files as deleted")
		return
	}
	job.ProviderFiles = sluice.ProviderFilesDeleted
	log.Info().Int("files", n).Msg("deleted the job's files at the provider")
}

// deleteProviderFiles deletes, for every chunk, its uploaded input file and
// its batch's result files, and returns how many it asked to delete.
func deleteProviderFiles(ctx context.Context, db Store, job *sluice.Job, concurrency int, newProv func() (sluice.Provider, error)) (int, error) {
	chunks, err := db.Chunks(ctx, job.ID)
	if err != nil {
		return 0, err
	}
	prov, err := newProv()
	if err != nil {
		return 0, err
	}
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
			if c.BatchID != "" && prov.Capabilities().Files {
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
