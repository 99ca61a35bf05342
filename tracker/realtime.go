package tracker

import (
	"context"
	"fmt"

	"github.com/sluice-batch/sluice"
)

// The realtime fallback's log of synchronous calls
// (migrations/0016_realtime_calls.sql; docs/crash-safety.md, "The realtime
// fallback"), on either dialect through the outbox's statement runner.

var (
	_ sluice.RealtimeStore = (*DB)(nil)
	_ sluice.RealtimeStore = (*Postgres)(nil)
)

func (r sqlRunner) realtimeChunks(ctx context.Context, job string) ([]int64, error) {
	var out []int64
	err := r.query(ctx, r.q(`SELECT DISTINCT chunk_id FROM realtime_calls WHERE job_id = ? ORDER BY chunk_id`),
		func(scan func(...any) error) error {
			var id int64
			if err := scan(&id); err != nil {
				return err
			}
			out = append(out, id)
			return nil
		}, job)
	return out, err
}

func (r sqlRunner) realtimeCalls(ctx context.Context, job string, chunk int64) ([]sluice.RealtimeCall, error) {
	var out []sluice.RealtimeCall
	err := r.query(ctx, r.q(`SELECT idx, state, kind, line, input_tokens, output_tokens FROM realtime_calls
		WHERE job_id = ? AND chunk_id = ? ORDER BY idx`),
		func(scan func(...any) error) error {
			c := sluice.RealtimeCall{Chunk: chunk}
			var kind int
			if err := scan(&c.Index, &c.State, &kind, &c.Line, &c.Usage.InputTokens, &c.Usage.OutputTokens); err != nil {
				return err
			}
			c.Kind = sluice.ResultKind(kind)
			out = append(out, c)
			return nil
		}, job, chunk)
	return out, err
}

func (r sqlRunner) realtimeIntent(ctx context.Context, job string, chunk int64, index int, now int64) (bool, error) {
	k, err := r.exec(ctx, r.q(`INSERT INTO realtime_calls (job_id, chunk_id, idx, state, sent_at)
		VALUES (?, ?, ?, 'realtime_sending', ?) ON CONFLICT (job_id, chunk_id, idx) DO NOTHING`), job, chunk, index, now)
	if err != nil {
		return false, fmt.Errorf("record realtime call %d/%d: %w", chunk, index, err)
	}
	return k == 1, nil
}

func (r sqlRunner) realtimeAnswer(ctx context.Context, job string, c sluice.RealtimeCall, now int64) error {
	k, err := r.exec(ctx, r.q(`UPDATE realtime_calls SET state = 'answered', kind = ?, line = ?, input_tokens = ?,
		output_tokens = ?, answered_at = ? WHERE job_id = ? AND chunk_id = ? AND idx = ? AND state = 'realtime_sending'`),
		int(c.Kind), c.Line, c.Usage.InputTokens, c.Usage.OutputTokens, now, job, c.Chunk, c.Index)
	if err != nil {
		return fmt.Errorf("record realtime answer %d/%d: %w", c.Chunk, c.Index, err)
	}
	if k != 1 {
		return fmt.Errorf("record realtime answer %d/%d: %w (no call in flight)", c.Chunk, c.Index, ErrConflict)
	}
	return nil
}

// RealtimeChunks implements sluice.RealtimeStore.
func (d *DB) RealtimeChunks(ctx context.Context, job string) ([]int64, error) {
	return d.outbox().realtimeChunks(ctx, job)
}

// RealtimeCalls implements sluice.RealtimeStore.
func (d *DB) RealtimeCalls(ctx context.Context, job string, chunk int64) ([]sluice.RealtimeCall, error) {
	return d.outbox().realtimeCalls(ctx, job, chunk)
}

// RealtimeIntent implements sluice.RealtimeStore.
func (d *DB) RealtimeIntent(ctx context.Context, job string, chunk int64, index int) (bool, error) {
	return d.outbox().realtimeIntent(ctx, job, chunk, index, ns(d.now()))
}

// RealtimeAnswer implements sluice.RealtimeStore.
func (d *DB) RealtimeAnswer(ctx context.Context, job string, c sluice.RealtimeCall) error {
	return d.outbox().realtimeAnswer(ctx, job, c, ns(d.now()))
}

// RealtimeChunks implements sluice.RealtimeStore on PostgreSQL.
func (p *Postgres) RealtimeChunks(ctx context.Context, job string) ([]int64, error) {
	return p.outbox().realtimeChunks(ctx, job)
}

// RealtimeCalls implements sluice.RealtimeStore on PostgreSQL.
func (p *Postgres) RealtimeCalls(ctx context.Context, job string, chunk int64) ([]sluice.RealtimeCall, error) {
	return p.outbox().realtimeCalls(ctx, job, chunk)
}

// RealtimeIntent implements sluice.RealtimeStore on PostgreSQL.
func (p *Postgres) RealtimeIntent(ctx context.Context, job string, chunk int64, index int) (bool, error) {
	return p.outbox().realtimeIntent(ctx, job, chunk, index, ns(p.now()))
}

// RealtimeAnswer implements sluice.RealtimeStore on PostgreSQL.
func (p *Postgres) RealtimeAnswer(ctx context.Context, job string, c sluice.RealtimeCall) error {
	return p.outbox().realtimeAnswer(ctx, job, c, ns(p.now()))
}
