package tracker

import (
	"context"
	"embed"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The tracker is its rules written once (core: the guarded transitions of
// jobs and chunks, the worker leases, the summary and the money facts, the
// notification outbox, the realtime fallback's calls) over a driver per
// database (river's riverdriver, riversqlite, riverpgxv5): *DB for SQLite
// (database/sql and mattn/go-sqlite3) and *Postgres for PostgreSQL (pgx/v5).
// A driver holds only what differs: how a statement runs and a
// transaction is taken, the dialect (placeholders), the locks, and the
// request records, whose layouts differ (SQLite's pages and row ranges,
// PostgreSQL's partitions and COPY).
//
// The statements are in .sql files (sql/), one named statement each:
// sql/shared.sql holds those both databases read the same way, written
// with ? placeholders, and sql/sqlite.sql and sql/postgres.sql the ones a
// database writes its own way (a statement of the same name there
// replaces the shared one). PostgreSQL's driver numbers the ? placeholders
// ($1, $2, ...) as it runs a statement; its own statements may be written
// numbered already, and name {part}, a job's partition of requests
// (Postgres.partQ). What stays in Go is transaction control, session
// settings and a partition's DDL with its computed bounds.
// TestStatementsNamedInGoExist checks that every name the code runs is
// in the files.

//go:embed sql/*.sql
var sqlFiles embed.FS

// scanner is a row to read: *sql.Row, *sql.Rows, pgx.Row, pgx.Rows.
type scanner interface{ Scan(dest ...any) error }

// executor runs statements (written with ? placeholders) on a database,
// in a transaction or not. A row not found reads as sql.ErrNoRows on
// either driver (pgx.ErrNoRows wraps it).
type executor interface {
	exec(ctx context.Context, q string, args ...any) (int64, error)
	queryRow(ctx context.Context, q string, args ...any) scanner
	// query calls each for every row.
	query(ctx context.Context, q string, each func(scanner) error, args ...any) error
}

// collect runs query q and returns its rows, each read by scan.
func collect[T any](ctx context.Context, ex executor, q string, scan func(scanner) (T, error), args ...any) ([]T, error) {
	var out []T
	err := ex.query(ctx, q, func(row scanner) error {
		v, err := scan(row)
		if err != nil {
			return err
		}
		out = append(out, v)
		return nil
	}, args...)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// dbDriver is what the rules need of a database beyond running statements.
type dbDriver interface {
	// inTx runs fn in a transaction, committing when it returns nil.
	inTx(ctx context.Context, fn func(executor) error) error
	// claim leases the row of table (chunk_leases, job_roles) keyed (job,
	// key) to worker until until, if it is free, expired (at now) or
	// worker's own: the locking differs (leases.go).
	claim(ctx context.Context, table, job string, key any, worker string, now, until time.Time) (bool, error)
	// chunkWritten runs in the transaction of every write of a chunk of
	// job, after it (PostgreSQL fences it by the job lock's epoch).
	chunkWritten(ctx context.Context, ex executor, job string) error
}

// core is the tracker's rules over a driver; *DB and *Postgres embed it.
type core struct {
	ex    executor // outside any transaction
	drv   dbDriver
	stmts statements
	dir   string
	now   func() time.Time
}

// Dir implements Backend: the local state directory.
func (c *core) Dir() string { return c.dir }

// SetClock replaces the clock (tests).
func (c *core) SetClock(now func() time.Time) { c.now = now }

// sqliteStmts are SQLite's statements, for the SQLite driver's functions
// that run without a *DB (inside its transactions and snapshots).
var sqliteStmts = dialect("sqlite")

// pgStmts are PostgreSQL's, likewise (its locks' connections).
var pgStmts = dialect("postgres")

// statements are one dialect's statements by name.
type statements map[string]string

// q returns the named statement; a name no file holds is a bug of this
// package (every statement is run by the conformance suite).
func (s statements) q(name string) string {
	q, ok := s[name]
	if !ok {
		panic("tracker: no statement " + name)
	}
	return q
}

var (
	dialectsOnce sync.Once
	dialects     map[string]statements
	dialectsErr  error
)

// dialect returns the statements of "sqlite" or "postgres": the shared
// ones, each replaced by the dialect's own of the same name.
func dialect(name string) statements {
	dialectsOnce.Do(func() {
		dialects = map[string]statements{}
		shared, err := parseStatements("sql/shared.sql")
		if err != nil {
			dialectsErr = err
			return
		}
		for _, d := range []string{"sqlite", "postgres"} {
			own, err := parseStatements("sql/" + d + ".sql")
			if err != nil {
				dialectsErr = err
				return
			}
			s := statements{}
			for k, v := range shared {
				s[k] = v
			}
			for k, v := range own {
				s[k] = v
			}
			dialects[d] = s
		}
	})
	if dialectsErr != nil {
		panic(dialectsErr) // embedded files: a bug of this package
	}
	return dialects[name]
}

// parseStatements reads a file of statements, each after a line
// "-- name: NAME" (sqlc's form), up to the next such line; a trailing ;
// is dropped, other comment lines are kept out.
func parseStatements(path string) (statements, error) {
	b, err := sqlFiles.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s := statements{}
	var name string
	var body []string
	flush := func() error {
		if name == "" {
			return nil
		}
		q := strings.TrimSuffix(strings.TrimSpace(strings.Join(body, "\n")), ";")
		if q == "" {
			return fmt.Errorf("%s: statement %s is empty", path, name)
		}
		if _, dup := s[name]; dup {
			return fmt.Errorf("%s: statement %s twice", path, name)
		}
		s[name] = q
		return nil
	}
	for _, line := range strings.Split(string(b), "\n") {
		t := strings.TrimSpace(line)
		if n, ok := strings.CutPrefix(t, "-- name:"); ok {
			if err := flush(); err != nil {
				return nil, err
			}
			name, body = strings.Fields(n)[0], nil
			continue
		}
		if strings.HasPrefix(t, "--") || name == "" {
			continue
		}
		body = append(body, line)
	}
	return s, flush()
}

// numbered rewrites a statement's ? placeholders as $1, $2, ...
// (PostgreSQL's), outside quoted text.
func numbered(q string) string {
	var b strings.Builder
	n := 0
	quote := rune(0)
	for _, r := range q {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '?':
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// in is a list of n placeholders, for IN.
func in(n int) string { return "(" + strings.TrimSuffix(strings.Repeat("?, ", n), ", ") + ")" }
