package tracker

import (
	"context"
	"fmt"

	"github.com/sluice-batch/sluice"
)

// The realtime fallback's log of synchronous calls
// (migrations/0016_realtime_calls.sql; docs/crash-safety.md, "The realtime
// fallback"), the same rules on either database (driver.go).

var (
	_ sluice.RealtimeStore = (*DB)(nil)
	_ sluice.RealtimeStore = (*Postgres)(nil)
)

// RealtimeChunks implements sluice.RealtimeStore.
func (c *core) RealtimeChunks(ctx context.Context, job string) ([]int64, error) {
	var out []int64
	err := c.ex.query(ctx, c.stmts.q("realtime_chunks"), func(row scanner) error {
		var id int64
		if err := row.Scan(&id); err != nil {
			return err
		}
		out = append(out, id)
		return nil
	}, job)
	return out, err
}

// RealtimeCalls implements sluice.RealtimeStore.
func (c *core) RealtimeCalls(ctx context.Context, job string, chunk int64) ([]sluice.RealtimeCall, error) {
	var out []sluice.RealtimeCall
	err := c.ex.query(ctx, c.stmts.q("realtime_calls"), func(row scanner) error {
		rc := sluice.RealtimeCall{Chunk: chunk}
		var kind int
		if err := row.Scan(&rc.Index, &rc.State, &kind, &rc.Line, &rc.Usage.InputTokens, &rc.Usage.OutputTokens); err != nil {
			return err
		}
		rc.Kind = sluice.ResultKind(kind)
		out = append(out, rc)
		return nil
	}, job, chunk)
	return out, err
}

// RealtimeIntent implements sluice.RealtimeStore.
func (c *core) RealtimeIntent(ctx context.Context, job string, chunk int64, index int) (bool, error) {
	k, err := c.ex.exec(ctx, c.stmts.q("realtime_intent"), job, chunk, index, ns(c.now()))
	if err != nil {
		return false, fmt.Errorf("record realtime call %d/%d: %w", chunk, index, err)
	}
	return k == 1, nil
}

// RealtimeAnswer implements sluice.RealtimeStore.
func (c *core) RealtimeAnswer(ctx context.Context, job string, rc sluice.RealtimeCall) error {
	k, err := c.ex.exec(ctx, c.stmts.q("realtime_answer"),
		int(rc.Kind), rc.Line, rc.Usage.InputTokens, rc.Usage.OutputTokens, ns(c.now()), job, rc.Chunk, rc.Index)
	if err != nil {
		return fmt.Errorf("record realtime answer %d/%d: %w", rc.Chunk, rc.Index, err)
	}
	if k != 1 {
		return fmt.Errorf("record realtime answer %d/%d: %w (no call in flight)", rc.Chunk, rc.Index, ErrConflict)
	}
	return nil
}
