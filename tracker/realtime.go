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
	return collect(ctx, c.ex, c.stmts.q("realtime_chunks"), func(row scanner) (id int64, err error) {
		return id, row.Scan(&id)
	}, job)
}

// RealtimeCalls implements sluice.RealtimeStore.
func (c *core) RealtimeCalls(ctx context.Context, job string, chunk int64) ([]sluice.RealtimeCall, error) {
	return collect(ctx, c.ex, c.stmts.q("realtime_calls"), func(row scanner) (sluice.RealtimeCall, error) {
		rc := sluice.RealtimeCall{Chunk: chunk}
		var kind int
		err := row.Scan(&rc.Index, &rc.State, &kind, &rc.Line, &rc.Usage.InputTokens, &rc.Usage.OutputTokens)
		rc.Kind = sluice.ResultKind(kind)
		return rc, err
	}, job, chunk)
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
