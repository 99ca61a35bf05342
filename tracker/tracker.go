// Package tracker is sluice's SQLite store: jobs, chunks and one row per
// request, guarded state transitions, and a per-job lock that the kernel
// frees when the process dies.
package tracker

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/mattn/go-sqlite3"

	"github.com/sluice-batch/sluice/migrations"
)

// DBName is the database file's name inside the state directory.
const DBName = "sluice.db"

// ErrConflict is returned when a guarded transition finds the row in another
// state than expected: someone else moved it, or the caller's view is stale.
var ErrConflict = errors.New("state changed under us")

// ErrNotFound is returned when a job or chunk does not exist.
var ErrNotFound = errors.New("not found")

// DB is the tracker's database in one state directory.
type DB struct {
	core // the rules (driver.go), over this driver
	db   *sql.DB
	busy time.Duration
}

// Open opens (creating if needed) the state directory and its database,
// private to the user, with WAL and foreign keys on, and applies pending
// migrations.
func Open(ctx context.Context, dir string) (*DB, error) {
	return OpenOptions(ctx, dir, Options{})
}

// DefaultBusyTimeout is how long a statement waits for another process's
// write lock on the database before failing, unless Options say otherwise.
const DefaultBusyTimeout = 15 * time.Second

// Options tune a DB. The zero value is the default.
type Options struct {
	// BusyTimeout is how long a statement waits for another process's
	// write lock; 0 means DefaultBusyTimeout. (The command takes it from
	// $SLUICE_DB_BUSY_TIMEOUT: the tracker reads no environment.)
	BusyTimeout time.Duration
}

// OpenOptions is Open with options.
func OpenOptions(ctx context.Context, dir string, o Options) (*DB, error) {
	ms, err := migrations.All()
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return open(ctx, dir, ms, o)
}

// OpenWith is Open with a given set of migrations (tests).
func OpenWith(ctx context.Context, dir string, ms []migrations.Migration) (*DB, error) {
	return open(ctx, dir, ms, Options{})
}

func open(ctx context.Context, dir string, ms []migrations.Migration, o Options) (*DB, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create state directory: %w", err)
	}
	path := filepath.Join(dir, DBName)
	// Create the file ourselves so it is 0600 from the first byte.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	f.Close()
	if err := os.Chmod(path, 0o600); err != nil {
		return nil, err
	}
	busy := o.BusyTimeout
	if busy <= 0 {
		busy = DefaultBusyTimeout
	}
	dsn := fmt.Sprintf("file:%s?_journal_mode=WAL&_foreign_keys=on&_busy_timeout=%d&_synchronous=NORMAL&_txlock=immediate&_cache_size=-32768",
		path, busy.Milliseconds())
	sdb, err := sql.Open("sqlite3", dsn)
	if err != nil {
		return nil, err
	}
	d := &DB{db: sdb, busy: busy}
	d.core = core{ex: sqliteExec{sdb}, drv: d, stmts: dialect("sqlite"), dir: dir, now: time.Now}
	if err := d.applyRetrying(ctx, ms); err != nil {
		sdb.Close()
		return nil, d.LockedHint(err)
	}
	return d, nil
}

// applyRetrying applies the migrations, starting again while another
// process holds the database for up to the busy timeout. Processes that
// open one fresh database at the same moment (workers started together)
// meet SQLite's busy answers that its busy handler does not wait out: the
// switch to WAL takes an exclusive lock, and a statement whose read
// snapshot went stale under another's write cannot wait for it
// (SQLITE_BUSY_SNAPSHOT). Each attempt is whole, so starting again is safe:
// every migration checks, under the write lock, whether it was applied.
func (d *DB) applyRetrying(ctx context.Context, ms []migrations.Migration) error {
	deadline := time.Now().Add(d.busy)
	wait := 5 * time.Millisecond
	for {
		err := d.apply(ctx, ms)
		if err == nil || !isBusy(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait + time.Duration(rand.Int64N(int64(wait)))):
		}
		wait = min(2*wait, 200*time.Millisecond)
	}
}

// isBusy reports whether err is SQLite's "database is locked" or "table is
// locked".
func isBusy(err error) bool {
	var se sqlite3.Error
	return errors.As(err, &se) && (se.Code == sqlite3.ErrBusy || se.Code == sqlite3.ErrLocked)
}

// SQL exposes the database for read-only inspection in tests and status.
func (d *DB) SQL() *sql.DB { return d.db }

// Close closes the database.
func (d *DB) Close() error { return d.db.Close() }

// LockedHint explains SQLite's "database is locked" in err, if it is that.
func (d *DB) LockedHint(err error) error {
	if isBusy(err) {
		return fmt.Errorf("the state database %s is locked by another process (waited %s; set SLUICE_DB_BUSY_TIMEOUT to wait longer): %w",
			filepath.Join(d.dir, DBName), d.busy, err)
	}
	return err
}

func (d *DB) apply(ctx context.Context, ms []migrations.Migration) error {
	if _, err := d.db.ExecContext(ctx, sqliteStmts.q("migrate_table")); err != nil {
		return fmt.Errorf("create schema_version: %w", err)
	}
	done := map[int]bool{}
	rows, err := d.db.QueryContext(ctx, sqliteStmts.q("migrate_versions"))
	if err != nil {
		return err
	}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return err
		}
		done[v] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	known := map[int]bool{}
	for _, m := range ms {
		known[m.Version] = true
	}
	for v := range done {
		if !known[v] {
			return fmt.Errorf("database schema version %d is newer than this sluice knows: upgrade sluice", v)
		}
	}
	// Every migration not recorded yet, in version order (see package
	// migrations: versions may land out of order).
	for _, m := range ms {
		if done[m.Version] {
			continue
		}
		if err := d.tx(ctx, func(tx *sql.Tx) error {
			// Another process opening the same database at the same moment
			// (workers started at once) may have applied it since we looked:
			// the transaction holds the write lock, so this look is final.
			var n int
			if err := tx.QueryRowContext(ctx, sqliteStmts.q("migrate_applied"), m.Version).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				return nil
			}
			if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
				return err
			}
			if step := goSteps[m.Version]; step != nil {
				if err := step(ctx, tx); err != nil {
					return err
				}
			}
			_, err := tx.ExecContext(ctx, sqliteStmts.q("migrate_record"),
				m.Version, m.Name, d.now().Unix())
			return err
		}); err != nil {
			return fmt.Errorf("apply migration %s: %w", m.Name, err)
		}
	}
	return nil
}

// goSteps are the parts of migrations that SQL cannot do, by version: each
// runs after its migration's SQL, in the same transaction.
var goSteps = map[int]func(context.Context, *sql.Tx) error{
	4: importJobFiles, // 0004_facts.sql: the job directory's marker files
}

// inTx implements dbDriver.
func (d *DB) inTx(ctx context.Context, fn func(executor) error) error {
	return d.tx(ctx, func(tx *sql.Tx) error { return fn(sqliteExec{tx}) })
}

// chunkWritten implements dbDriver: SQLite's job lock is a file lock the
// kernel frees with its process, and its writers take turns: no fence.
func (d *DB) chunkWritten(context.Context, executor, string) error { return nil }

// tx runs fn in a transaction, committing when it returns nil.
func (d *DB) tx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// IntegrityCheck runs PRAGMA integrity_check and returns its verdict.
func (d *DB) IntegrityCheck(ctx context.Context) error {
	var s string
	if err := d.db.QueryRowContext(ctx, sqliteStmts.q("integrity_check")).Scan(&s); err != nil {
		return err
	}
	if s != "ok" {
		return fmt.Errorf("integrity check: %s", s)
	}
	return nil
}

func ns(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNS(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}
