package tracker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluice-batch/sluice"
)

// pgPlan is a plan being recorded in PostgreSQL: the whole plan is one
// transaction, and request rows go in with COPY (pgx CopyFrom), a call's
// rows at a time, into the job's own partition of requests
// (migrations/postgres/0001_init.sql), which has only its primary key
// until Commit builds the others. The job's row and its empty partition
// are committed first, in state planning, as on SQLite: a crash leaves a
// job the next run deletes and plans again.
type pgPlan struct {
	d   *Postgres
	ctx context.Context
	job *sluice.Job
	key int64
	tx  pgx.Tx
	// legacy: a job planned before ledger keys were canonical is in the
	// database (LegacyKeys).
	legacy bool
	// part is the job's partition; uniq tells whether its custom_id index
	// exists yet (FindCustomID builds it early, Commit at the latest).
	part string
	uniq bool
	// failed is the error that ended the plan: PostgreSQL refuses every
	// statement of a transaction after a failed one.
	failed error
	// The copiers: AddRequests hands a copy of its rows to one of
	// pgCopiers goroutines, each writing with COPY on a connection of its
	// own, and returns; barrier waits for what it handed over.
	copies   chan []sluice.Request
	free     chan []sluice.Request
	inflight sync.WaitGroup
	copiers  sync.WaitGroup
	copyMu   sync.Mutex
	copyErr  error
	stop     context.CancelFunc
}

// pgCopiers is how many connections write a plan's rows at once. Each
// COPY is a transaction of its own (asynchronous commit: the plan's
// Commit is synchronous and its WAL flush covers every COPY before it),
// so the server's work on one batch overlaps sluice's on the next, and
// the server can put two cores on the rows. A crash before Commit leaves
// a job in state planning, which the next run deletes with its partition.
const pgCopiers = 2

// BeginPlan implements Backend.
func (p *Postgres) BeginPlan(ctx context.Context, job *sluice.Job) (PlanWriter, error) {
	limits, err := json.Marshal(job.Limits)
	if err != nil {
		return nil, err
	}
	now := p.now()
	job.State = sluice.JobPlanning
	job.CreatedAt, job.UpdatedAt = now, now
	if job.MaxAttempts == 0 {
		job.MaxAttempts = 3
	}
	if job.ProviderFiles == "" {
		job.ProviderFiles = sluice.ProviderFilesLive
	}
	var legacy bool
	if err := p.pool.QueryRow(ctx, p.stmts.q("ledger_legacy")).Scan(&legacy); err != nil {
		return nil, p.wrap(fmt.Errorf("ledger: %w", err))
	}
	var key int64
	job.PlanFlagsKnown = true
	if err := p.pool.QueryRow(ctx, p.stmts.q("plan_job_insert"),
		job.ID, job.Provider, job.Input, job.Model, string(limits), job.Dir, job.Output, job.State,
		job.MaxAttempts, now.UnixNano(), now.UnixNano(), job.Endpoint, job.ProviderFiles,
		job.ModelMap, job.DefaultMaxTokens, canonicalKeys(), job.StoreKey, job.Bucket).Scan(&key); err != nil {
		return nil, p.wrap(fmt.Errorf("record job %s: %w", job.ID, err))
	}
	if key > maxJobKey {
		p.DeleteJob(ctx, job.ID)
		return nil, fmt.Errorf("record job %s: the database holds too many jobs (key %d)", job.ID, key)
	}
	pl := &pgPlan{d: p, ctx: ctx, job: job, key: key, part: pgPartition(key), legacy: legacy}
	// The partition is made apart and attached (SHARE UPDATE EXCLUSIVE on
	// requests, which reads and writes of other jobs pass), with a CHECK
	// of its bounds so that attaching it scans nothing; it is committed
	// empty, so that DeleteJob finds it after a crash.
	lo, hi := requestID(key, 0), requestID(key+1, 0)
	err = p.tx(ctx, func(tx pgx.Tx) error {
		for _, q := range []string{
			`CREATE TABLE ` + pl.part + ` (LIKE requests INCLUDING DEFAULTS INCLUDING CONSTRAINTS) WITH (fillfactor = 50)`,
			fmt.Sprintf(`ALTER TABLE %s ADD CONSTRAINT %s_ids CHECK (id >= %d AND id < %d)`, pl.part, pl.part, lo, hi),
			fmt.Sprintf(`ALTER TABLE requests ATTACH PARTITION %s FOR VALUES FROM (%d) TO (%d)`, pl.part, lo, hi),
		} {
			if _, err := tx.Exec(ctx, q); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		pl.tx, err = p.pool.Begin(ctx)
	}
	if err != nil {
		p.DeleteJob(context.WithoutCancel(ctx), job.ID)
		return nil, fmt.Errorf("record job %s: %w", job.ID, p.wrap(err))
	}
	return pl, nil
}

// AddRequest implements sluice.PlanSink: one row, one COPY, waited for.
// (The splitter records a plan with AddRequests.)
func (pl *pgPlan) AddRequest(r *sluice.Request) error {
	if err := pl.AddRequests([]sluice.Request{*r}); err != nil {
		return err
	}
	return pl.barrier()
}

// AddRequests implements splitter.BatchSink: a copy of the rows goes to a
// copier, which writes them with one COPY. An error of that COPY is
// returned by a later call (naming the row at fault); Commit returns it at
// the latest.
func (pl *pgPlan) AddRequests(rs []sluice.Request) error {
	if err := pl.err(); err != nil {
		return err
	}
	for i := range rs {
		if err := checkOrdinal(&rs[i]); err != nil {
			return err
		}
	}
	if len(rs) == 0 {
		return nil
	}
	if pl.copies == nil {
		pl.startCopiers()
	}
	var buf []sluice.Request
	select {
	case buf = <-pl.free:
	default:
	}
	buf = append(buf[:0], rs...)
	for i := range buf {
		if buf[i].BodyKey != nil {
			buf[i].BodyKey = bytes.Clone(buf[i].BodyKey) // the caller reuses its buffers
		}
	}
	pl.inflight.Add(1)
	select {
	case pl.copies <- buf:
		return nil
	case <-pl.ctx.Done():
		pl.inflight.Done()
		return pl.ctx.Err()
	}
}

func (pl *pgPlan) startCopiers() {
	ctx, stop := context.WithCancel(pl.ctx)
	pl.stop = stop
	pl.copies = make(chan []sluice.Request, pgCopiers)
	pl.free = make(chan []sluice.Request, 2*pgCopiers+2)
	for range pgCopiers {
		pl.copiers.Add(1)
		go func() {
			defer pl.copiers.Done()
			pl.copier(ctx)
		}()
	}
}

// copier writes the batches it is handed, each with one COPY in a
// transaction of its own, until the channel closes. After an error it
// writes nothing more.
func (pl *pgPlan) copier(ctx context.Context) {
	var conn *pgxpool.Conn
	defer func() {
		if conn != nil {
			conn.Release()
		}
	}()
	vals := make([]any, 10)
	for rs := range pl.copies {
		err := pl.err()
		if err == nil && conn == nil {
			if conn, err = pl.d.pool.Acquire(ctx); err == nil {
				_, err = conn.Exec(ctx, `SET synchronous_commit = off`)
			}
		}
		if err == nil {
			err = pl.copy(ctx, conn.Conn(), rs, vals)
		}
		if err != nil {
			pl.setErr(err)
		}
		select {
		case pl.free <- rs:
		default:
		}
		pl.inflight.Done()
	}
	if conn != nil {
		conn.Exec(context.WithoutCancel(ctx), `RESET synchronous_commit`)
	}
}

func (pl *pgPlan) setErr(err error) {
	pl.copyMu.Lock()
	if pl.copyErr == nil {
		pl.copyErr = err
	}
	pl.copyMu.Unlock()
}

// err is the error that ended the plan, if any.
func (pl *pgPlan) err() error {
	if pl.failed != nil {
		return pl.failed
	}
	pl.copyMu.Lock()
	defer pl.copyMu.Unlock()
	return pl.copyErr
}

// barrier waits until every row handed to the copiers is written (or
// failed), and returns the plan's error.
func (pl *pgPlan) barrier() error {
	pl.inflight.Wait()
	if err := pl.err(); err != nil {
		pl.failed = err
		return err
	}
	return nil
}

// stopCopiers waits for the copiers to finish and end.
func (pl *pgPlan) stopCopiers() {
	if pl.copies == nil {
		return
	}
	close(pl.copies)
	pl.copiers.Wait()
	pl.stop()
	pl.copies = nil
}

var requestCopyCols = []string{"id", "line", "custom_id", "chunk_id", "idx", "byte_offset", "length", "tokens", "attempt", "body_key"}

// copy writes rs with COPY on conn. The error names the row at fault when
// the server says which.
func (pl *pgPlan) copy(ctx context.Context, conn *pgx.Conn, rs []sluice.Request, v []any) error {
	i := -1
	_, err := conn.CopyFrom(ctx, pgx.Identifier{pl.part}, requestCopyCols, pgx.CopyFromFunc(func() ([]any, error) {
		i++
		if i >= len(rs) {
			return nil, nil
		}
		r := &rs[i]
		attempt := r.Attempt
		if attempt == 0 {
			attempt = 1
		}
		v[0], v[1], v[2], v[3], v[4] = requestID(pl.key, r.Ordinal), r.Line, r.CustomID, r.Chunk, int32(r.Index)
		v[5], v[6], v[7], v[8], v[9] = r.Offset, int32(r.Length), r.Tokens, int32(attempt), r.BodyKey
		if r.BodyKey == nil {
			v[9] = nil
		}
		return v, nil
	}))
	if err != nil {
		err = pl.d.wrap(err)
		if r := faultyRow(err, pl.key, rs); r != nil {
			return fmt.Errorf("record request %q (line %d): %w", r.CustomID, r.Line, err)
		}
		return fmt.Errorf("record requests: %w", err)
	}
	return nil
}

// faultyRow finds the row of rs that a unique violation of COPY is about:
// the first row whose custom_id (or ordinal) the server names, or, when
// it repeats within rs, its second occurrence.
func faultyRow(err error, key int64, rs []sluice.Request) *sluice.Request {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "23505" {
		return nil
	}
	// Detail: Key (custom_id)=(the-id) already exists.
	col, val, ok := strings.Cut(pe.Detail, ")=(")
	if !ok {
		return nil
	}
	val = strings.TrimSuffix(val, ") already exists.")
	var match func(r *sluice.Request) bool
	switch {
	case strings.HasSuffix(col, "custom_id"):
		match = func(r *sluice.Request) bool { return r.CustomID == val }
	default:
		match = func(r *sluice.Request) bool { return fmt.Sprint(requestID(key, r.Ordinal)) == val }
	}
	var first *sluice.Request
	for i := range rs {
		if match(&rs[i]) {
			if first != nil {
				return &rs[i]
			}
			first = &rs[i]
		}
	}
	return first
}

// AddChunk implements sluice.PlanSink.
func (pl *pgPlan) AddChunk(c *sluice.Chunk) error {
	if err := pl.err(); err != nil {
		return err
	}
	c.Job = pl.job.ID
	if c.Attempt == 0 {
		c.Attempt = 1
	}
	c.State = sluice.ChunkPending
	if _, err := pl.tx.Exec(pl.ctx, pgText(pl.d.stmts.q("plan_chunk_insert")),
		pl.job.ID, c.ID, c.Attempt, c.URL, c.Model, c.Path, c.Requests, c.Bytes, c.EstTokens, c.Bound, c.State,
		c.MaxOutputTokens, c.NoMaxRequests, c.FileDigest); err != nil {
		pl.failed = fmt.Errorf("record chunk %d: %w", c.ID, pl.d.wrap(err))
		return pl.failed
	}
	return nil
}

// FindCustomID implements sluice.PlanSink. The splitter asks only when
// its filter of custom_ids (48 bits of a hash each) says the id may have
// been seen: nearly always a true duplicate. The first call builds the
// partition's custom_id index from the rows so far; the rows after it
// maintain it.
func (pl *pgPlan) FindCustomID(customID string) (int64, bool, error) {
	if err := pl.barrier(); err != nil {
		return 0, false, err
	}
	if err := pl.uniqueIndex(); err != nil {
		return 0, false, err
	}
	var line int64
	err := pl.d.pool.QueryRow(pl.ctx, pl.d.partQ("plan_id_line", pl.key), customID).Scan(&line)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	return line, err == nil, pl.d.wrap(err)
}

// checkUnique refuses a plan whose custom_ids repeat, naming both lines.
// A job's custom_ids are looked up only while it is planned
// (FindCustomID), so the partition keeps no index of them: one more index
// would be written at every request's change of state (updates that
// change no indexed column and find room on their page write no index
// entry at all; the partitions leave that room, fillfactor 50).
func (pl *pgPlan) checkUnique() error {
	if pl.failed != nil {
		return pl.failed
	}
	if pl.uniq {
		// FindCustomID built it and it held from then on.
		_, err := pl.tx.Exec(pl.ctx, pl.d.partQ("plan_unique_index_drop", pl.key))
		return pl.fail(err)
	}
	if _, err := pl.tx.Exec(pl.ctx, `SET LOCAL work_mem = '256MB'`); err != nil {
		return pl.fail(err)
	}
	var id string
	err := pl.tx.QueryRow(pl.ctx, pl.d.partQ("plan_duplicate", pl.key)).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return pl.fail(err)
	}
	return pl.duplicate(id, nil)
}

// fail records err (scrubbed) as the error that ended the plan.
func (pl *pgPlan) fail(err error) error {
	if err != nil && pl.failed == nil {
		pl.failed = pl.d.wrap(err)
	}
	return pl.failed
}

// duplicate ends the plan with an error naming the first two lines of
// custom_id id.
func (pl *pgPlan) duplicate(id string, cause error) error {
	var first, second int64
	if err := pl.tx.QueryRow(pl.ctx, pl.d.partQ("plan_duplicate_lines", pl.key), id).Scan(&first, &second); err != nil {
		return pl.fail(err)
	}
	err := fmt.Errorf("record request %q (line %d): duplicate custom_id, first at line %d", id, second, first)
	if cause != nil {
		err = fmt.Errorf("%w: %w", err, pl.d.wrap(cause))
	}
	pl.failed = err
	return err
}

// uniqueIndex builds the partition's unique index on custom_id unless it
// is there, in a transaction of its own (the copiers' COPYs, on other
// connections, maintain it from then on). A duplicate already recorded
// fails it: the error names both lines.
func (pl *pgPlan) uniqueIndex() error {
	if pl.uniq {
		return nil
	}
	err := pgx.BeginFunc(pl.ctx, pl.d.pool, func(tx pgx.Tx) error {
		// The build sorts the partition's rows: in memory rather than in
		// temporary files.
		if _, err := tx.Exec(pl.ctx, `SET LOCAL maintenance_work_mem = '256MB'`); err != nil {
			return err
		}
		_, err := tx.Exec(pl.ctx, pl.d.partQ("plan_unique_index", pl.key))
		return err
	})
	if err == nil {
		pl.uniq = true
		return nil
	}
	var id string
	if pl.d.pool.QueryRow(pl.ctx, pl.d.partQ("plan_duplicate", pl.key)).Scan(&id) == nil {
		return pl.duplicate(id, err)
	}
	return pl.fail(err)
}

// LegacyKeys implements splitter.LegacyKeySink: a job planned before
// ledger keys were canonical is in the database.
func (pl *pgPlan) LegacyKeys() bool { return pl.legacy }

// LookupReuse implements splitter.ReuseSink: on the pool, not the plan's
// transaction (the answers are in other jobs' committed rows), reuseBatch
// keys a query.
func (pl *pgPlan) LookupReuse(keys [][]byte, fn func(i int, h sluice.Answer) error) error {
	return inBatches(keys, fn, pl.lookupBatch)
}

func (pl *pgPlan) lookupBatch(keys [][]byte, fn func(int, sluice.Answer) error) error {
	idx := make(map[string]int, len(keys))
	for i, k := range keys {
		if _, dup := idx[string(k)]; !dup {
			idx[string(k)] = i // the first of equal keys gets the answer
		}
	}
	rows, err := pl.d.pool.Query(pl.ctx, pl.d.stmts.q("ledger_lookup"), keys, pl.key)
	if err != nil {
		return fmt.Errorf("ledger lookup: %w", pl.d.wrap(err))
	}
	defer rows.Close()
	if err := scanAnswers(rows, idx, fn); err != nil {
		return err
	}
	return pl.d.wrap(rows.Err())
}

// SetReused implements PlanWriter.
func (pl *pgPlan) SetReused(n int64, sources map[string]int64) error {
	if n == 0 {
		return nil
	}
	if err := pl.barrier(); err != nil {
		return err
	}
	err := func() error {
		if _, err := pl.tx.Exec(pl.ctx, pl.d.partQ("plan_reused_succeeded", pl.key)); err != nil {
			return err
		}
		if _, err := pl.tx.Exec(pl.ctx, pgText(pl.d.stmts.q("plan_set_reused")), n, pl.job.ID); err != nil {
			return err
		}
		for src, k := range sources {
			if _, err := pl.tx.Exec(pl.ctx, pgText(pl.d.stmts.q("plan_reuse_source")),
				pl.job.ID, src, k); err != nil {
				return err
			}
		}
		return nil
	}()
	if err != nil {
		pl.failed = pl.d.wrap(err)
		return pl.failed
	}
	pl.job.Reused = n
	return nil
}

// Commit implements PlanWriter.
func (pl *pgPlan) Commit(ctx context.Context, fp sluice.Fingerprint, requests, rejected int64) error {
	if pl.tx == nil {
		return fmt.Errorf("commit plan of job %s: the plan is closed", pl.job.ID)
	}
	// Every row written; custom_ids checked unique, the chunk index built
	// from the rows in one pass, and the statistics the planner needs for
	// the partition.
	err := pl.barrier()
	pl.stopCopiers()
	if err == nil {
		err = pl.checkUnique()
	}
	if err == nil {
		_, err = pl.tx.Exec(ctx, pl.d.partQ("plan_chunk_index", pl.key))
	}
	if err == nil {
		_, err = pl.tx.Exec(ctx, pl.d.partQ("plan_analyze", pl.key))
	}
	if err == nil {
		var tag pgconn.CommandTag
		tag, err = pl.tx.Exec(ctx, pgText(pl.d.stmts.q("plan_commit")),
			fp.Size, ns(fp.ModTime), fp.Hash, requests, rejected, sluice.JobPlanned, pl.d.now().UnixNano(),
			pl.job.ID, sluice.JobPlanning)
		if err == nil && tag.RowsAffected() != 1 {
			err = fmt.Errorf("commit plan of job %s: %w", pl.job.ID, ErrConflict)
		}
	}
	if err != nil {
		pl.tx.Rollback(context.WithoutCancel(ctx))
		pl.tx = nil
		return pl.d.wrap(err)
	}
	err = pl.tx.Commit(ctx)
	pl.tx = nil
	if err != nil {
		return pl.d.wrap(err)
	}
	pl.job.State, pl.job.Fingerprint, pl.job.Requests, pl.job.Rejected = sluice.JobPlanned, fp, requests, rejected
	return nil
}

// Abort implements PlanWriter.
func (pl *pgPlan) Abort(ctx context.Context) error {
	if pl.stop != nil {
		pl.stop() // COPYs in flight are cancelled
	}
	pl.inflight.Wait()
	pl.stopCopiers()
	if pl.tx != nil {
		pl.tx.Rollback(ctx)
		pl.tx = nil
	}
	return pl.d.DeleteJob(ctx, pl.job.ID)
}
