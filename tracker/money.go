package tracker

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/sluice-batch/sluice"
)

// Money (docs/money.md): the ledger of bought answers, the lessons of
// finished batches, the spend cap.

// foldLedger puts the answers of every chunk finished since the last fold
// into the ledger, in one transaction, sorted by key. FinishChunk leaves a
// chunk's successes and the places of their records in its results file
// as one JSON array on the chunk (chunks.answers) and writes no ledger row:
// a ledger row is an insert at a random place of a B-tree keyed by hash (6
// to 15 CPU seconds per million requests, in a run that may never be
// reused from), while sorted they go in page by page. It runs when a job
// is planned (BeginPlan), before its requests are looked up, so every
// answer recorded before a plan starts can answer it. INSERT OR IGNORE: of
// two successes of one key, the one folded first stays the answer (in one
// fold, the earlier job's, then the earlier request's). The answers go
// through a temporary table on disk, so a fold of any size holds none of
// them in memory.
func (d *DB) foldLedger(ctx context.Context) error {
	return d.tx(ctx, func(tx *sql.Tx) error {
		var waiting bool
		if err := tx.QueryRowContext(ctx, sqliteStmts.q("ledger_fold_waiting")).Scan(&waiting); err != nil || !waiting {
			return err
		}
		if _, err := tx.ExecContext(ctx, sqliteStmts.q("ledger_fold_create")); err != nil {
			return fmt.Errorf("ledger: %w", err)
		}
		defer tx.ExecContext(context.WithoutCancel(ctx), sqliteStmts.q("ledger_fold_drop"))
		// An answer of three members is a request with a row, which has the
		// key; one of five (a paged plan's chunk: appendAnswers with its requests) names
		// its key, chunk and custom_id itself.
		if _, err := tx.ExecContext(ctx, sqliteStmts.q("ledger_fold_rows")); err != nil {
			return fmt.Errorf("ledger: %w", err)
		}
		if _, err := tx.ExecContext(ctx, sqliteStmts.q("ledger_fold_paged")); err != nil {
			return fmt.Errorf("ledger: %w", err)
		}
		if _, err := tx.ExecContext(ctx, sqliteStmts.q("ledger_fold_insert")); err != nil {
			return fmt.Errorf("ledger: %w", err)
		}
		if _, err := tx.ExecContext(ctx, sqliteStmts.q("ledger_fold_clear")); err != nil {
			return fmt.Errorf("ledger: %w", err)
		}
		return nil
	})
}

// canonicalKeys is jobs.canonical_keys of a job planned now (migration
// 0010): 1 unless sluice.PlanLegacyKeys.
func canonicalKeys() int {
	if sluice.PlanLegacyKeys() {
		return 0
	}
	return 1
}

// LegacyKeys implements splitter.LegacyKeySink: the ledger may hold
// answers under the keys of jobs planned before keys were canonical.
func (p *Plan) LegacyKeys() bool { return p.legacy && !p.ledgerEmpty }

// reuseBatch is how many keys one ledger query looks up.
const reuseBatch = 256

// LookupReuse looks keys up in the ledger, reuseBatch at a time, and calls
// fn with the index in keys of each key that has an answer in another job
// whose request and results are still recorded. Nothing is held in memory
// beyond one batch. It may be called while the plan's rows are being
// recorded.
func (p *Plan) LookupReuse(keys [][]byte, fn func(i int, h sluice.Answer) error) error {
	if p.ledgerEmpty {
		return nil // nothing to find: a first job, or none answered yet
	}
	return inBatches(keys, fn, p.lookupBatch)
}

// inBatches looks keys up reuseBatch at a time with lookup, calling fn
// with each answer's index in keys (both drivers' LookupReuse).
func inBatches(keys [][]byte, fn func(int, sluice.Answer) error, lookup func([][]byte, func(int, sluice.Answer) error) error) error {
	for off := 0; off < len(keys); off += reuseBatch {
		batch := keys[off:min(len(keys), off+reuseBatch)]
		if err := lookup(batch, func(i int, a sluice.Answer) error { return fn(off+i, a) }); err != nil {
			return err
		}
	}
	return nil
}

func (p *Plan) lookupBatch(keys [][]byte, fn func(int, sluice.Answer) error) error {
	idx := make(map[string]int, len(keys))
	args := make([]any, 0, len(keys)+1)
	for i, k := range keys {
		if _, dup := idx[string(k)]; !dup {
			idx[string(k)] = i // the first of equal keys gets the answer
		}
		args = append(args, k)
	}
	args = append(args, p.key)
	// On a connection of its own, not the plan's transaction: the plan's
	// rows are recorded, and its transactions committed, by another
	// goroutine meanwhile (WAL lets the read run beside them), and the
	// answers are all in other jobs' committed rows. A full batch's
	// statement is prepared once (parsing a 256-key join each time cost
	// more than running it).
	var rows *sql.Rows
	var err error
	if p.lookConn == nil {
		// A connection of the plan's own for lookups, with a small page
		// cache: the lookups read scattered pages once each.
		if p.lookConn, err = p.d.db.Conn(p.ctx); err != nil {
			return fmt.Errorf("ledger lookup: %w", err)
		}
		if _, err = p.lookConn.ExecContext(p.ctx, sqliteStmts.q("conn_small_cache")); err != nil {
			return fmt.Errorf("ledger lookup: %w", err)
		}
	}
	if len(keys) == reuseBatch {
		if p.lookup == nil {
			if p.lookup, err = p.lookConn.PrepareContext(p.ctx, lookupQuery(reuseBatch)); err != nil {
				return fmt.Errorf("ledger lookup: %w", err)
			}
		}
		rows, err = p.lookup.QueryContext(p.ctx, args...)
	} else {
		rows, err = p.lookConn.QueryContext(p.ctx, lookupQuery(len(keys)), args...)
	}
	if err != nil {
		return fmt.Errorf("ledger lookup: %w", err)
	}
	defer rows.Close()
	if err := scanAnswers(rows, idx, fn); err != nil {
		return err
	}
	return rows.Err()
}

// answerRows is what scanAnswers and scanSources read: database/sql's
// rows and pgx's.
type answerRows interface {
	Next() bool
	Scan(dest ...any) error
}

// scanAnswers hands fn each ledger row of a lookup (key, source job,
// results directory and path, custom_id, offset, length) whose key is still
// wanted in idx, once per key; both backends' lookups share it.
func scanAnswers(rows answerRows, idx map[string]int, fn func(int, sluice.Answer) error) error {
	for rows.Next() {
		var k []byte
		var dir, rel string
		var h sluice.Answer
		if err := rows.Scan(&k, &h.SourceJob, &dir, &rel, &h.CustomID, &h.Offset, &h.Length); err != nil {
			return err
		}
		i, ok := idx[string(k)]
		if !ok {
			continue
		}
		delete(idx, string(k))
		h.Results = filepath.Join(dir, rel)
		if err := fn(i, h); err != nil {
			return err
		}
	}
	return nil
}

// SetReused records, before Commit, that the plan's requests of chunk 0
// were answered from earlier jobs (sources: requests per source job): they
// are succeeded from the start.
func (p *Plan) SetReused(n int64, sources map[string]int64) error {
	if n == 0 {
		return nil
	}
	// A paged plan's chunk-0 requests are succeeded as they are (pages.go);
	// no request of it has a row yet.
	if _, err := p.tx.ExecContext(p.ctx, sqliteStmts.q("plan_set_reused"), n, p.job.ID); err != nil {
		return err
	}
	for src, k := range sources {
		if _, err := p.tx.ExecContext(p.ctx, sqliteStmts.q("plan_reuse_source"),
			p.job.ID, src, k); err != nil {
			return err
		}
	}
	p.job.Reused = n
	return nil
}

// ReuseSources returns how many of job's requests were answered from each
// earlier job.
func (c *core) ReuseSources(ctx context.Context, job string) (map[string]int64, error) {
	m := map[string]int64{}
	err := c.ex.query(ctx, c.stmts.q("reuse_sources"), func(row scanner) error {
		var s string
		var n int64
		if err := row.Scan(&s, &n); err != nil {
			return err
		}
		m[s] = n
		return nil
	}, job)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Learned returns, per model, what every finished batch in the state
// directory taught about the estimates (sluice.Learned).
func (c *core) Learned(ctx context.Context) (map[string]sluice.Learned, error) {
	m := map[string]sluice.Learned{}
	err := c.ex.query(ctx, c.stmts.q("learned"), func(row scanner) error {
		var model string
		var l sluice.Learned
		if err := row.Scan(&model, &l.EstTokens, &l.InputTokens, &l.OutputTokens); err != nil {
			return err
		}
		m[model] = l
		return nil
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// SetMaxCost records the spend cap of a job's latest run (nil: none).
func (c *core) SetMaxCost(ctx context.Context, job string, usd *float64) error {
	_, err := c.ex.exec(ctx, c.stmts.q("job_set_max_cost"), usd, job)
	return err
}

// MaxCost returns the spend cap of a job's latest run, or nil.
func (c *core) MaxCost(ctx context.Context, job string) (*float64, error) {
	var v *float64
	if err := c.ex.queryRow(ctx, c.stmts.q("job_max_cost"), job).Scan(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// lookupQuery finds the answers to n keys (then the plan's job key).
func lookupQuery(n int) string {
	return strings.Replace(sqliteStmts.q("ledger_lookup"), "(:keys)", in(n), 1)
}
