package tracker

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-batch/sluice"
)

// SetSummary implements Backend.
func (p *Postgres) SetSummary(ctx context.Context, job string, s *sluice.JobSummary) error {
	return p.wrap(pgSetSummary(ctx, p.pool, job, s))
}

func pgSetSummary(ctx context.Context, q pgExecer, job string, s *sluice.JobSummary) error {
	_, err := q.Exec(ctx, `INSERT INTO job_summaries (job_id, output, errors, merge_order,
		output_bytes, output_mtime, errors_bytes, lines, succeeded, failed, retried, batches, retry_batches,
		input_tokens, output_tokens, cancelled, started_at, finished_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)
		ON CONFLICT (job_id) DO UPDATE SET output = EXCLUDED.output, errors = EXCLUDED.errors,
			merge_order = EXCLUDED.merge_order, output_bytes = EXCLUDED.output_bytes,
			output_mtime = EXCLUDED.output_mtime, errors_bytes = EXCLUDED.errors_bytes, lines = EXCLUDED.lines,
			succeeded = EXCLUDED.succeeded, failed = EXCLUDED.failed, retried = EXCLUDED.retried,
			batches = EXCLUDED.batches, retry_batches = EXCLUDED.retry_batches,
			input_tokens = EXCLUDED.input_tokens, output_tokens = EXCLUDED.output_tokens,
			cancelled = EXCLUDED.cancelled, started_at = EXCLUDED.started_at, finished_at = EXCLUDED.finished_at`,
		job, s.Output, s.Errors, s.Order, s.OutputBytes, ns(s.OutputMTime), s.ErrorsBytes, s.Lines, s.Succeeded,
		s.Failed, s.Retried, s.Batches, s.RetryBatches, s.InputTokens, s.OutputTokens, s.Cancelled,
		ns(s.StartedAt), ns(s.FinishedAt))
	if err != nil {
		return fmt.Errorf("job %s: record summary: %w", job, err)
	}
	return nil
}

// FinishJob implements Backend.
func (p *Postgres) FinishJob(ctx context.Context, job string, s *sluice.JobSummary) error {
	return p.tx(ctx, func(tx pgx.Tx) error {
		if err := pgSetJobState(ctx, tx, job, sluice.JobMerging, sluice.JobDone, p.now().UnixNano()); err != nil {
			return err
		}
		return pgSetSummary(ctx, tx, job, s)
	})
}

// Summary implements Backend.
func (p *Postgres) Summary(ctx context.Context, job string) (*sluice.JobSummary, error) {
	var s sluice.JobSummary
	var mtime, started, finished int64
	err := p.pool.QueryRow(ctx, `SELECT output, errors, merge_order, output_bytes, output_mtime, errors_bytes,
		lines, succeeded, failed, retried, batches, retry_batches, input_tokens, output_tokens, cancelled,
		started_at, finished_at FROM job_summaries WHERE job_id = $1`, job).Scan(&s.Output, &s.Errors, &s.Order,
		&s.OutputBytes, &mtime, &s.ErrorsBytes, &s.Lines, &s.Succeeded, &s.Failed, &s.Retried, &s.Batches,
		&s.RetryBatches, &s.InputTokens, &s.OutputTokens, &s.Cancelled, &started, &finished)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, p.wrap(err)
	}
	s.OutputMTime, s.StartedAt, s.FinishedAt = fromNS(mtime), fromNS(started), fromNS(finished)
	return &s, nil
}

// ReuseSources implements Backend.
func (p *Postgres) ReuseSources(ctx context.Context, job string) (map[string]int64, error) {
	rows, err := p.pool.Query(ctx, `SELECT source_job, requests FROM reuse_sources WHERE job_id = $1 ORDER BY source_job`, job)
	if err != nil {
		return nil, p.wrap(err)
	}
	defer rows.Close()
	m, err := scanSources(rows)
	if err != nil {
		return nil, err
	}
	return m, p.wrap(rows.Err())
}

// Learned implements Backend.
func (p *Postgres) Learned(ctx context.Context) (map[string]sluice.Learned, error) {
	rows, err := p.pool.Query(ctx, `SELECT model, SUM(usage_est_tokens)::bigint, SUM(input_tokens)::bigint,
		SUM(output_tokens)::bigint FROM chunks WHERE usage_est_tokens > 0 GROUP BY model`)
	if err != nil {
		return nil, p.wrap(err)
	}
	defer rows.Close()
	m := map[string]sluice.Learned{}
	for rows.Next() {
		var model string
		var l sluice.Learned
		if err := rows.Scan(&model, &l.EstTokens, &l.InputTokens, &l.OutputTokens); err != nil {
			return nil, err
		}
		m[model] = l
	}
	return m, p.wrap(rows.Err())
}

// SetMaxCost implements Backend.
func (p *Postgres) SetMaxCost(ctx context.Context, job string, usd *float64) error {
	_, err := p.pool.Exec(ctx, `UPDATE jobs SET max_cost = $1 WHERE id = $2`, usd, job)
	return p.wrap(err)
}

// MaxCost implements Backend.
func (p *Postgres) MaxCost(ctx context.Context, job string) (*float64, error) {
	var v *float64
	if err := p.pool.QueryRow(ctx, `SELECT max_cost FROM jobs WHERE id = $1`, job).Scan(&v); err != nil {
		return nil, p.wrap(err)
	}
	return v, nil
}
