package tracker

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluice-batch/sluice"
)

// SetSummary records what the last merge of a job produced, replacing the
// summary of an earlier merge.
func (c *core) SetSummary(ctx context.Context, job string, s *sluice.JobSummary) error {
	return setSummary(ctx, c.ex, c.stmts, job, s)
}

func setSummary(ctx context.Context, ex executor, st statements, job string, s *sluice.JobSummary) error {
	_, err := ex.exec(ctx, st.q("summary_set"),
		job, s.Output, s.Errors, s.Order, s.OutputBytes, ns(s.OutputMTime), s.ErrorsBytes, s.Lines, s.Succeeded,
		s.Failed, s.Retried, s.Batches, s.RetryBatches, s.InputTokens, s.OutputTokens, s.Cancelled,
		ns(s.StartedAt), ns(s.FinishedAt))
	if err != nil {
		return fmt.Errorf("job %s: record summary: %w", job, err)
	}
	return nil
}

// FinishJob moves a job from merging to done (guarded) and records what
// its merge produced, in one transaction.
func (c *core) FinishJob(ctx context.Context, job string, s *sluice.JobSummary) error {
	return c.drv.inTx(ctx, func(ex executor) error {
		if err := c.setJobState(ctx, ex, job, sluice.JobMerging, sluice.JobDone); err != nil {
			return err
		}
		return setSummary(ctx, ex, c.stmts, job, s)
	})
}

// Summary returns what the last merge of a job produced, or nil when the
// job was never merged.
func (c *core) Summary(ctx context.Context, job string) (*sluice.JobSummary, error) {
	var s sluice.JobSummary
	var mtime, started, finished int64
	err := c.ex.queryRow(ctx, c.stmts.q("summary_get"), job).Scan(&s.Output, &s.Errors, &s.Order,
		&s.OutputBytes, &mtime, &s.ErrorsBytes, &s.Lines, &s.Succeeded, &s.Failed, &s.Retried, &s.Batches,
		&s.RetryBatches, &s.InputTokens, &s.OutputTokens, &s.Cancelled, &started, &finished)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	s.OutputMTime, s.StartedAt, s.FinishedAt = fromNS(mtime), fromNS(started), fromNS(finished)
	return &s, nil
}

// The files sluice kept in a job's directory before migration 0004 put
// their facts in the database.
const (
	legacySummaryFile   = "summary.json" // a JSON sluice.JobSummary
	legacyCancelledFile = "cancelled"    // the cancel time, RFC 3339
)

// importJobFiles is the Go half of migration 0004, in its transaction: each
// job's cancelled marker and summary.json become its cancel_requested_at
// and its job_summaries row. A file that cannot be read or parsed is left
// out (a summary is rebuilt from the tracker by status; a cancel marker
// without a time is dated by the file's modification time). The files are
// left where they are; nothing reads them any more.
func importJobFiles(ctx context.Context, tx *sql.Tx) error {
	rows, err := tx.QueryContext(ctx, sqliteStmts.q("import_jobs"))
	if err != nil {
		return err
	}
	type job struct{ id, dir string }
	var jobs []job
	for rows.Next() {
		var j job
		if err := rows.Scan(&j.id, &j.dir); err != nil {
			rows.Close()
			return err
		}
		jobs = append(jobs, j)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, j := range jobs {
		if at, ok := legacyCancelTime(filepath.Join(j.dir, legacyCancelledFile)); ok {
			if _, err := tx.ExecContext(ctx, sqliteStmts.q("import_cancel_at"), at.UnixNano(), j.id); err != nil {
				return err
			}
		}
		b, err := os.ReadFile(filepath.Join(j.dir, legacySummaryFile))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		var s sluice.JobSummary
		if err != nil || json.Unmarshal(b, &s) != nil || s.Output == "" {
			continue // unreadable: status rebuilds a summary from the tracker
		}
		if err := setSummary(ctx, sqliteExec{tx}, dialect("sqlite"), j.id, &s); err != nil {
			return err
		}
	}
	return nil
}

// legacyCancelTime reads a cancel marker: the time written in it, else its
// modification time.
func legacyCancelTime(path string) (time.Time, bool) {
	st, err := os.Stat(path)
	if err != nil {
		return time.Time{}, false
	}
	if b, err := os.ReadFile(path); err == nil {
		if t, err := time.Parse(time.RFC3339, strings.TrimSpace(string(b))); err == nil {
			return t, true
		}
	}
	return st.ModTime(), true
}
