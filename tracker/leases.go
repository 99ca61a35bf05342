package tracker

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-batch/sluice"
)

// Leases let several workers drive one job (docs/scale-out.md, "Many
// workers"). A chunk's next step, and each single-holder role of a job
// (sluice.RolePlan, sluice.RoleMerge), is held by one worker until its
// lease expires; the holder's heartbeat pushes every lease it holds
// forward, so a worker that dies loses them one time-to-live after its
// last heartbeat, and another worker takes over from the chunk's recorded
// state, as a re-run does.
//
// The rules are here, once; a claim's locking is the driver's (claim):
// on SQLite one guarded statement, an insert that, when the row is there,
// updates it only if its lease expired or is the claimer's own; on
// PostgreSQL a read of the row FOR UPDATE SKIP LOCKED, so that no claim
// waits for another in flight (sql/sqlite.sql, sql/postgres.sql).

// RegisterWorker records w as a worker of job (again, if it was: its
// start and heartbeat are refreshed). Zero times are now.
func (c *core) RegisterWorker(ctx context.Context, job string, w sluice.Worker) error {
	now := c.now()
	if w.Started.IsZero() {
		w.Started = now
	}
	if w.Heartbeat.IsZero() {
		w.Heartbeat = now
	}
	_, err := c.ex.exec(ctx, c.stmts.q("worker_register"), job, w.ID, w.Host, w.PID, ns(w.Started), ns(w.Heartbeat))
	if err != nil {
		return fmt.Errorf("register worker %s of job %s: %w", w.ID, job, err)
	}
	return nil
}

// execAll runs the named statements with args in one transaction.
func (c *core) execAll(ctx context.Context, names []string, args ...any) error {
	return c.drv.inTx(ctx, func(ex executor) error {
		for _, name := range names {
			if _, err := ex.exec(ctx, c.stmts.q(name), args...); err != nil {
				return err
			}
		}
		return nil
	})
}

// UnregisterWorker removes a worker that is leaving, with every lease and
// role it holds: they are free at once instead of when they expire.
func (c *core) UnregisterWorker(ctx context.Context, job, worker string) error {
	if err := c.execAll(ctx, []string{"worker_drop_leases", "worker_drop_roles", "worker_drop"}, job, worker); err != nil {
		return fmt.Errorf("unregister worker %s of job %s: %w", worker, job, err)
	}
	return nil
}

// ForgetWorkers removes every worker, lease and role of job. Only a
// process that knows it is the job's only driver may call it (one holding
// the job's lock exclusively on a database no other machine uses): the
// leases a killed run left then need not be waited out.
func (c *core) ForgetWorkers(ctx context.Context, job string) error {
	if err := c.execAll(ctx, []string{"job_drop_leases", "job_drop_roles", "job_drop_workers"}, job); err != nil {
		return fmt.Errorf("forget the workers of job %s: %w", job, err)
	}
	return nil
}

// PruneWorkers removes the workers of job whose last heartbeat is before
// before and that hold no unexpired lease or role: workers killed without
// unregistering, whose leases have run out. It returns how many it
// removed. A worker removed while alive (its heartbeats starved) finds out
// at its next heartbeat (ErrNotFound) and registers again.
func (c *core) PruneWorkers(ctx context.Context, job string, before time.Time) (int, error) {
	now := ns(c.now())
	n, err := c.ex.exec(ctx, c.stmts.q("workers_prune"), job, ns(before), now, now)
	if err != nil {
		return 0, fmt.Errorf("prune the workers of job %s: %w", job, err)
	}
	return int(n), nil
}

// Heartbeat records that worker is alive and extends every chunk lease
// and role it holds to now+ttl. A worker that is not registered (it was
// removed) gets ErrNotFound.
func (c *core) Heartbeat(ctx context.Context, job, worker string, ttl time.Duration) error {
	now := c.now()
	until := ns(now.Add(ttl))
	return c.drv.inTx(ctx, func(ex executor) error {
		n, err := ex.exec(ctx, c.stmts.q("worker_heartbeat"), ns(now), job, worker)
		if err != nil {
			return fmt.Errorf("heartbeat of worker %s: %w", worker, err)
		}
		if n != 1 {
			return fmt.Errorf("heartbeat of worker %s of job %s: %w", worker, job, ErrNotFound)
		}
		for _, q := range []string{"worker_extend_leases", "worker_extend_roles"} {
			if _, err := ex.exec(ctx, c.stmts.q(q), until, job, worker); err != nil {
				return fmt.Errorf("heartbeat of worker %s: %w", worker, err)
			}
		}
		return nil
	})
}

// ClaimChunk leases chunk's next step to worker until now+ttl, if no
// other worker holds an unexpired lease on it. Claiming a chunk the worker
// holds already renews the lease.
func (c *core) ClaimChunk(ctx context.Context, job string, chunk int64, worker string, ttl time.Duration) (bool, error) {
	now := c.now()
	ok, err := c.drv.claim(ctx, "chunk_leases", job, chunk, worker, now, now.Add(ttl))
	if err != nil {
		return false, fmt.Errorf("claim chunk %d of job %s: %w", chunk, job, err)
	}
	return ok, nil
}

// ReleaseChunk gives up worker's lease on chunk (none if it holds none).
func (c *core) ReleaseChunk(ctx context.Context, job string, chunk int64, worker string) error {
	if _, err := c.ex.exec(ctx, c.stmts.q("chunk_release"), job, chunk, worker); err != nil {
		return fmt.Errorf("release chunk %d of job %s: %w", chunk, job, err)
	}
	return nil
}

// ClaimRole makes worker the holder of role (sluice.RolePlan,
// sluice.RoleMerge) of job until now+ttl, if no other worker holds it
// unexpired; claiming a role held already renews it. The job need not
// exist yet.
func (c *core) ClaimRole(ctx context.Context, job, role, worker string, ttl time.Duration) (bool, error) {
	now := c.now()
	ok, err := c.drv.claim(ctx, "job_roles", job, role, worker, now, now.Add(ttl))
	if err != nil {
		return false, fmt.Errorf("claim role %s of job %s: %w", role, job, err)
	}
	return ok, nil
}

// ReleaseRole gives up worker's hold on role (none if it holds none).
func (c *core) ReleaseRole(ctx context.Context, job, role, worker string) error {
	if _, err := c.ex.exec(ctx, c.stmts.q("role_release"), job, role, worker); err != nil {
		return fmt.Errorf("release role %s of job %s: %w", role, job, err)
	}
	return nil
}

// Workers returns the workers registered on job, oldest first, each with
// the number of unexpired chunk leases it holds.
func (c *core) Workers(ctx context.Context, job string) ([]sluice.Worker, error) {
	return collect(ctx, c.ex, c.stmts.q("workers_of_job"), func(row scanner) (sluice.Worker, error) {
		var w sluice.Worker
		var started, beat, leases int64
		err := row.Scan(&w.ID, &w.Host, &w.PID, &started, &beat, &leases)
		w.Started, w.Heartbeat, w.Leases = fromNS(started), fromNS(beat), int(leases)
		return w, err
	}, ns(c.now()), job)
}

// claim implements dbDriver on SQLite: one guarded upsert (sql/sqlite.sql).
func (d *DB) claim(ctx context.Context, table, job string, key any, worker string, now, until time.Time) (bool, error) {
	n, err := d.ex.exec(ctx, d.stmts.q("claim_"+table), job, key, worker, ns(until), ns(now))
	return n == 1, err
}

// claim implements dbDriver on PostgreSQL: the lease row is read FOR
// UPDATE SKIP LOCKED, so one being claimed by another transaction is
// taken; a missing row is inserted, and an insert that loses a race to
// another's insert (ON CONFLICT DO NOTHING) is a lost claim
// (sql/postgres.sql).
func (p *Postgres) claim(ctx context.Context, table, job string, key any, worker string, now, until time.Time) (bool, error) {
	won := false
	err := p.inTx(ctx, func(ex executor) error {
		var holder string
		var expires int64
		err := ex.queryRow(ctx, p.stmts.q("claim_read_"+table), job, key).Scan(&holder, &expires)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			n, err := ex.exec(ctx, p.stmts.q("claim_insert_"+table), job, key, worker, ns(until))
			won = err == nil && n == 1
			return err
		case err != nil:
			return err
		case holder != worker && expires > ns(now):
			return nil // held by another, unexpired
		}
		_, err = ex.exec(ctx, p.stmts.q("claim_take_"+table), worker, ns(until), job, key)
		won = err == nil
		return err
	})
	return won, err
}
