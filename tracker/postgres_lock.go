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
// it dies frees the job, as flock does on SQLite. A process that lives on
// while the connection drops (a server restart, a failover, a network cut)
// would lose it silently: the lock's watcher (postgres_lockwatch.go) sees
// the drop within pgLockCheckEvery, closes the lock's gate (Lock.Wait) and
// takes the lock back, and the lock's epoch (job_locks) fences every chunk
// write of this process against a run that took the job meanwhile.
func (p *Postgres) LockJob(job string) (*Lock, error) { return p.lockJob(job, false) }

// LockJobShared implements Backend: the job's advisory lock taken shared
// (pg_try_advisory_lock_shared) by each worker of the job (`sluice run
// --join`), on every machine that uses the database: any number of shared
// holders, none while LockJob's exclusive holder has it. Watched and
// fenced as LockJob's.
func (p *Postgres) LockJobShared(job string) (*Lock, error) { return p.lockJob(job, true) }

func (p *Postgres) lockJob(job string, shared bool) (*Lock, error) {
	ctx, cancel := context.WithTimeout(context.Background(), pgLockTimeout)
	defer cancel()
	conn, ok, err := p.advisoryConn(ctx, pgLockKey(job), shared)
	if err != nil {
		return nil, fmt.Errorf("lock job %s: %w", job, err)
	}
	if !ok {
		return nil, &LockedError{Job: job, PID: p.LockHolder(ctx, job)}
	}
	epoch, err := pgTakeEpoch(ctx, conn, job, shared)
	if err != nil {
		conn.Close(context.Background())
		return nil, fmt.Errorf("lock job %s: %w", job, p.wrap(err))
	}
	w := p.watchLock(job, shared, conn, epoch)
	return &Lock{watch: w, release: w.release}, nil
}

// pgTakeEpoch records a taking of job's lock in job_locks and returns the
// epoch this holder fences its writes with: an exclusive taking adds one
// (waiting, under the row's lock, for any write of an earlier holder in
// flight to commit or fail), a shared one reads it.
func pgTakeEpoch(ctx context.Context, conn *pgx.Conn, job string, shared bool) (int64, error) {
	var epoch int64
	if shared {
		if _, err := conn.Exec(ctx, pgStmts.q("lock_epoch_init"), job); err != nil {
			return 0, err
		}
		err := conn.QueryRow(ctx, pgStmts.q("lock_epoch"), job).Scan(&epoch)
		return epoch, err
	}
	err := conn.QueryRow(ctx, pgStmts.q("lock_epoch_next"), job).Scan(&epoch)
	return epoch, err
}

// TryLockPlan implements Backend: the job's plan lock, an advisory lock of
// its own (another key). On PostgreSQL it holds across machines, and the
// server frees it the moment the planner's connection drops (the plan role
// guards the plan beside it: lifecycle/worker.go).
func (p *Postgres) TryLockPlan(job string) (*Lock, bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), pgLockTimeout)
	defer cancel()
	key := pgLockKey("\x00plan\x00" + job)
	conn, ok, err := p.advisoryConn(ctx, key, false)
	if err != nil {
		return nil, false, fmt.Errorf("plan lock of job %s: %w", job, err)
	}
	if !ok {
		return nil, false, nil
	}
	return &Lock{release: func() error { return p.unlockConn(conn, key, false) }}, true, nil
}

// advisoryConn tries the session advisory lock key (shared or exclusive)
// on a new connection whose application_name carries this process's pid;
// ok is false when another session holds it. The lock lives as long as
// the connection: unlockConn, or the process's death.
func (p *Postgres) advisoryConn(ctx context.Context, key int64, shared bool) (conn *pgx.Conn, ok bool, err error) {
	cfg := p.cfg.ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = pgAppPrefix + strconv.Itoa(os.Getpid())
	conn, err = pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, false, p.connectError(err)
	}
	try := pgStmts.q("lock_try")
	if shared {
		try = pgStmts.q("lock_try_shared")
	}
	if err := conn.QueryRow(ctx, try, key).Scan(&ok); err != nil || !ok {
		conn.Close(context.Background())
		return nil, false, p.wrap(err)
	}
	return conn, true, nil
}

// unlockConn releases key on conn and closes it. Unlocked before the
// session closes, so that the lock is free when it returns (the server
// ends a closed session on its own time; closing it would release the
// lock too).
func (p *Postgres) unlockConn(conn *pgx.Conn, key int64, shared bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), pgLockTimeout)
	defer cancel()
	unlock := pgStmts.q("lock_unlock")
	if shared {
		unlock = pgStmts.q("lock_unlock_shared")
	}
	_, err := conn.Exec(ctx, unlock, key)
	if cerr := conn.Close(ctx); err == nil {
		err = cerr
	}
	return p.wrap(err)
}

// LockHolder implements Backend: the pid in the application_name of the
// session holding the job's advisory lock, or 0.
func (p *Postgres) LockHolder(ctx context.Context, job string) int {
	k := uint64(pgLockKey(job))
	var app string
	err := p.pool.QueryRow(ctx, pgStmts.q("lock_holder"),
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
