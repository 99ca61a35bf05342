package tracker

import (
	"context"
	"database/sql"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// sqlQuerier is what runs statements in database/sql: *sql.DB, *sql.Tx,
// *sql.Conn.
type sqlQuerier interface {
	ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
}

// sqliteExec is an executor on SQLite: the statements run as written.
type sqliteExec struct{ q sqlQuerier }

func (e sqliteExec) exec(ctx context.Context, q string, args ...any) (int64, error) {
	res, err := e.q.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (e sqliteExec) queryRow(ctx context.Context, q string, args ...any) scanner {
	return e.q.QueryRowContext(ctx, q, args...)
}

func (e sqliteExec) query(ctx context.Context, q string, each func(scanner) error, args ...any) error {
	rows, err := e.q.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// pgQuerierAll is what runs statements in pgx: *pgxpool.Pool, pgx.Tx,
// *pgx.Conn.
type pgQuerierAll interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// pgExec is an executor on PostgreSQL: placeholders numbered, errors
// scrubbed of the password (Postgres.wrap).
type pgExec struct {
	q    pgQuerierAll
	wrap func(error) error
}

// pgNumbered caches numbered statements: the rules' statements are a few
// dozen texts, run many times.
var pgNumbered sync.Map

func pgText(q string) string {
	if t, ok := pgNumbered.Load(q); ok {
		return t.(string)
	}
	t := numbered(q)
	pgNumbered.Store(q, t)
	return t
}

func (e pgExec) exec(ctx context.Context, q string, args ...any) (int64, error) {
	tag, err := e.q.Exec(ctx, pgText(q), args...)
	if err != nil {
		return 0, e.wrap(err)
	}
	return tag.RowsAffected(), nil
}

func (e pgExec) queryRow(ctx context.Context, q string, args ...any) scanner {
	return pgRow{e.q.QueryRow(ctx, pgText(q), args...), e.wrap}
}

type pgRow struct {
	row  pgx.Row
	wrap func(error) error
}

func (r pgRow) Scan(dest ...any) error { return r.wrap(r.row.Scan(dest...)) }

func (e pgExec) query(ctx context.Context, q string, each func(scanner) error, args ...any) error {
	rows, err := e.q.Query(ctx, pgText(q), args...)
	if err != nil {
		return e.wrap(err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows); err != nil {
			return err
		}
	}
	return e.wrap(rows.Err())
}
