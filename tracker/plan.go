package tracker

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/mattn/go-sqlite3"

	"github.com/sluice-batch/sluice"
)

// planTxRows is how many rows a plan writes per transaction.
const planTxRows = 100_000

// Plan records a job's plan as the splitter makes it. The job stays in
// state planning until Commit; a job found in that state by a later run was
// interrupted and is deleted and planned again (see DeleteJob).
type Plan struct {
	d       *DB
	ctx     context.Context
	job     *sluice.Job
	tx      *sql.Tx
	insPage *sql.Stmt
	insChk  *sql.Stmt
	rows    int
	// conn holds the plan's transactions and, once FindCustomID is first
	// asked, its temporary index of custom_ids (plan_ids).
	conn *sql.Conn
	key  int64 // the job's key: request ids are (key << 40) | ordinal
	// The page being filled (pages.go): its first ordinal, entries, and
	// the last entry packed.
	page      []byte
	pageFirst int64
	pageN     int
	prev      sluice.Request
	// spans: each chunk's first and last ordinal and number of requests,
	// written on the chunk rows at Commit.
	spans map[int64]*span
	// ids: plan_ids is built, and every request added goes into it too.
	ids   bool
	insID *sql.Stmt
	// lastOrd is the last ordinal recorded (-1: none yet).
	lastOrd int64
	// lookup is the prepared ledger lookup of LookupReuse (money.go).
	lookup   *sql.Stmt
	lookConn *sql.Conn
	// ledgerEmpty: no answer was in the ledger when the plan began (a
	// first job in the state directory): LookupReuse has nothing to find.
	ledgerEmpty bool
	// legacy: a job planned before ledger keys were canonical is in the
	// state directory (LegacyKeys).
	legacy bool
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
	var answers, legacy bool
	if err := d.db.QueryRowContext(ctx, sqliteStmts.q("ledger_any")).Scan(&answers, &legacy); err != nil {
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
	job.PlanFlagsKnown = true
	if err := d.db.QueryRowContext(ctx, sqliteStmts.q("plan_job_insert"),
		job.ID, job.Provider, job.Input, job.Model, string(limits), job.Dir, job.Output, job.State,
		job.MaxAttempts, now.UnixNano(), now.UnixNano(), job.Endpoint, job.ProviderFiles,
		job.ModelMap, job.DefaultMaxTokens, canonicalKeys(), job.StoreKey, job.Bucket).Scan(&key); err != nil {
		return nil, fmt.Errorf("record job %s: %w", job.ID, err)
	}
	if key > maxJobKey {
		d.DeleteJob(ctx, job.ID)
		return nil, fmt.Errorf("record job %s: the state database holds too many jobs (key %d); start a new state directory", job.ID, key)
	}
	p := &Plan{d: d, ctx: ctx, job: job, key: key, ledgerEmpty: !answers, legacy: legacy, spans: map[int64]*span{}, lastOrd: -1}
	conn, err := d.db.Conn(ctx)
	if err == nil {
		p.conn = conn
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
		p.lookConn.ExecContext(context.WithoutCancel(p.ctx), sqliteStmts.q("conn_cache"))
		p.lookConn.Close()
		p.lookConn = nil
	}
	if p.conn == nil {
		return
	}
	if p.ids {
		p.conn.ExecContext(context.WithoutCancel(p.ctx), sqliteStmts.q("plan_ids_drop"))
		p.ids = false
	}
	p.conn.Close()
	p.conn = nil
}

func (p *Plan) begin() error {
	tx, err := p.conn.BeginTx(p.ctx, nil)
	if err != nil {
		return err
	}
	p.tx = tx
	if p.insPage, err = tx.PrepareContext(p.ctx, sqliteStmts.q("plan_page_insert")); err != nil {
		return err
	}
	if p.ids {
		if p.insID, err = tx.PrepareContext(p.ctx, insertPlanID); err != nil {
			return err
		}
	}
	p.insChk, err = tx.PrepareContext(p.ctx, sqliteStmts.q("plan_chunk_insert"))
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

func (p *Plan) wrote(n int) error {
	p.rows += n
	if p.rows >= planTxRows {
		return p.flush()
	}
	return nil
}

// AddRequest implements sluice.PlanSink: the request goes into the page
// being filled (pages.go), and the page into request_pages when full.
func (p *Plan) AddRequest(r *sluice.Request) error {
	if err := checkOrdinal(r); err != nil {
		return err
	}
	if r.Attempt > 1 {
		// Not from a plan: every planned request is on its first attempt.
		return fmt.Errorf("record request %q (line %d): a plan's requests are on attempt 1, not %d", r.CustomID, r.Line, r.Attempt)
	}
	if r.Ordinal <= p.lastOrd {
		// Pages and spans hold ordinals in order, each once.
		return fmt.Errorf("record request %q (line %d): ordinal %d after %d: a plan's requests come in order, each once",
			r.CustomID, r.Line, r.Ordinal, p.lastOrd)
	}
	if p.pageN > 0 && r.Ordinal != p.pageFirst+int64(p.pageN) {
		// A page holds consecutive ordinals.
		if err := p.flushPage(); err != nil {
			return err
		}
	}
	if p.ids {
		if err := p.indexID(r); err != nil {
			return err
		}
	}
	if p.pageN == 0 {
		p.pageFirst, p.prev = r.Ordinal, sluice.Request{}
	}
	p.page = appendEntry(p.page, r, &p.prev)
	p.prev.Line = r.Line
	p.pageN++
	sp := p.spans[r.Chunk]
	if sp == nil {
		sp = &span{first: r.Ordinal}
		p.spans[r.Chunk] = sp
	}
	sp.last = r.Ordinal
	sp.n++
	p.lastOrd = r.Ordinal
	id := requestID(p.key, r.Ordinal)
	sp.sum, sp.mix = sp.sum+idSum(id), sp.mix+idMix(id)
	if p.pageN >= pageRows {
		return p.flushPage()
	}
	return nil
}

// span is where a chunk's requests are in the plan.
type span struct{ first, last, n, sum, mix int64 }

// flushPage writes the page being filled.
func (p *Plan) flushPage() error {
	if p.pageN == 0 {
		return nil
	}
	if _, err := p.insPage.ExecContext(p.ctx, requestID(p.key, p.pageFirst), p.pageN, p.page); err != nil {
		return fmt.Errorf("record requests #%d to #%d: %w", p.pageFirst, p.pageFirst+int64(p.pageN)-1, err)
	}
	n := p.pageN
	p.page, p.pageN = p.page[:0], 0
	return p.wrote(n)
}

// indexID puts r's custom_id into plan_ids, refusing one already there.
func (p *Plan) indexID(r *sluice.Request) error {
	if _, err := p.insID.ExecContext(p.ctx, r.CustomID, r.Line); err != nil {
		var se sqlite3.Error
		if errors.As(err, &se) && se.Code == sqlite3.ErrConstraint {
			first, _, _ := p.FindCustomID(r.CustomID)
			return fmt.Errorf("record request %q (line %d): duplicate custom_id, first seen on line %d", r.CustomID, r.Line, first)
		}
		return fmt.Errorf("record request %q (line %d): %w", r.CustomID, r.Line, err)
	}
	return nil
}

// AddChunk implements sluice.PlanSink.
func (p *Plan) AddChunk(c *sluice.Chunk) error {
	c.Job = p.job.ID
	if c.Attempt == 0 {
		c.Attempt = 1
	}
	c.State = sluice.ChunkPending
	if _, err := p.insChk.ExecContext(p.ctx, p.job.ID, c.ID, c.Attempt, c.URL, c.Model, c.Path, c.Requests,
		c.Bytes, c.EstTokens, c.Bound, c.State, c.MaxOutputTokens, c.NoMaxRequests, c.FileDigest); err != nil {
		return fmt.Errorf("record chunk %d: %w", c.ID, err)
	}
	return p.wrote(1)
}

// FindCustomID implements sluice.PlanSink. The plan keeps no index of
// custom_ids until it is first asked (the splitter asks only when its
// filter has seen an id's hash before: a clean input never): then it
// builds plan_ids, a temporary table on the plan's connection, from the
// requests recorded so far, and from then on every request added goes into
// it as well, a duplicate refused.
func (p *Plan) FindCustomID(customID string) (int64, bool, error) {
	if !p.ids {
		if err := p.buildIDs(); err != nil {
			return 0, false, fmt.Errorf("index custom_ids: %w", err)
		}
	}
	var line int64
	err := p.tx.QueryRowContext(p.ctx, sqliteStmts.q("plan_id_line"), customID).Scan(&line)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	return line, err == nil, err
}

// insertPlanID adds a custom_id to plan_ids; one already there is refused.
var insertPlanID = sqliteStmts.q("plan_id_insert")

// buildIDs creates plan_ids from the pages written and the page being
// filled.
func (p *Plan) buildIDs() error {
	if _, err := p.tx.ExecContext(p.ctx, sqliteStmts.q("plan_ids_create")); err != nil {
		return err
	}
	ins, err := p.tx.PrepareContext(p.ctx, sqliteStmts.q("plan_id_insert_first"))
	if err != nil {
		return err
	}
	defer ins.Close()
	add := func(r *sluice.Request) error {
		_, err := ins.ExecContext(p.ctx, r.CustomID, r.Line)
		return err
	}
	if err := eachPageEntry(p.ctx, p.tx, p.key, 0, maxOrdinal, add); err != nil {
		return err
	}
	d := newPageDecoder(p.pageFirst, p.pageN, p.page)
	for {
		ok, err := d.entry()
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		if err := add(&d.r); err != nil {
			return err
		}
	}
	if p.insID, err = p.tx.PrepareContext(p.ctx, insertPlanID); err != nil {
		return err
	}
	p.ids = true
	return nil
}

// Commit records the input's fingerprint and counts and moves the job to
// planned: from here on the plan is trusted.
func (p *Plan) Commit(ctx context.Context, fp sluice.Fingerprint, requests, rejected int64) error {
	now := p.d.now().UnixNano()
	err := p.flushPage()
	if err == nil {
		err = p.recordSpans(ctx)
	}
	if err != nil {
		p.tx.Rollback()
		p.tx = nil
		p.release()
		return err
	}
	res, err := p.tx.ExecContext(ctx, sqliteStmts.q("plan_commit"),
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

// AddRequests records many requests at once (splitter.BatchSink).
func (p *Plan) AddRequests(rs []sluice.Request) error {
	for i := range rs {
		if err := p.AddRequest(&rs[i]); err != nil {
			return err
		}
	}
	return nil
}

// recordSpans writes each chunk's span of the plan on its row (chunk 0,
// the requests answered from earlier jobs, has none).
func (p *Plan) recordSpans(ctx context.Context) error {
	st, err := p.tx.PrepareContext(ctx, sqliteStmts.q("plan_chunk_span"))
	if err != nil {
		return err
	}
	defer st.Close()
	for id, sp := range p.spans {
		if id == 0 {
			continue
		}
		// A chunk with no row (tests of requests alone) keeps no span:
		// RequestStates counts its requests from the pages.
		if _, err := st.ExecContext(ctx, sp.first, sp.last, sp.n, sp.sum, sp.mix, p.job.ID, id); err != nil {
			return fmt.Errorf("record chunk %d: %w", id, err)
		}
	}
	return nil
}
