package tracker

import (
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgLockTimeout bounds taking or inspecting a job's lock.
const pgLockTimeout = 30 * time.Second

// pgLockKey is the advisory lock key of a job: a 64-bit hash of its id in
// a namespace of sluice's own.
func pgLockKey(job string) int64 {
	h := fnv.New64a()
	h.Write([]byte("sluice job\x00" + job))
	return int64(h.Sum64())
}

// pgAppPrefix starts the application_name of a lock's connection; the pid
// follows, so that LockHolder and a refused LockJob can name the holder.
const pgAppPrefix = "sluice lock pid "

// LockJob implements Backend: a session advisory lock
// (pg_try_advisory_lock) held on a connection of its own. The server
// releases it when that connection drops, so a process that dies however
// it dies frees the job, as flock does on SQLite.
func (p *Postgres) LockJob(job string) (*Lock, error) {
	l, ok, err := p.advisoryLock(pgLockKey(job), false)
	if err != nil {
		return nil, fmt.Errorf("lock job %s: %w", job, err)
	}
	if !ok {
		ctx, cancel := context.WithTimeout(context.Background(), pgLockTimeout)
		defer cancel()
		return nil, &LockedError{Job: job, PID: p.LockHolder(ctx, job)}
	}
	return l, nil
}

// LockJobShared implements Backend: the job's advisory lock taken shared
// (pg_try_advisory_lock_shared) by each worker of the job (`sluice run
// --join`), on every machine that uses the database: any number of shared
// holders, none while LockJob's exclusive holder has it.
func (p *Postgres) LockJobShared(job string) (*Lock, error) {
	l, ok, err := p.advisoryLock(pgLockKey(job), true)
	if err != nil {
		return nil, fmt.Errorf("lock job %s: %w", job, err)
	}
	if !ok {
		ctx, cancel := context.WithTimeout(context.Background(), pgLockTimeout)
		defer cancel()
		return nil, &LockedError{Job: job, PID: p.LockHolder(ctx, job)}
	}
	return l, nil
}

// TryLockPlan implements Backend: the job's plan lock, an advisory lock of
// its own (another key). On PostgreSQL it holds across machines, and the
// server frees it the moment the planner's connection drops.
func (p *Postgres) TryLockPlan(job string) (*Lock, bool, error) {
	l, ok, err := p.advisoryLock(pgLockKey("\x00plan\x00"+job), false)
	if err != nil {
		return nil, false, fmt.Errorf("plan lock of job %s: %w", job, err)
	}
	return l, ok, nil
}

// advisoryLock tries the session advisory lock key (shared or exclusive)
// on a new connection whose application_name carries this process's pid;
// ok is false when another session holds it. The lock lives as long as
// the connection: Unlock, or the process's death.
func (p *Postgres) advisoryLock(key int64, shared bool) (l *Lock, ok bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), pgLockTimeout)
	defer cancel()
	cfg := p.cfg.ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = pgAppPrefix + strconv.Itoa(os.Getpid())
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, false, p.connectError(err)
	}
	try, unlock := `SELECT pg_try_advisory_lock($1)`, `SELECT pg_advisory_unlock($1)`
	if shared {
		try, unlock = `SELECT pg_try_advisory_lock_shared($1)`, `SELECT pg_advisory_unlock_shared($1)`
	}
	if err := conn.QueryRow(ctx, try, key).Scan(&ok); err != nil || !ok {
		conn.Close(ctx)
		return nil, false, p.wrap(err)
	}
	return &Lock{release: func() error {
		// Unlocked before the session closes, so that the lock is free when
		// Unlock returns (the server ends a closed session on its own time;
		// closing it would release the lock too).
		ctx, cancel := context.WithTimeout(context.Background(), pgLockTimeout)
		defer cancel()
		_, err := conn.Exec(ctx, unlock, key)
		if cerr := conn.Close(ctx); err == nil {
			err = cerr
		}
		return p.wrap(err)
	}}, true, nil
}

// LockHolder implements Backend: the pid in the application_name of the
// session holding the job's advisory lock, or 0.
func (p *Postgres) LockHolder(ctx context.Context, job string) int {
	k := uint64(pgLockKey(job))
	var app string
	err := p.pool.QueryRow(ctx, `SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
			AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
			AND l.classid::bigint = $1 AND l.objid::bigint = $2 LIMIT 1`,
		int64(k>>32), int64(k&0xffffffff)).Scan(&app)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimPrefix(app, pgAppPrefix))
	if err != nil || !strings.HasPrefix(app, pgAppPrefix) {
		return 0
	}
	return pid
}
