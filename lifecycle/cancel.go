package lifecycle

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/dispatcher"
	"github.com/sluice-batch/sluice/objstore"
)

// MarkCancelled moves a planned or running job to cancelled: nothing new
// is submitted from then on. A job already cancelled is left as it is (a
// cancel interrupted while waiting is carried on); a job that was never
// fully planned, or is merging or done, is refused (ErrBadInput).
func MarkCancelled(ctx context.Context, db Store, job *sluice.Job, log zerolog.Logger) error {
	switch job.State {
	case sluice.JobDone, sluice.JobMerging:
		return badInputf("job %s is already %s: nothing to cancel", job.ID, job.State)
	case sluice.JobPlanning:
		return badInputf("job %s was never fully planned: nothing to cancel", job.ID)
	case sluice.JobPlanned, sluice.JobRunning:
		at, err := db.CancelJob(ctx, job.ID, job.State)
		if err != nil {
			return err
		}
		job.State, job.CancelRequestedAt = sluice.JobCancelled, at
		log.Info().Str("job", job.ID).Msg("job cancelled: nothing new will be submitted")
	}
	return nil
}

// Canceller asks the provider to cancel each live batch of a cancelled job
// once, then waits for them to end.
type Canceller struct {
	db    Store
	prov  sluice.Provider
	job   *sluice.Job
	log   zerolog.Logger
	asked map[string]bool // batch ids already asked
	ok    int             // cancels the provider accepted
}

// NewCanceller returns a canceller of job (cancelled: MarkCancelled).
func NewCanceller(db Store, prov sluice.Provider, job *sluice.Job, log zerolog.Logger) *Canceller {
	return &Canceller{db: db, prov: prov, job: job, log: log.With().Str("job", job.ID).Logger(), asked: map[string]bool{}}
}

// Asked is how many live batches the canceller asked the provider to
// cancel; Accepted how many of those cancels the provider accepted.
func (k *Canceller) Asked() int    { return len(k.asked) }
func (k *Canceller) Accepted() int { return k.ok }

// CancelLive asks the provider to cancel every live batch of the job not
// asked yet.
func (k *Canceller) CancelLive(ctx context.Context) error {
	chunks, err := k.db.Chunks(ctx, k.job.ID)
	if err != nil {
		return err
	}
	return k.cancelLive(ctx, chunks)
}

func (k *Canceller) cancelLive(ctx context.Context, chunks []*sluice.Chunk) error {
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

// WaitOptions tune the wait for cancelled batches to end. Zero intervals
// take CancelPollDefaults.
type WaitOptions struct {
	PollInterval, MaxPollInterval time.Duration
	// OnTick is called with the chunks as they stand whenever a step's
	// outcome changed them (dispatcher.Options.OnTick).
	OnTick func(chunks []*sluice.Chunk)
	Log    zerolog.Logger
	// Files, if set, is the store of the job's files (RunOptions.Files).
	Files objstore.Store
}

// Wait drives the cancelled job until every batch has ended (unsubmitted
// chunks fail as cancelled; what completed is kept), cancelling any batch
// that a crashed run left mid-create and the dispatcher adopted, then moves
// the job to merging: Merge writes its output.
func (k *Canceller) Wait(ctx context.Context, o WaitOptions) error {
	poll, maxPoll := CancelPollDefaults(k.job.Provider)
	d := dispatcher.New(k.db, k.prov, k.job, dispatcher.Options{Log: o.Log, Files: filesOf(o.Files, k.job),
		PollInterval:    orDefault(o.PollInterval, poll),
		MaxPollInterval: orDefault(o.MaxPollInterval, maxPoll),
		OnTick: func(chunks []*sluice.Chunk) {
			// A batch that a crashed run left mid-create and that the
			// dispatcher just adopted is live too: cancel it as well.
			if err := k.cancelLive(ctx, chunks); err != nil {
				o.Log.Error().Err(err).Msg("record a cancel")
			}
			if o.OnTick != nil {
				o.OnTick(chunks)
			}
		}})
	if _, err := d.Run(ctx, nil); err != nil {
		return err
	}
	if err := k.db.SetJobState(ctx, k.job.ID, sluice.JobCancelled, sluice.JobMerging); err != nil {
		return err
	}
	k.job.State = sluice.JobMerging
	return nil
}
