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
	rows, err := p.pool.Query(ctx, `SELECT id & 1099511627775, line, custom_id, chunk_id, idx, byte_offset, length,
		tokens, attempt, state FROM `+pgPartition(key)+` WHERE chunk_id = $1 ORDER BY idx`, chunk)
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
		lock := ""
		for _, c := range f.NewChunks {
			if c.ID <= 0 {
				lock = " FOR UPDATE" // newChunks gives ids: one finish of the job at a time
			}
		}
		var key int64
		if err := tx.QueryRow(ctx, `SELECT key FROM jobs WHERE id = $1`+lock, job).Scan(&key); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("job %s: %w", job, ErrNotFound)
			}
			return err
		}
		part := pgPartition(key)
		var err error
		if ids, moved, err = p.newChunks(ctx, ex, f); err != nil {
			return err
		}
		// Every outcome goes on its row here (requests_settled 1,
		// migrations/postgres/0003_settled_chunks.sql).
		if _, err := tx.Exec(ctx, `UPDATE chunks SET requests_settled = 1 WHERE job_id = $1 AND id = $2`, job, f.Chunk.ID); err != nil {
			return err
		}
		if len(f.Outcomes) > 0 {
			ids := make([]int64, len(f.Outcomes))
			states := make([]string, len(f.Outcomes))
			for i, o := range f.Outcomes {
				ids[i], states[i] = requestID(key, o.Ordinal), string(o.State)
			}
			if err := pgGuardedRequests(ctx, tx, part, `UPDATE `+part+` r SET state = u.state FROM u
				WHERE r.id = u.id AND r.chunk_id = $2 AND r.state = 'pending'`,
				`unnest($1::bigint[], $3::text[]) AS u(id, state)`, ids, f.Chunk.ID, states); err != nil {
				return err
			}
			if err := pgRecordLedger(ctx, tx, key, f); err != nil {
				return err
			}
		}
		if len(f.Moved) > 0 {
			n := len(f.Moved)
			ids, offs := make([]int64, n), make([]int64, n)
			idxs, lens, atts := make([]int32, n), make([]int32, n), make([]int32, n)
			for i, r := range f.Moved {
				ids[i], offs[i] = requestID(key, r.Ordinal), r.Offset
				idxs[i], lens[i], atts[i] = int32(r.Index), int32(r.Length), int32(r.Attempt)
			}
			if err := pgGuardedRequests(ctx, tx, part, `UPDATE `+part+` r SET chunk_id = u.chunk, idx = u.idx,
				byte_offset = u.off, length = u.len, attempt = u.att FROM u
				WHERE r.id = u.id AND r.chunk_id = $2 AND r.state = 'pending'`,
				`unnest($1::bigint[], $3::bigint[], $4::int[], $5::bigint[], $6::int[], $7::int[]) AS u(id, chunk, idx, off, len, att)`,
				ids, f.Chunk.ID, moved, idxs, offs, lens, atts); err != nil {
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

// pgGuardedRequests runs update, an UPDATE of the partition part FROM the
// rows u (from, over the ids in $1) guarded on chunk $2 and state
// pending, and fails with a *requestConflict (ErrConflict) unless every
// id was updated.
func pgGuardedRequests(ctx context.Context, tx pgx.Tx, part, update, from string, ids []int64, chunk int64, more ...any) error {
	args := append([]any{ids, chunk}, more...)
	var updated int64
	err := tx.QueryRow(ctx, `WITH u AS (SELECT * FROM `+from+`), upd AS (`+update+` RETURNING 1)
		SELECT count(*) FROM upd`, args...).Scan(&updated)
	if err != nil {
		return err
	}
	if updated != int64(len(ids)) {
		return &requestConflict{part: part, ids: ids, chunk: chunk}
	}
	return nil
}

// requestConflict is a finish refused because some of its requests were
// no longer pending in the chunk. Which one is looked up only then, after
// the transaction rolled back (name), so that a finish that lands pays
// for no such check.
type requestConflict struct {
	part    string
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
	if q.QueryRow(ctx, `SELECT min(u.id) FROM unnest($1::bigint[]) AS u(id) WHERE NOT EXISTS (SELECT 1 FROM `+e.part+` r
		WHERE r.id = u.id AND r.chunk_id = $2 AND r.state = 'pending')`, e.ids, e.chunk).Scan(&bad) == nil && bad != nil {
		e.ordinal = *bad & maxOrdinal
	}
}

// pgRecordLedger writes the ledger rows of a finish (SQLite instead folds
// them in at the next plan: foldLedger): the first success of a
// body key stays its answer (in outcome order within one finish).
func pgRecordLedger(ctx context.Context, tx pgx.Tx, key int64, f *sluice.Finish) error {
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
	if _, err := tx.Exec(ctx, `INSERT INTO ledger (key, request, byte_offset, length)
		SELECT r.body_key, r.id, u.off, u.len
		FROM unnest($1::bigint[], $2::bigint[], $3::bigint[]) WITH ORDINALITY AS u(id, off, len, n)
		JOIN `+pgPartition(key)+` r ON r.id = u.id WHERE r.body_key IS NOT NULL ORDER BY u.n
		ON CONFLICT (key) DO NOTHING`, ids, offs, lens); err != nil {
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
	err = p.pool.QueryRow(ctx, `SELECT COUNT(*) FILTER (WHERE state = 'pending'),
		COUNT(*) FILTER (WHERE state = 'succeeded'), COUNT(*) FILTER (WHERE state = 'failed')
		FROM `+pgPartition(key)).Scan(&pending, &succeeded, &failed)
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
	rows, err := p.pool.Query(ctx, `SELECT id & 1099511627775, custom_id FROM `+pgPartition(key)+` ORDER BY id`)
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
	err = p.pool.QueryRow(ctx, `SELECT COUNT(*) FROM `+pgPartition(key)+` r JOIN chunks c ON c.job_id = $1 AND c.id = r.chunk_id
		WHERE r.attempt - c.splits > 1`, job).Scan(&n)
	return n, p.wrap(err)
}
