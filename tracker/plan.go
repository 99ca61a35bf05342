package tracker

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sluice-batch/sluice"
)

// planTxRows is how many rows a plan writes per transaction.
const planTxRows = 100_000

// Plan records a job's plan as the splitter makes it. The job stays in
// state planning until Commit; a job found in that state by a later run was
// interrupted and is deleted and planned again (see DeleteJob).
type Plan struct {
	d      *DB
	ctx    context.Context
	job    *sluice.Job
	tx     *sql.Tx
	insReq *sql.Stmt
	insChk *sql.Stmt
	// insMany is the multi-row insert of AddRequests, prepared on first use
	// in the current transaction; args is its reused argument slice.
	insMany *sql.Stmt
	args    []any
	rows    int
	// conn holds the plan's transactions, with temporary files in memory:
	// SQLite keeps a statement journal for each multi-row INSERT inside a
	// transaction (OR FAIL or not), and on disk that journal cost a 1 GB
	// plan ~290,000 page writes to a file in /var/tmp. Only this
	// connection: elsewhere a big sort or index build should still spill.
	conn *sql.Conn
	key  int64 // the job's key: request row ids are (key << 40) | ordinal
	// lookup is the prepared ledger lookup of LookupReuse (money.go).
	lookup   *sql.Stmt
	lookConn *sql.Conn
	// ledgerEmpty: no answer was in the ledger when the plan began (a
	// first job in the state directory): LookupReuse has nothing to find.
	ledgerEmpty bool
}

// BeginPlan records job in state planning and returns the sink for its plan.
func (d *DB) BeginPlan(ctx context.Context, job *sluice.Job) (PlanWriter, error) {
	limits, err := json.Marshal(job.Limits)
	if err != nil {
		return nil, err
	}
	// The answers of chunks finished since the last plan go into the
	// ledger first, committed, so the plan's lookups see them.
	if err := d.foldLedger(ctx); err != nil {
		return nil, err
	}
	var answers bool
	if err := d.db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM ledger)`).Scan(&answers); err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	now := d.now()
	job.State = sluice.JobPlanning
	job.CreatedAt, job.UpdatedAt = now, now
	if job.MaxAttempts == 0 {
		job.MaxAttempts = 3
	}
	// A job's key is one more than the largest in use by a job or by a
	// request row: DeleteJob removes a job's rows with it, but should any
	// survive (a delete by hand), a new job never inherits them.
	var key int64
	if job.ProviderFiles == "" {
		job.ProviderFiles = sluice.ProviderFilesLive
	}
	if err := d.db.QueryRowContext(ctx, `INSERT INTO jobs (id, provider, input, model, limits, dir, output, state,
		max_attempts, created_at, updated_at, endpoint, provider_files, key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,
		MAX((SELECT COALESCE(MAX(key), 0) FROM jobs), (SELECT COALESCE(MAX(id), 0) >> 40 FROM requests)) + 1) RETURNING key`,
		job.ID, job.Provider, job.Input, job.Model, string(limits), job.Dir, job.Output, job.State,
		job.MaxAttempts, now.UnixNano(), now.UnixNano(), job.Endpoint, job.ProviderFiles).Scan(&key); err != nil {
		return nil, fmt.Errorf("record job %s: %w", job.ID, err)
	}
	if key > maxJobKey {
		d.DeleteJob(ctx, job.ID)
		return nil, fmt.Errorf("record job %s: the state database holds too many jobs (key %d); start a new state directory", job.ID, key)
	}
	p := &Plan{d: d, ctx: ctx, job: job, key: key, ledgerEmpty: !answers}
	conn, err := d.db.Conn(ctx)
	if err == nil {
		p.conn = conn
		_, err = conn.ExecContext(ctx, `PRAGMA temp_store = MEMORY`)
	}
	if err == nil {
		err = p.begin()
	}
	if err != nil {
		p.Abort(context.WithoutCancel(ctx))
		return nil, err
	}
	return p, nil
}

// release gives the plan's connection back to the pool, as it found it.
func (p *Plan) release() {
	if p.lookup != nil {
		p.lookup.Close()
		p.lookup = nil
	}
	if p.lookConn != nil {
		p.lookConn.ExecContext(context.WithoutCancel(p.ctx), `PRAGMA cache_size = -32768`)
		p.lookConn.Close()
		p.lookConn = nil
	}
	if p.conn == nil {
		return
	}
	p.conn.ExecContext(context.WithoutCancel(p.ctx), `PRAGMA temp_store = DEFAULT`)
	p.conn.Close()
	p.conn = nil
}

func (p *Plan) begin() error {
	tx, err := p.conn.BeginTx(p.ctx, nil)
	if err != nil {
		return err
	}
	p.tx = tx
	p.insMany = nil
	if p.insReq, err = tx.PrepareContext(p.ctx, `INSERT INTO requests (id, line, custom_id, chunk_id, idx,
		offset, length, tokens, attempt, body_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`); err != nil {
		return err
	}
	p.insChk, err = tx.PrepareContext(p.ctx, `INSERT INTO chunks (job_id, id, attempt, url, model, path, requests,
		bytes, est_tokens, bound, state, max_output_tokens, no_max_requests) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	return err
}

// flush commits the current transaction and starts the next.
func (p *Plan) flush() error {
	if err := p.tx.Commit(); err != nil {
		return err
	}
	p.rows = 0
	return p.begin()
}

func (p *Plan) wrote() error {
	p.rows++
	if p.rows >= planTxRows {
		return p.flush()
	}
	return nil
}

// AddRequest implements sluice.PlanSink.
func (p *Plan) AddRequest(r *sluice.Request) error {
	if err := checkOrdinal(r); err != nil {
		return err
	}
	attempt := r.Attempt
	if attempt == 0 {
		attempt = 1
	}
	if _, err := p.insReq.Exec(requestID(p.key, r.Ordinal), r.Line, r.CustomID, r.Chunk, r.Index,
		r.Offset, r.Length, r.Tokens, attempt, r.BodyKey); err != nil {
		return fmt.Errorf("record request %q (line %d): %w", r.CustomID, r.Line, err)
	}
	return p.wrote()
}

// AddChunk implements sluice.PlanSink.
func (p *Plan) AddChunk(c *sluice.Chunk) error {
	c.Job = p.job.ID
	if c.Attempt == 0 {
		c.Attempt = 1
	}
	c.State = sluice.ChunkPending
	if _, err := p.insChk.ExecContext(p.ctx, p.job.ID, c.ID, c.Attempt, c.URL, c.Model, c.Path, c.Requests,
		c.Bytes, c.EstTokens, c.Bound, c.State, c.MaxOutputTokens, c.NoMaxRequests); err != nil {
		return fmt.Errorf("record chunk %d: %w", c.ID, err)
	}
	return p.wrote()
}

// FindCustomID implements sluice.PlanSink.
func (p *Plan) FindCustomID(customID string) (int64, bool, error) {
	var line int64
	err := p.tx.QueryRowContext(p.ctx, `SELECT line FROM requests WHERE id >> 40 = ? AND custom_id = ?`,
		p.key, customID).Scan(&line)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	return line, err == nil, err
}

// Commit records the input's fingerprint and counts and moves the job to
// planned: from here on the plan is trusted.
func (p *Plan) Commit(ctx context.Context, fp sluice.Fingerprint, requests, rejected int64) error {
	now := p.d.now().UnixNano()
	res, err := p.tx.ExecContext(ctx, `UPDATE jobs SET input_size = ?, input_mtime = ?, input_hash = ?,
		requests = ?, rejected = ?, state = ?, updated_at = ? WHERE id = ? AND state = ?`,
		fp.Size, ns(fp.ModTime), fp.Hash, requests, rejected, sluice.JobPlanned, now, p.job.ID, sluice.JobPlanning)
	if err == nil {
		if n, _ := res.RowsAffected(); n != 1 {
			err = fmt.Errorf("commit plan of job %s: %w", p.job.ID, ErrConflict)
		}
	}
	if err != nil {
		p.tx.Rollback()
		p.tx = nil
		p.release()
		return err
	}
	err = p.tx.Commit()
	p.tx = nil
	p.release()
	if err != nil {
		return err
	}
	p.job.State, p.job.Fingerprint, p.job.Requests, p.job.Rejected = sluice.JobPlanned, fp, requests, rejected
	return nil
}

// Abort throws the plan away: the job and every row of it.
func (p *Plan) Abort(ctx context.Context) error {
	if p.tx != nil {
		p.tx.Rollback()
		p.tx = nil
	}
	p.release()
	return p.d.DeleteJob(ctx, p.job.ID)
}

// checkOrdinal refuses an ordinal that does not fit a request row's id.
func checkOrdinal(r *sluice.Request) error {
	if r.Ordinal < 0 || r.Ordinal > maxOrdinal {
		return fmt.Errorf("record request %q (line %d): ordinal %d out of range", r.CustomID, r.Line, r.Ordinal)
	}
	return nil
}

// rowsPerInsert is how many request rows one INSERT statement carries:
// SQLite's per-statement overhead dominates single-row inserts.
const rowsPerInsert = 64

// AddRequests records many requests at once (splitter.BatchSink).
func (p *Plan) AddRequests(rs []sluice.Request) error {
	for len(rs) >= rowsPerInsert {
		if err := p.insertMany(rs[:rowsPerInsert]); err != nil {
			return err
		}
		rs = rs[rowsPerInsert:]
	}
	for i := range rs {
		if err := p.AddRequest(&rs[i]); err != nil {
			return err
		}
	}
	return nil
}

func (p *Plan) insertMany(rs []sluice.Request) error {
	if p.insMany == nil {
		// OR FAIL: a failing statement keeps the rows it inserted before
		// the one at fault (insertEach copes).
		q := `INSERT OR FAIL INTO requests (id, line, custom_id, chunk_id, idx, offset, length, tokens, body_key) VALUES `
		for i := 0; i < rowsPerInsert; i++ {
			if i > 0 {
				q += ","
			}
			q += "(?,?,?,?,?,?,?,?,?)"
		}
		st, err := p.tx.PrepareContext(p.ctx, q)
		if err != nil {
			return err
		}
		p.insMany = st
	}
	args := p.args[:0]
	for i := range rs {
		r := &rs[i]
		if err := checkOrdinal(r); err != nil {
			return err
		}
		if r.Attempt > 1 {
			// Not from a plan: every planned request is on its first attempt.
			return fmt.Errorf("record request %q (line %d): a plan's requests are on attempt 1, not %d", r.CustomID, r.Line, r.Attempt)
		}
		// Attempt and state take their defaults (1, pending): one bound value
		// is a call into C, and a plan binds millions.
		args = append(args, requestID(p.key, r.Ordinal), r.Line, r.CustomID, r.Chunk, r.Index, r.Offset, r.Length, r.Tokens, r.BodyKey)
	}
	p.args = args
	if _, err := p.insMany.Exec(args...); err != nil {
		// Name the row at fault: redo them one by one.
		return p.insertEach(rs, err)
	}
	p.rows += len(rs) - 1
	return p.wrote()
}

// insertEach is the slow path after a multi-row insert failed (a duplicate
// custom_id, say): it finds and reports the row at fault, passing over the
// rows the failed statement inserted before it.
func (p *Plan) insertEach(rs []sluice.Request, cause error) error {
	for i := range rs {
		var id string
		err := p.tx.QueryRowContext(p.ctx, `SELECT custom_id FROM requests WHERE id = ?`, requestID(p.key, rs[i].Ordinal)).Scan(&id)
		switch {
		case err == nil && id == rs[i].CustomID:
			continue // inserted by the failed statement
		case err != nil && !errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("%w (and looking for the row at fault: %v)", cause, err)
		}
		if err := p.AddRequest(&rs[i]); err != nil {
			return err
		}
	}
	return cause
}
