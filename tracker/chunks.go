package tracker

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unsafe"

	"github.com/sluice-batch/sluice"
)

var _ sluice.Store = (*DB)(nil)

// scanChunk reads a row of chunk_get's columns.
func scanChunk(row scanner) (*sluice.Chunk, error) {
	var c sluice.Chunk
	var intent, next, sub, ended, expire int64
	if err := row.Scan(&c.Job, &c.ID, &c.Attempt, &c.URL, &c.Model, &c.Path, &c.Requests, &c.Bytes,
		&c.EstTokens, &c.Bound, &c.State, &c.FileID, &c.BatchID, &c.BatchStatus, &intent, &next, &c.Polls,
		&sub, &ended, &c.LastError, &c.InputTokens, &c.OutputTokens, &c.ResultsPath, &c.FetchFailures,
		&c.ErrorCode, &c.Stuck, &c.MaxOutputTokens, &c.NoMaxRequests, &c.UsageEstTokens, &c.QueueRefusals, &c.Digest, &c.Splits, &expire, &c.FileDigest); err != nil {
		return nil, err
	}
	c.IntentAt, c.NextPollAt, c.SubmittedAt, c.EndedAt = fromNS(intent), fromNS(next), fromNS(sub), fromNS(ended)
	c.ResultsExpireAt = fromNS(expire)
	return &c, nil
}

// Chunks implements sluice.Store.
func (c *core) Chunks(ctx context.Context, job string) ([]*sluice.Chunk, error) {
	return collect(ctx, c.ex, c.stmts.q("chunks_of_job"), scanChunk, job)
}

// Chunk reads one chunk of a job: the dispatcher re-reads a chunk it holds
// a lease on before acting, since another worker may have moved it.
func (c *core) Chunk(ctx context.Context, job string, id int64) (*sluice.Chunk, error) {
	ch, err := scanChunk(c.ex.queryRow(ctx, c.stmts.q("chunk_get"), job, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("chunk %d of job %s: %w", id, job, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("chunk %d of job %s: %w", id, job, err)
	}
	return ch, nil
}

// UpdateChunk implements sluice.Store.
func (c *core) UpdateChunk(ctx context.Context, ch *sluice.Chunk, from sluice.ChunkState) error {
	return c.drv.inTx(ctx, func(ex executor) error { return c.updateChunk(ctx, ex, ch, from) })
}

// updateChunk writes ch if the move from state from is in the table of
// chunk transitions (sluice.ChunkState.CanTransition) and the chunk is
// still in state from. A last error that is not the one the row holds
// (another code or message) is also kept as an attempt_errors row: every
// error the dispatcher records is kept, and a poll failing the same way
// for hours is one row, not one per poll. The driver's chunkWritten runs
// last, in the same transaction.
func (c *core) updateChunk(ctx context.Context, ex executor, ch *sluice.Chunk, from sluice.ChunkState) error {
	if err := sluice.CheckChunkTransition(ch, from); err != nil {
		return err
	}
	if ch.ErrorCode != "" || ch.LastError != "" {
		if _, err := ex.exec(ctx, c.stmts.q("chunk_record_error"), ch.Attempt, ch.ErrorCode, ch.LastError, c.now().UnixNano(),
			ch.Job, ch.ID, from, ch.ErrorCode, ch.LastError); err != nil {
			return fmt.Errorf("chunk %d: record error: %w", ch.ID, err)
		}
	}
	n, err := ex.exec(ctx, c.stmts.q("chunk_update"),
		ch.State, ch.FileID, ch.BatchID, ch.BatchStatus, ns(ch.IntentAt), ns(ch.NextPollAt), ch.Polls,
		ns(ch.SubmittedAt), ns(ch.EndedAt), ch.LastError, ch.InputTokens, ch.OutputTokens, ch.ResultsPath,
		ch.FetchFailures, ch.ErrorCode, ch.Stuck, ch.UsageEstTokens, ch.QueueRefusals, ch.Digest, ns(ch.ResultsExpireAt),
		ch.Job, ch.ID, from)
	if err != nil {
		return fmt.Errorf("chunk %d: %w", ch.ID, err)
	}
	if n != 1 {
		return fmt.Errorf("chunk %d: %s -> %s: %w", ch.ID, from, ch.State, ErrConflict)
	}
	return c.drv.chunkWritten(ctx, ex, ch.Job)
}

// chunkRequestsSQL reads a chunk's requests in order, through the
// requests_chunk index (TestChunkRequestsUsesTheIndex).
var chunkRequestsSQL = sqliteStmts.q("chunk_requests")

// ChunkRequests implements sluice.Store. The chunk's facts and its
// requests are read in one snapshot.
func (d *DB) ChunkRequests(ctx context.Context, job string, chunk int64, fn func(*sluice.Request) error) error {
	return d.snapshot(ctx, func(q querier) error {
		pc, paged, err := readPagedChunk(ctx, q, job, chunk)
		switch {
		case errors.Is(err, ErrNotFound):
			// No chunk row: the job's rows with that chunk id, if any.
			key, _, found, err := jobLayout(ctx, q, job)
			if err != nil || !found {
				return err // no such job: no rows
			}
			pc.key, pc.settled = key, settledNot
		case err != nil:
			return err
		case paged:
			return pc.requests(ctx, q, func(r *sluice.Request, _ bool) error { return fn(r) })
		}
		return rowRequests(ctx, q, pc.key, chunk, pc.settled, fn)
	})
}

// rowRequests is ChunkRequests for a chunk whose requests have rows (a
// retry chunk, a job planned with a row per request), of the job with key
// key, the chunk's settledness settled.
func rowRequests(ctx context.Context, q querier, key, chunk int64, settled int, fn func(*sluice.Request) error) error {
	// The job's key is bound: compared with a subquery, id >> 40 does not
	// use the requests_chunk index, and every call scanned all of the index
	// and sorted the chunk's rows (BENCHMARKS.md). A request still pending
	// in a chunk settled on the chunk is succeeded (finishOutcomes).
	rows, err := q.QueryContext(ctx, chunkRequestsSQL, maxOrdinal, key, chunk)
	if err != nil {
		return err
	}
	defer rows.Close()
	// The integers are scanned into interface values and asserted:
	// database/sql converts an int64 into an *int64 (or *int) by reflection,
	// a cost per column of each of a chunk's 50,000 rows
	// (BenchmarkChunkRequests); into an *any it only copies.
	var r sluice.Request
	var state string
	var ints [8]any
	for rows.Next() {
		if err := rows.Scan(&ints[0], &ints[1], &r.CustomID, &ints[2], &ints[3], &ints[4], &ints[5],
			&ints[6], &ints[7], &state); err != nil {
			return err
		}
		var v [8]int64
		for i, x := range ints {
			n, ok := x.(int64)
			if !ok {
				return fmt.Errorf("chunk %d: request column %d is %T, not an integer", chunk, i, x)
			}
			v[i] = n
		}
		r.Ordinal, r.Line, r.Chunk, r.Index, r.Offset, r.Length, r.Tokens, r.Attempt =
			v[0], v[1], v[2], int(v[3]), v[4], int(v[5]), v[6], int(v[7])
		r.State = sluice.RequestState(state)
		if settled == settledOnChunk && r.State == sluice.RequestPending {
			r.State = sluice.RequestSucceeded
		}
		if err := fn(&r); err != nil {
			return err
		}
	}
	return rows.Err()
}

// FinishChunk implements sluice.Store.
func (d *DB) FinishChunk(ctx context.Context, f *sluice.Finish) error {
	done := func() {}
	err := d.tx(ctx, func(tx *sql.Tx) error {
		if err := d.updateChunk(ctx, sqliteExec{tx}, f.Chunk, f.From); err != nil {
			return err
		}
		job := f.Chunk.Job
		pc, paged, err := readPagedChunk(ctx, tx, job, f.Chunk.ID)
		if err != nil {
			return err
		}
		key, settled := pc.key, pc.settled
		// A chunk's requests are settled once: a chunk put back in an
		// earlier state by hand finishes none of them again.
		if settled != settledNot {
			first := int64(-1)
			if len(f.Outcomes) > 0 {
				first = f.Outcomes[0].Ordinal
			} else if len(f.Moved) > 0 {
				first = f.Moved[0].Ordinal
			}
			if first >= 0 {
				return fmt.Errorf("request #%d of chunk %d is no longer pending there: %w", first, f.Chunk.ID, ErrConflict)
			}
		}
		ids, moved, err := d.newChunks(ctx, sqliteExec{tx}, f)
		if err != nil {
			return err
		}
		done = func() { setNewIDs(f, ids, moved) }
		if paged {
			if len(f.Also) > 0 {
				return fmt.Errorf("chunk %d is of the plan's pages: no chunk joins its finish", f.Chunk.ID)
			}
			return finishPaged(ctx, tx, pc, f, moved)
		}
		if err := d.finishRows(ctx, tx, key, f, moved, settled); err != nil {
			return err
		}
		for _, a := range f.Also {
			if err := d.finishAlso(ctx, tx, a, ids); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		done()
	}
	return err
}

// finishRows moves f's requests and records its outcomes, for a chunk
// whose requests are on their rows (not the plan's pages).
func (d *DB) finishRows(ctx context.Context, tx *sql.Tx, key int64, f *sluice.Finish, moved []int64, settled int) error {
	// Moves first: what is left in the chunk is then exactly the
	// requests the outcomes name, or the successes cannot be settled
	// on the chunk (finishOutcomes).
	mv, err := tx.PrepareContext(ctx, d.stmts.q("request_move"))
	if err != nil {
		return err
	}
	defer mv.Close()
	for i, r := range f.Moved {
		res, err := mv.Exec(moved[i], r.Index, r.Offset, r.Length, r.Attempt, requestID(key, r.Ordinal), f.Chunk.ID)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return fmt.Errorf("request #%d of chunk %d is no longer pending there: %w", r.Ordinal, f.Chunk.ID, ErrConflict)
		}
	}
	if settled != settledNot {
		return nil // nothing of the requests' (none named): their record stays
	}
	return finishOutcomes(ctx, tx, key, f)
}

// finishAlso ends a, one of a finish's Also, in its transaction: its
// requests move to the finish's new chunks (ids, by NewChunkRef).
func (d *DB) finishAlso(ctx context.Context, tx *sql.Tx, a *sluice.Finish, ids []int64) error {
	if err := d.updateChunk(ctx, sqliteExec{tx}, a.Chunk, a.From); err != nil {
		return err
	}
	pc, paged, err := readPagedChunk(ctx, tx, a.Chunk.Job, a.Chunk.ID)
	if err != nil {
		return err
	}
	if paged || pc.settled != settledNot {
		return fmt.Errorf("chunk %d cannot join another's finish: %w", a.Chunk.ID, ErrConflict)
	}
	moved, err := alsoTargets(a, ids)
	if err != nil {
		return err
	}
	return d.finishRows(ctx, tx, pc.key, a, moved, settledNot)
}

// alsoTargets is the id of the chunk each of a's moved requests goes to:
// one of ids, named by NewChunkRef.
func alsoTargets(a *sluice.Finish, ids []int64) ([]int64, error) {
	moved := make([]int64, len(a.Moved))
	for i, r := range a.Moved {
		k, ok := sluice.NewChunkIndex(r.Chunk)
		if !ok || k >= len(ids) {
			return nil, fmt.Errorf("request #%d of chunk %d moved to chunk %d, which is not among the %d new chunks", r.Ordinal, a.Chunk.ID, r.Chunk, len(ids))
		}
		moved[i] = ids[k]
	}
	return moved, nil
}

// newChunks records f's new chunks in the transaction of its finish. A
// new chunk with an id of 0 or less gets its id here, in order after the
// job's highest: several workers may end chunks of one job at once, and
// the transaction holds SQLite's write lock, or the job row's lock that
// PostgreSQL's FinishChunk took first. Distinct negative ids are
// placeholders a moved request may name; a moved request names its new
// chunk by that, or by sluice.NewChunkRef of its place in f.NewChunks.
// It returns the new chunks' ids and, for each of f.Moved, the id of the
// chunk it goes to; setNewIDs writes them into f once the finish
// committed.
func (c *core) newChunks(ctx context.Context, ex executor, f *sluice.Finish) (ids, moved []int64, err error) {
	job := f.Chunk.Job
	ids = make([]int64, len(f.NewChunks))
	assigned := map[int64]int64{} // negative placeholder -> id
	var next int64
	for i, ch := range f.NewChunks {
		id := ch.ID
		if id <= 0 {
			if _, dup := assigned[id]; dup && id < 0 {
				return nil, nil, fmt.Errorf("new chunks of chunk %d share the placeholder id %d", f.Chunk.ID, id)
			}
			if next == 0 {
				if err := ex.queryRow(ctx, c.stmts.q("chunk_next_id"), job).Scan(&next); err != nil {
					return nil, nil, fmt.Errorf("allocate chunk ids: %w", err)
				}
			}
			id, assigned[ch.ID] = next, next
			next++
		}
		ids[i] = id
		if _, err := ex.exec(ctx, c.stmts.q("chunk_insert"), job, id, ch.Attempt, ch.URL, ch.Model, ch.Path, ch.Requests,
			ch.Bytes, ch.EstTokens, ch.Bound, ch.State, ch.MaxOutputTokens, ch.NoMaxRequests, ch.Splits, ch.FileDigest); err != nil {
			return nil, nil, fmt.Errorf("record chunk %d: %w", id, err)
		}
	}
	moved = make([]int64, len(f.Moved))
	for i, r := range f.Moved {
		moved[i] = r.Chunk
		if r.Chunk > 0 {
			continue
		}
		if id, ok := assigned[r.Chunk]; ok && r.Chunk < 0 {
			moved[i] = id
		} else if k, ok := sluice.NewChunkIndex(r.Chunk); ok && k < len(ids) {
			moved[i] = ids[k]
		} else {
			return nil, nil, fmt.Errorf("request #%d moved to chunk %d, which is not among the %d new chunks", r.Ordinal, r.Chunk, len(ids))
		}
	}
	return ids, moved, nil
}

// setNewIDs writes the ids newChunks gave into f: its new chunks', and the
// chunk each moved request went to.
func setNewIDs(f *sluice.Finish, ids, moved []int64) {
	for i, ch := range f.NewChunks {
		ch.ID = ids[i]
	}
	for i := range f.Moved {
		f.Moved[i].Chunk = moved[i]
	}
}

// The values of chunks.requests_settled (migrations/0008_settled_chunks.sql).
const (
	settledNot     = 0 // the chunk has not finished its requests
	settledOnRows  = 1 // finished: each request's state is on its row
	settledOnChunk = 2 // finished: its rows still pending are succeeded
)

// finishOutcomes records the outcome of every request in f.Outcomes, each
// of which must be pending in f's chunk, and the successes' places in the
// chunk's results file (chunks.answers, for the ledger: foldLedger).
//
// Failures are set on their rows, as one statement over a JSON array of
// ids. Successes, nearly always every request of the chunk, are not: when
// the requests left in the chunk are exactly the ones the outcomes name
// (checked over the requests_chunk index alone, without reading a row),
// the chunk is marked settledOnChunk, and a request still pending in such a
// chunk is succeeded wherever states are read (RequestStates,
// ChunkRequests, the ledger lookups). Rewriting a million rows' state cost
// 3 to 7 CPU seconds of a 1,000,000-request run (BENCHMARKS.md); one
// chunk row costs nothing. Otherwise the successes are set on their rows
// too. Should fewer rows change than were named, the statements are undone
// and the rows are set one by one, which names the first request at fault.
func finishOutcomes(ctx context.Context, tx *sql.Tx, key int64, f *sluice.Finish) error {
	answers := appendAnswers(nil, key, f.Outcomes, nil)
	mark := settledOnRows
	if len(f.Outcomes) > 0 {
		if _, err := tx.ExecContext(ctx, `SAVEPOINT outcomes`); err != nil {
			return err
		}
		var err error
		mark, err = bulkOutcomes(ctx, tx, key, f)
		if err != nil {
			return err
		}
		if mark == settledNot { // refused: undo, and name the request at fault
			if _, err := tx.ExecContext(ctx, `ROLLBACK TO outcomes`); err != nil {
				return err
			}
			if err := eachOutcome(ctx, tx, key, f); err != nil {
				return err
			}
			mark = settledOnRows
		} else if _, err := tx.ExecContext(ctx, `RELEASE outcomes`); err != nil {
			return err
		}
	}
	_, err := tx.ExecContext(ctx, sqliteStmts.q("chunk_settle"),
		mark, answersArg(answers), f.Chunk.Job, f.Chunk.ID)
	return err
}

// bulkOutcomes records f's outcomes in a few statements and returns how
// the chunk is settled, or settledNot when a request named is not pending
// in the chunk or a state is not final (the caller undoes and goes row by
// row).
func bulkOutcomes(ctx context.Context, tx *sql.Tx, key int64, f *sluice.Finish) (int, error) {
	var nS, nF int
	for _, o := range f.Outcomes {
		switch o.State {
		case sluice.RequestSucceeded:
			nS++
		case sluice.RequestFailed:
			nF++
		default:
			return settledNot, nil // not a final state: the row by row path refuses it
		}
	}
	update := func(st sluice.RequestState, n int) (bool, error) {
		if n == 0 {
			return true, nil
		}
		ids := appendIDs(nil, key, f.Outcomes, st)
		res, err := tx.ExecContext(ctx, sqliteStmts.q("requests_set_state"), st, string(ids), f.Chunk.ID)
		if err != nil {
			return false, err
		}
		got, _ := res.RowsAffected()
		return got == int64(n), nil
	}
	if ok, err := update(sluice.RequestFailed, nF); !ok || err != nil {
		return settledNot, err
	}
	if nS == 0 {
		return settledOnRows, nil
	}
	// The chunk's rows, after the moves, against the outcomes: their
	// number, the sum of their ordinals and of a product of residues of
	// their ids. Every row of a chunk not settled before is pending (the
	// failures were just set, and checked), so equal sums mean the
	// successes are the chunk's other rows.
	var n, sum, mix int64
	if err := tx.QueryRowContext(ctx, settleCheckSQL, maxOrdinal, key, f.Chunk.ID).Scan(&n, &sum, &mix); err != nil {
		return settledNot, err
	}
	var wn, wsum, wmix int64
	for _, o := range f.Outcomes {
		id := requestID(key, o.Ordinal)
		wn, wsum, wmix = wn+1, wsum+o.Ordinal, wmix+(id%65521)*(id%65519)
	}
	if n == wn && sum == wsum && mix == wmix {
		return settledOnChunk, nil
	}
	if ok, err := update(sluice.RequestSucceeded, nS); !ok || err != nil {
		return settledNot, err
	}
	return settledOnRows, nil
}

// settleCheckSQL sums a chunk's rows over the requests_chunk index alone
// (TestSettleCheckReadsOnlyTheIndex).
var settleCheckSQL = sqliteStmts.q("settle_check")

// eachOutcome sets the outcomes one row at a time and names the first
// request that is not pending in the chunk.
func eachOutcome(ctx context.Context, tx *sql.Tx, key int64, f *sluice.Finish) error {
	fin, err := tx.PrepareContext(ctx, sqliteStmts.q("request_set_state"))
	if err != nil {
		return err
	}
	defer fin.Close()
	for _, o := range f.Outcomes {
		res, err := fin.Exec(o.State, requestID(key, o.Ordinal), f.Chunk.ID)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return fmt.Errorf("request #%d of chunk %d is no longer pending there: %w", o.Ordinal, f.Chunk.ID, ErrConflict)
		}
	}
	return nil
}

// appendIDs appends the JSON array of the row ids of the outcomes in state
// st.
func appendIDs(dst []byte, key int64, os []sluice.Outcome, st sluice.RequestState) []byte {
	n := 0
	dst = append(dst, '[')
	for _, o := range os {
		if o.State != st {
			continue
		}
		if n > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, requestID(key, o.Ordinal), 10)
		n++
	}
	return append(dst, ']')
}

// answersArg is appendAnswers' array as the argument of chunks.answers:
// NULL when there is none (nothing for the ledger), else the array as text
// over the same bytes (the driver copies an argument as it binds it; the
// array, tens of MB a million requests, is not copied first).
func answersArg(answers []byte) any {
	if len(answers) == 0 {
		return nil
	}
	return unsafe.String(&answers[0], len(answers))
}

// appendAnswers appends the JSON array of the successes with a record in
// the results file, in outcome order, or returns dst unchanged (nil) when
// there is none. Each is [id, offset, length]; with named (a paged chunk:
// named(i) is the custom_id and body key of outcome i's request, pages.go)
// it is [id, offset, length, body key in hex, custom_id], what the ledger
// needs without a request row to join (foldLedger), and a success without
// a body key is left out.
func appendAnswers(dst []byte, key int64, os []sluice.Outcome, named func(i int) (customID string, bodyKey []byte)) []byte {
	n := 0
	for i, o := range os {
		if o.State != sluice.RequestSucceeded || o.Length <= 0 {
			continue
		}
		var id string
		var bk []byte
		if named != nil {
			if id, bk = named(i); len(bk) == 0 {
				continue
			}
		}
		if n == 0 {
			dst = append(dst, '[')
		} else {
			dst = append(dst, ',')
		}
		dst = append(dst, '[')
		dst = strconv.AppendInt(dst, requestID(key, o.Ordinal), 10)
		dst = append(dst, ',')
		dst = strconv.AppendInt(dst, o.Offset, 10)
		dst = append(dst, ',')
		dst = strconv.AppendInt(dst, o.Length, 10)
		if named != nil {
			dst = append(dst, ',', '"')
			dst = hex.AppendEncode(dst, bk)
			dst = append(dst, '"', ',')
			dst = appendJSONString(dst, id)
		}
		dst = append(dst, ']')
		n++
	}
	if n == 0 {
		return dst
	}
	return append(dst, ']')
}

// RequestStates implements sluice.Store.
func (d *DB) RequestStates(ctx context.Context, job string) (map[sluice.RequestState]int64, error) {
	var m map[sluice.RequestState]int64
	err := d.snapshot(ctx, func(q querier) error {
		var err error
		m, err = requestStates(ctx, q, job)
		return err
	})
	return m, err
}

func requestStates(ctx context.Context, q querier, job string) (map[sluice.RequestState]int64, error) {
	// Counted in one pass over the job's rowid range: a GROUP BY would sort
	// every row of the job first. A request still pending in a chunk
	// settled on the chunk is succeeded (finishOutcomes).
	var pending, implicit, succeeded, failed int64
	err := q.QueryRowContext(ctx, sqliteStmts.q("request_states"), job, job, job).Scan(&pending, &implicit, &succeeded, &failed)
	if err != nil {
		return nil, err
	}
	pending, succeeded = pending-implicit, succeeded+implicit
	// A paged plan's requests without a row of their own (pages.go) are as
	// their chunk says, and chunk 0's are answered from earlier jobs; every
	// row of a paged job is an overlay of one page entry.
	var entries, pSucceeded int64
	if err := q.QueryRowContext(ctx, sqliteStmts.q("request_states_paged"), job, job, job, job).Scan(&entries, &pSucceeded); err != nil {
		return nil, err
	}
	if entries > 0 {
		own := pending + succeeded + failed // the rows: each overlays an entry
		pending += entries - own - pSucceeded
		succeeded += pSucceeded
	}
	return stateCounts(pending, succeeded, failed), nil
}

// stateCounts is RequestStates' answer: the states with at least one
// request; both backends share it.
func stateCounts(pending, succeeded, failed int64) map[sluice.RequestState]int64 {
	m := map[sluice.RequestState]int64{}
	for s, n := range map[sluice.RequestState]int64{sluice.RequestPending: pending, sluice.RequestSucceeded: succeeded,
		sluice.RequestFailed: failed} {
		if n > 0 {
			m[s] = n
		}
	}
	return m
}

// Expected implements sluice.Store.
func (d *DB) Expected(ctx context.Context, job string, fn func(int64, string) bool) error {
	key, paged, found, err := jobLayout(ctx, d.db, job)
	if err != nil || !found {
		return err
	}
	if paged {
		// Every request of a paged plan is in its pages, and a request's
		// ordinal and custom_id never change.
		errStop := errors.New("stop")
		err := eachPageEntry(ctx, d.db, key, 0, maxOrdinal, func(r *sluice.Request) error {
			if !fn(r.Ordinal, r.CustomID) {
				return errStop
			}
			return nil
		})
		if err == errStop {
			return nil
		}
		return err
	}
	rows, err := d.db.QueryContext(ctx, d.stmts.q("requests_expected"), maxOrdinal, job, job)
	if err != nil {
		return err
	}
	defer rows.Close()
	var o any // not *int64: see ChunkRequests
	var id string
	for rows.Next() {
		if err := rows.Scan(&o, &id); err != nil {
			return err
		}
		n, ok := o.(int64)
		if !ok {
			return fmt.Errorf("request ordinal is %T, not an integer", o)
		}
		if !fn(n, id) {
			return nil
		}
	}
	return rows.Err()
}

// BatchKnown reports whether any chunk records this provider batch id.
func (c *core) BatchKnown(ctx context.Context, batchID string) bool {
	var one int
	return c.ex.queryRow(ctx, c.stmts.q("batch_known"), batchID).Scan(&one) == nil
}

// RetriedRequests counts a job's requests that needed more than one
// attempt (a split spends none: its chunk's splits are not counted).
func (d *DB) RetriedRequests(ctx context.Context, job string) (int64, error) {
	var n int64
	err := d.db.QueryRowContext(ctx, d.stmts.q("requests_retried"), job, job, job).Scan(&n)
	return n, err
}

// AttemptErrors returns the last n errors recorded for a job's chunks
// (every one when n <= 0), oldest first, and how many are recorded in all.
func (c *core) AttemptErrors(ctx context.Context, job string, n int) ([]sluice.AttemptError, int64, error) {
	var total int64
	if err := c.ex.queryRow(ctx, c.stmts.q("attempt_errors_count"), job).Scan(&total); err != nil {
		return nil, 0, err
	}
	limit := int64(math.MaxInt64) // every one
	if n > 0 {
		limit = int64(n)
	}
	es, err := collect(ctx, c.ex, c.stmts.q("attempt_errors_last"), func(row scanner) (sluice.AttemptError, error) {
		var e sluice.AttemptError
		var at int64
		err := row.Scan(&e.Job, &e.Chunk, &e.Attempt, &e.Code, &e.Message, &at)
		e.At = fromNS(at)
		return e, err
	}, job, limit)
	if err != nil {
		return nil, 0, err
	}
	return es, total, nil
}
