package tracker

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-batch/sluice"
)

// ChunkRequests implements sluice.Store.
func (p *Postgres) ChunkRequests(ctx context.Context, job string, chunk int64, fn func(*sluice.Request) error) error {
	key, ok, err := pgJobKey(ctx, p.pool, job)
	if err != nil || !ok {
		return p.wrap(err)
	}
	rows, err := p.pool.Query(ctx, p.partQ("chunk_requests", key), chunk)
	if err != nil {
		return p.wrap(err)
	}
	defer rows.Close()
	var r sluice.Request
	for rows.Next() {
		if err := rows.Scan(&r.Ordinal, &r.Line, &r.CustomID, &r.Chunk, &r.Index, &r.Offset, &r.Length,
			&r.Tokens, &r.Attempt, &r.State); err != nil {
			return err
		}
		if err := fn(&r); err != nil {
			return err
		}
	}
	return p.wrap(rows.Err())
}

// FinishChunk implements sluice.Store. The outcomes, moves and ledger
// entries go as arrays, one statement each, rather than a statement per
// request: a round trip to the server costs more than SQLite's call. New
// chunks with an id of 0 or less get theirs here (sluice.Finish), in order
// after
// the job's highest, under a lock of the job's row (SELECT ... FOR UPDATE):
// PostgreSQL runs transactions side by side, and workers finishing chunks
// of one job at once must not hand out the same id. The ids are written
// back into f once committed.
func (p *Postgres) FinishChunk(ctx context.Context, f *sluice.Finish) error {
	var ids, moved []int64
	err := p.tx(ctx, func(tx pgx.Tx) error {
		ex := pgExec{tx, p.wrap}
		if err := p.updateChunk(ctx, ex, f.Chunk, f.From); err != nil {
			return err
		}
		job := f.Chunk.Job
		keyQ := "job_key"
		for _, c := range f.NewChunks {
			if c.ID <= 0 {
				keyQ = "job_key_locked" // newChunks gives ids: one finish of the job at a time
			}
		}
		var key int64
		if err := tx.QueryRow(ctx, p.stmts.q(keyQ), job).Scan(&key); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("job %s: %w", job, ErrNotFound)
			}
			return err
		}
		var err error
		if ids, moved, err = p.newChunks(ctx, ex, f); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, p.stmts.q("chunk_settled_on_rows"), job, f.Chunk.ID); err != nil {
			return err
		}
		if len(f.Outcomes) > 0 {
			ids := make([]int64, len(f.Outcomes))
			states := make([]string, len(f.Outcomes))
			for i, o := range f.Outcomes {
				ids[i], states[i] = requestID(key, o.Ordinal), string(o.State)
			}
			if err := p.guardedRequests(ctx, tx, "finish_outcomes", key, ids, f.Chunk.ID, states); err != nil {
				return err
			}
			if err := p.recordLedger(ctx, tx, key, f); err != nil {
				return err
			}
		}
		if err := p.moveRequests(ctx, tx, key, f, moved); err != nil {
			return err
		}
		for _, a := range f.Also {
			if err := p.updateChunk(ctx, ex, a.Chunk, a.From); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, p.stmts.q("chunk_settled_on_rows"), job, a.Chunk.ID); err != nil {
				return err
			}
			to, err := alsoTargets(a, ids)
			if err != nil {
				return err
			}
			if err := p.moveRequests(ctx, tx, key, a, to); err != nil {
				return err
			}
		}
		return nil
	})
	var rc *requestConflict
	if errors.As(err, &rc) {
		rc.name(ctx, p.pool)
	}
	if err != nil {
		return err
	}
	setNewIDs(f, ids, moved)
	return nil
}

// guardedRequests runs the named statement, an update of the rows of the
// job with key key whose ids are in $1, guarded on chunk $2 and state
// pending, that returns how many it updated (sql/postgres.sql), and fails
// with a *requestConflict (ErrConflict) unless every id was updated.
func (p *Postgres) guardedRequests(ctx context.Context, tx pgx.Tx, name string, key int64, ids []int64, chunk int64, more ...any) error {
	args := append([]any{ids, chunk}, more...)
	var updated int64
	if err := tx.QueryRow(ctx, p.partQ(name, key), args...).Scan(&updated); err != nil {
		return err
	}
	if updated != int64(len(ids)) {
		return &requestConflict{q: p.partQ("finish_conflict", key), ids: ids, chunk: chunk}
	}
	return nil
}

// requestConflict is a finish refused because some of its requests were
// no longer pending in the chunk. Which one is looked up only then, after
// the transaction rolled back (name), so that a finish that lands pays
// for no such check.
type requestConflict struct {
	q       string // the statement that names it
	ids     []int64
	chunk   int64
	ordinal int64 // -1 until named
}

func (e *requestConflict) Error() string {
	if e.ordinal < 0 {
		return fmt.Sprintf("a request of chunk %d is no longer pending there: %v", e.chunk, ErrConflict)
	}
	return fmt.Sprintf("request #%d of chunk %d is no longer pending there: %v", e.ordinal, e.chunk, ErrConflict)
}

func (e *requestConflict) Unwrap() error { return ErrConflict }

// name finds the first request of the refused finish that is not pending
// in its chunk.
func (e *requestConflict) name(ctx context.Context, q pgQuerier) {
	e.ordinal = -1
	var bad *int64
	if q.QueryRow(ctx, e.q, e.ids, e.chunk).Scan(&bad) == nil && bad != nil {
		e.ordinal = *bad & maxOrdinal
	}
}

// moveRequests moves f's requests of f.Chunk to the chunks moved names.
func (p *Postgres) moveRequests(ctx context.Context, tx pgx.Tx, key int64, f *sluice.Finish, moved []int64) error {
	n := len(f.Moved)
	if n == 0 {
		return nil
	}
	ids, offs := make([]int64, n), make([]int64, n)
	idxs, lens, atts := make([]int32, n), make([]int32, n), make([]int32, n)
	for i, r := range f.Moved {
		ids[i], offs[i] = requestID(key, r.Ordinal), r.Offset
		idxs[i], lens[i], atts[i] = int32(r.Index), int32(r.Length), int32(r.Attempt)
	}
	return p.guardedRequests(ctx, tx, "finish_moves", key, ids, f.Chunk.ID, moved, idxs, offs, lens, atts)
}

// recordLedger writes the ledger rows of a finish (SQLite instead folds
// them in at the next plan: foldLedger): the first success of a
// body key stays its answer (in outcome order within one finish).
func (p *Postgres) recordLedger(ctx context.Context, tx pgx.Tx, key int64, f *sluice.Finish) error {
	var ids, offs, lens []int64
	for _, o := range f.Outcomes {
		if o.State != sluice.RequestSucceeded || o.Length <= 0 {
			continue
		}
		ids = append(ids, requestID(key, o.Ordinal))
		offs = append(offs, o.Offset)
		lens = append(lens, o.Length)
	}
	if len(ids) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, p.partQ("ledger_record", key), ids, offs, lens); err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	return nil
}

// RequestStates implements sluice.Store.
func (p *Postgres) RequestStates(ctx context.Context, job string) (map[sluice.RequestState]int64, error) {
	var pending, succeeded, failed int64
	key, ok, err := pgJobKey(ctx, p.pool, job)
	if err != nil || !ok {
		return stateCounts(0, 0, 0), p.wrap(err)
	}
	err = p.pool.QueryRow(ctx, p.partQ("request_states", key)).Scan(&pending, &succeeded, &failed)
	if err != nil {
		return nil, p.wrap(err)
	}
	return stateCounts(pending, succeeded, failed), nil
}

// Expected implements sluice.Store.
func (p *Postgres) Expected(ctx context.Context, job string, fn func(int64, string) bool) error {
	// Stopping early cancels the query rather than reading the rest.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	key, ok, err := pgJobKey(ctx, p.pool, job)
	if err != nil || !ok {
		return p.wrap(err)
	}
	rows, err := p.pool.Query(ctx, p.partQ("requests_expected", key))
	if err != nil {
		return p.wrap(err)
	}
	defer rows.Close()
	var o int64
	var id string
	for rows.Next() {
		if err := rows.Scan(&o, &id); err != nil {
			return err
		}
		if !fn(o, id) {
			cancel()
			return nil
		}
	}
	return p.wrap(rows.Err())
}

// RetriedRequests implements Backend.
func (p *Postgres) RetriedRequests(ctx context.Context, job string) (int64, error) {
	var n int64
	key, ok, err := pgJobKey(ctx, p.pool, job)
	if err != nil || !ok {
		return 0, p.wrap(err)
	}
	// A split spends no attempt: its chunk's splits are not counted.
	err = p.pool.QueryRow(ctx, p.partQ("requests_retried", key), job).Scan(&n)
	return n, p.wrap(err)
}
