package tracker

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-batch/sluice"
)

// scanJob reads a row of job_get's columns.
func scanJob(row scanner) (*sluice.Job, error) {
	var j sluice.Job
	var mtime, cancel, created, updated int64
	var limits string
	var modelMap *string
	var maxTokens *int64
	if err := row.Scan(&j.ID, &j.Provider, &j.Input, &j.Fingerprint.Size, &mtime, &j.Fingerprint.Hash,
		&j.Model, &limits, &j.Dir, &j.Output, &j.State, &j.Requests, &j.Rejected, &j.MaxAttempts,
		&cancel, &created, &updated, &j.Reused, &j.Endpoint, &j.ProviderFiles, &modelMap, &maxTokens, &j.StoreKey, &j.Bucket); err != nil {
		return nil, err
	}
	if modelMap != nil && maxTokens != nil {
		j.ModelMap, j.DefaultMaxTokens, j.PlanFlagsKnown = *modelMap, *maxTokens, true
	}
	j.CancelRequestedAt = fromNS(cancel)
	j.Fingerprint.ModTime = fromNS(mtime)
	j.CreatedAt, j.UpdatedAt = fromNS(created), fromNS(updated)
	if err := json.Unmarshal([]byte(limits), &j.Limits); err != nil {
		return nil, fmt.Errorf("job %s: limits: %w", j.ID, err)
	}
	return &j, nil
}

// Job returns one job.
func (c *core) Job(ctx context.Context, id string) (*sluice.Job, error) {
	j, err := scanJob(c.ex.queryRow(ctx, c.stmts.q("job_get"), id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("job %s: %w", id, ErrNotFound)
	}
	return j, err
}

// Jobs returns every job, newest first.
func (c *core) Jobs(ctx context.Context) ([]*sluice.Job, error) {
	return collect(ctx, c.ex, c.stmts.q("jobs_all"), scanJob)
}

// SetJobState moves a job from one state to another: refused with a
// *sluice.TransitionError when the table of job transitions
// (sluice.JobState.CanTransition) does not allow the move, and with
// ErrConflict when the job is no longer in state from (guarded update).
func (c *core) SetJobState(ctx context.Context, id string, from, to sluice.JobState) error {
	return c.setJobState(ctx, c.ex, id, from, to)
}

func (c *core) setJobState(ctx context.Context, ex executor, id string, from, to sluice.JobState) error {
	if err := sluice.CheckTransition(id, from, to); err != nil {
		return err
	}
	n, err := ex.exec(ctx, c.stmts.q("job_set_state"), to, c.now().UnixNano(), id, from)
	if err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("job %s: %s -> %s: %w", id, from, to, ErrConflict)
	}
	return nil
}

// CancelJob moves a job from state from to cancelled (guarded) and records
// when the cancel was asked for; that time stays as the job goes on to
// merging and done. It returns the time recorded.
func (c *core) CancelJob(ctx context.Context, id string, from sluice.JobState) (time.Time, error) {
	if err := sluice.CheckTransition(id, from, sluice.JobCancelled); err != nil {
		return time.Time{}, err
	}
	now := c.now()
	n, err := c.ex.exec(ctx, c.stmts.q("job_cancel"), sluice.JobCancelled, now.UnixNano(), now.UnixNano(), id, from)
	if err != nil {
		return time.Time{}, err
	}
	if n != 1 {
		return time.Time{}, fmt.Errorf("job %s: %s -> %s: %w", id, from, sluice.JobCancelled, ErrConflict)
	}
	return now, nil
}

// SetJobOutput records where the job's output goes.
func (c *core) SetJobOutput(ctx context.Context, id, output string) error {
	_, err := c.ex.exec(ctx, c.stmts.q("job_set_output"), output, c.now().UnixNano(), id)
	return err
}

// UpdateFingerprint records a new modification time for an input whose
// content hash was found unchanged.
func (c *core) UpdateFingerprint(ctx context.Context, id string, fp sluice.Fingerprint) error {
	_, err := c.ex.exec(ctx, c.stmts.q("job_set_fingerprint"), fp.Size, ns(fp.ModTime), fp.Hash, id)
	return err
}

// SetJobSettings records the settings of a job that may change while it
// runs: the live-batch and enqueued-token limits and the attempts per
// request (the limits that shaped its plan never change).
func (c *core) SetJobSettings(ctx context.Context, id string, limits sluice.Limits, maxAttempts int) error {
	b, err := json.Marshal(limits)
	if err != nil {
		return err
	}
	_, err = c.ex.exec(ctx, c.stmts.q("job_set_settings"), string(b), maxAttempts, c.now().UnixNano(), id)
	return err
}

// SetJobBucket records the bucket a job's batches live in (sluice.Job.Bucket),
// for a job planned before sluice recorded it.
func (c *core) SetJobBucket(ctx context.Context, id, bucket string) error {
	_, err := c.ex.exec(ctx, c.stmts.q("job_set_bucket"), bucket, c.now().UnixNano(), id)
	return err
}

// SetProviderFiles records where the job's files at the provider stand:
// sluice.ProviderFilesLive, ProviderFilesDeleted or ProviderFilesKept.
func (c *core) SetProviderFiles(ctx context.Context, id, state string) error {
	_, err := c.ex.exec(ctx, c.stmts.q("job_set_provider_files"), state, c.now().UnixNano(), id)
	return err
}

// DeleteJob removes a job and all its rows: its answers leave the ledger
// with it (sql/sqlite.sql).
func (d *DB) DeleteJob(ctx context.Context, id string) error {
	return d.inTx(ctx, func(ex executor) error {
		for _, name := range []string{"job_delete_ledger", "job_delete_requests", "job_delete_request_pages"} {
			if _, err := ex.exec(ctx, d.stmts.q(name), id, id); err != nil {
				return err
			}
		}
		for _, name := range []string{"job_delete_attempt_errors", "job_delete_summary", "job_delete_chunks",
			"job_drop_leases", "job_delete_realtime_calls", "job_delete"} {
			if _, err := ex.exec(ctx, d.stmts.q(name), id); err != nil {
				return err
			}
		}
		return nil
	})
}
