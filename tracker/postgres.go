package tracker

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluice-batch/sluice/migrations"
)

// Postgres is the tracker in a PostgreSQL database (--db postgres://...;
// docs/scale-out.md, "PostgreSQL"): the same Backend contract as *DB, with
// its own numbered migrations (migrations/postgres), request rows written
// with COPY, and per-job locks that are session advisory locks.
type Postgres struct {
	core // the rules (driver.go), over this driver
	pool *pgxpool.Pool
	cfg  *pgxpool.Config
	desc string // the DSN with its password redacted
	pw   string // the password, to scrub from errors

	// fences are the watched job locks this process holds, by job: every
	// chunk write of such a job is fenced by its lock's epoch
	// (postgres_lockwatch.go).
	fenceMu sync.Mutex
	fences  map[string]*pgLockWatch
}

// IsPostgresDSN reports whether s names a PostgreSQL database: a
// postgres:// or postgresql:// URL.
func IsPostgresDSN(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// pgDefaultMaxConns is the pool's size unless the DSN sets pool_max_conns:
// the dispatcher's concurrent calls each hold a connection while they
// write.
const pgDefaultMaxConns = 16

// pgConnectTimeout bounds each connection attempt unless the DSN sets
// connect_timeout, so an unreachable server fails in seconds.
const pgConnectTimeout = 10 * time.Second

// OpenPostgres connects to the database dsn names, checks that it can be
// used (reachable, credentials accepted), brings its schema up to date
// and refuses a schema newer than this binary knows. dir is the local
// state directory for job files.
func OpenPostgres(ctx context.Context, dsn, dir string) (*Postgres, error) {
	ms, err := migrations.Postgres()
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return OpenPostgresWith(ctx, dsn, dir, ms)
}

// OpenPostgresWith is OpenPostgres with a given set of migrations (tests).
func OpenPostgresWith(ctx context.Context, dsn, dir string, ms []migrations.Migration) (*Postgres, error) {
	desc := RedactDSN(dsn)
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("--db %s: %s", desc, scrub(err.Error(), dsnPassword(dsn)))
	}
	pw := cfg.ConnConfig.Password
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = pgConnectTimeout
	}
	if !strings.Contains(dsn, "pool_max_conns") {
		cfg.MaxConns = pgDefaultMaxConns
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = "sluice"
	}
	// The state directory is not created here: status only reads, and a
	// job's directory is made (with its parents, 0700) when it is planned.
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("--db %s: %s", desc, scrub(err.Error(), pw))
	}
	p := &Postgres{pool: pool, cfg: cfg, desc: desc, pw: pw}
	p.core = core{ex: pgExec{pool, p.wrap}, drv: p, stmts: dialect("postgres"), dir: dir, now: time.Now}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, p.connectError(err)
	}
	if err := p.migrate(ctx, ms); err != nil {
		pool.Close()
		return nil, p.wrap(err)
	}
	return p, nil
}

// connectError says why the database cannot be used, naming it without
// its password.
func (p *Postgres) connectError(err error) error {
	var pe *pgconn.PgError
	why := "cannot connect"
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "28P01" || pe.Code == "28000":
			why = "refused the credentials"
		case pe.Code == "3D000":
			why = "does not exist (create it first, e.g. createdb)"
		}
	} else if host := p.cfg.ConnConfig.Host; host != "" {
		why = fmt.Sprintf("cannot connect to %s:%d", host, p.cfg.ConnConfig.Port)
	}
	return &pgError{msg: fmt.Sprintf("database %s %s: %s", p.desc, why, scrub(err.Error(), p.pw)), err: err}
}

// wrap scrubs the password out of err's text, keeping err for errors.Is.
func (p *Postgres) wrap(err error) error {
	if err == nil || p.pw == "" || !strings.Contains(err.Error(), p.pw) {
		return err
	}
	return &pgError{msg: scrub(err.Error(), p.pw), err: err}
}

// pgError is an error whose text had the password scrubbed out.
type pgError struct {
	msg string
	err error
}

func (e *pgError) Error() string { return e.msg }
func (e *pgError) Unwrap() error { return e.err }

func scrub(s, pw string) string {
	if pw == "" {
		return s
	}
	return strings.ReplaceAll(s, pw, "xxxxx")
}

var kvPassword = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)

// RedactDSN returns dsn with any password replaced by xxxxx, for errors,
// logs and status.
func RedactDSN(dsn string) string {
	if strings.Contains(dsn, "://") {
		u, err := url.Parse(dsn)
		if err != nil {
			// Unparseable: keep the scheme and nothing that could be secret.
			return dsn[:strings.Index(dsn, "://")+3] + "..."
		}
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
		q := u.Query()
		if q.Has("password") {
			q.Set("password", "xxxxx")
			u.RawQuery = q.Encode()
		}
		return u.String()
	}
	return kvPassword.ReplaceAllString(dsn, "${1}xxxxx")
}

// dsnPassword is the password in dsn, if one can be found without
// parsing it as pgx does (for errors of a DSN pgx cannot parse).
func dsnPassword(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		pw, _ := u.User.Password()
		return pw
	}
	return ""
}

// Describe implements Backend.
func (p *Postgres) Describe() string { return "postgres " + p.desc }

// Close implements Backend.
func (p *Postgres) Close() error {
	p.pool.Close()
	return nil
}

// Pool exposes the database for inspection in tests.
func (p *Postgres) Pool() *pgxpool.Pool { return p.pool }

// pgMigrateLock is the advisory lock key that serialises migrations
// between processes opening the same database at once.
const pgMigrateLock = 0x736c756963650001 // "sluice" 1

// migrate applies every migration not recorded in schema_migrations, each
// in its own transaction under an advisory lock, and refuses a database
// that records a version this binary does not know.
func (p *Postgres) migrate(ctx context.Context, ms []migrations.Migration) error {
	known := map[int]bool{}
	for _, m := range ms {
		known[m.Version] = true
	}
	step := func(m *migrations.Migration) (bool, error) {
		applied := false
		err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, pgStmts.q("migrate_lock"), int64(pgMigrateLock)); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, pgStmts.q("migrate_table")); err != nil {
				return fmt.Errorf("create schema_migrations: %w", err)
			}
			rows, err := tx.Query(ctx, pgStmts.q("migrate_versions"))
			if err != nil {
				return err
			}
			done, err := pgx.CollectRows(rows, pgx.RowTo[int32])
			if err != nil {
				return err
			}
			for _, v := range done {
				if !known[int(v)] {
					return fmt.Errorf("database schema version %d is newer than this sluice knows: upgrade sluice", v)
				}
				if m != nil && int(v) == m.Version {
					return nil // another process applied it meanwhile
				}
			}
			if m == nil {
				return nil
			}
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return fmt.Errorf("apply migration postgres/%s: %w", m.Name, err)
			}
			if _, err := tx.Exec(ctx, pgStmts.q("migrate_record"),
				m.Version, m.Name, p.now().Unix()); err != nil {
				return err
			}
			applied = true
			return nil
		})
		return applied, err
	}
	// First a check alone: a newer schema is refused before anything.
	if _, err := step(nil); err != nil {
		return err
	}
	for i := range ms {
		if _, err := step(&ms[i]); err != nil {
			return err
		}
	}
	return nil
}

// tx runs fn in a transaction, committing when it returns nil.
func (p *Postgres) tx(ctx context.Context, fn func(pgx.Tx) error) error {
	return p.wrap(pgx.BeginFunc(ctx, p.pool, fn))
}

// inTx implements dbDriver.
func (p *Postgres) inTx(ctx context.Context, fn func(executor) error) error {
	return p.tx(ctx, func(tx pgx.Tx) error { return fn(pgExec{tx, p.wrap}) })
}

// chunkWritten implements dbDriver: a chunk write of a job whose lock this
// process holds is fenced by the lock's epoch (postgres_lockwatch.go).
func (p *Postgres) chunkWritten(ctx context.Context, ex executor, job string) error {
	return p.fence(ctx, ex.(pgExec).q, job)
}

// pgPartition is the table of the request rows of the job with this key,
// a partition of requests (migrations/postgres/0001_init.sql).
func pgPartition(key int64) string { return fmt.Sprintf("requests_j%d", key) }

// partQ is the named statement over the partition of the job with key
// key ({part} in sql/postgres.sql).
func (p *Postgres) partQ(name string, key int64) string {
	return strings.ReplaceAll(p.stmts.q(name), "{part}", pgPartition(key))
}

type pgQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// pgJobKey returns the key of job; ok is false when there is no such job
// (a job deleted between two statements reads as empty, as on SQLite).
func pgJobKey(ctx context.Context, q pgQuerier, job string) (key int64, ok bool, err error) {
	err = q.QueryRow(ctx, pgStmts.q("job_key"), job).Scan(&key)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	return key, err == nil, err
}

// DeleteJob implements Backend. The job's request rows are its partition,
// dropped; its chunks, errors, summary and reuse sources go by ON DELETE
// CASCADE; its ledger entries are a range of ids.
func (p *Postgres) DeleteJob(ctx context.Context, id string) error {
	return p.tx(ctx, func(tx pgx.Tx) error {
		key, ok, err := pgJobKey(ctx, tx, id)
		if err != nil || !ok {
			return err
		}
		if _, err := tx.Exec(ctx, p.stmts.q("job_delete_ledger"),
			requestID(key, 0), requestID(key, maxOrdinal)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, p.partQ("job_drop_partition", key)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, pgText(p.stmts.q("job_drop_leases")), id); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, pgText(p.stmts.q("job_delete")), id)
		return err
	})
}
