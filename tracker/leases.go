package tracker

import (
	"context"
	"database/sql"
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
// Every claim is one guarded statement: an insert that, when the row is
// there, updates it only if its lease expired or is the claimer's own.
// The SQL is plain enough to run unchanged on PostgreSQL (placeholders
// aside), where SELECT ... FOR UPDATE SKIP LOCKED can pick the candidates.

// RegisterWorker records w as a worker of job (again, if it was: its
// start and heartbeat are refreshed). Zero times are now.
func (d *DB) RegisterWorker(ctx context.Context, job string, w sluice.Worker) error {
	now := d.now()
	if w.Started.IsZero() {
		w.Started = now
	}
	if w.Heartbeat.IsZero() {
		w.Heartbeat = now
	}
	_, err := d.db.ExecContext(ctx, `INSERT INTO workers (job_id, id, host, pid, started_at, heartbeat_at)
		VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (job_id, id) DO UPDATE SET host = excluded.host, pid = excluded.pid,
		started_at = excluded.started_at, heartbeat_at = excluded.heartbeat_at`,
		job, w.ID, w.Host, w.PID, ns(w.Started), ns(w.Heartbeat))
	if err != nil {
		return fmt.Errorf("register worker %s of job %s: %w", w.ID, job, err)
	}
	return nil
}

// UnregisterWorker removes a worker that is leaving, with every lease and
// role it holds: they are free at once instead of when they expire.
func (d *DB) UnregisterWorker(ctx context.Context, job, worker string) error {
	return d.tx(ctx, func(tx *sql.Tx) error {
		for _, q := range []string{`DELETE FROM chunk_leases WHERE job_id = ? AND worker_id = ?`,
			`DELETE FROM job_roles WHERE job_id = ? AND worker_id = ?`,
			`DELETE FROM workers WHERE job_id = ? AND id = ?`} {
			if _, err := tx.ExecContext(ctx, q, job, worker); err != nil {
				return fmt.Errorf("unregister worker %s of job %s: %w", worker, job, err)
			}
		}
		return nil
	})
}

// ForgetWorkers removes every worker, lease and role of job. Only a
// process that knows it is the job's only driver may call it (one holding
// the job's lock exclusively on a database no other machine uses): the
// leases a killed run left then need not be waited out.
func (d *DB) ForgetWorkers(ctx context.Context, job string) error {
	return d.tx(ctx, func(tx *sql.Tx) error {
		for _, q := range []string{`DELETE FROM chunk_leases WHERE job_id = ?`, `DELETE FROM job_roles WHERE job_id = ?`,
			`DELETE FROM workers WHERE job_id = ?`} {
			if _, err := tx.ExecContext(ctx, q, job); err != nil {
				return fmt.Errorf("forget the workers of job %s: %w", job, err)
			}
		}
		return nil
	})
}

// PruneWorkers removes the workers of job whose last heartbeat is before
// before and that hold no unexpired lease or role: workers killed without
// unregistering, whose leases have run out. It returns how many it
// removed. A worker removed while alive (its heartbeats starved) finds out
// at its next heartbeat (ErrNotFound) and registers again.
func (d *DB) PruneWorkers(ctx context.Context, job string, before time.Time) (int, error) {
	now := ns(d.now())
	res, err := d.db.ExecContext(ctx, `DELETE FROM workers WHERE job_id = ? AND heartbeat_at < ?
		AND NOT EXISTS (SELECT 1 FROM chunk_leases l WHERE l.job_id = workers.job_id AND l.worker_id = workers.id AND l.expires_at > ?)
		AND NOT EXISTS (SELECT 1 FROM job_roles r WHERE r.job_id = workers.job_id AND r.worker_id = workers.id AND r.expires_at > ?)`,
		job, ns(before), now, now)
	if err != nil {
		return 0, fmt.Errorf("prune the workers of job %s: %w", job, err)
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// Heartbeat records that worker is alive and extends every chunk lease
// and role it holds to now+ttl. A worker that is not registered (it was
// removed) gets ErrNotFound.
func (d *DB) Heartbeat(ctx context.Context, job, worker string, ttl time.Duration) error {
	now := d.now()
	until := ns(now.Add(ttl))
	return d.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE workers SET heartbeat_at = ? WHERE job_id = ? AND id = ?`, ns(now), job, worker)
		if err != nil {
			return fmt.Errorf("heartbeat of worker %s: %w", worker, err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return fmt.Errorf("heartbeat of worker %s of job %s: %w", worker, job, ErrNotFound)
		}
		for _, q := range []string{`UPDATE chunk_leases SET expires_at = ? WHERE job_id = ? AND worker_id = ?`,
			`UPDATE job_roles SET expires_at = ? WHERE job_id = ? AND worker_id = ?`} {
			if _, err := tx.ExecContext(ctx, q, until, job, worker); err != nil {
				return fmt.Errorf("heartbeat of worker %s: %w", worker, err)
			}
		}
		return nil
	})
}

// ClaimChunk leases chunk's next step to worker until now+ttl, if no
// other worker holds an unexpired lease on it. Claiming a chunk the worker
// holds already renews the lease.
func (d *DB) ClaimChunk(ctx context.Context, job string, chunk int64, worker string, ttl time.Duration) (bool, error) {
	now := d.now()
	res, err := d.db.ExecContext(ctx, `INSERT INTO chunk_leases (job_id, chunk_id, worker_id, expires_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (job_id, chunk_id) DO UPDATE SET worker_id = excluded.worker_id, expires_at = excluded.expires_at
		WHERE chunk_leases.expires_at <= ? OR chunk_leases.worker_id = excluded.worker_id`,
		job, chunk, worker, ns(now.Add(ttl)), ns(now))
	if err != nil {
		return false, fmt.Errorf("claim chunk %d of job %s: %w", chunk, job, err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// ReleaseChunk gives up worker's lease on chunk (none if it holds none).
func (d *DB) ReleaseChunk(ctx context.Context, job string, chunk int64, worker string) error {
	_, err := d.db.ExecContext(ctx, `DELETE FROM chunk_leases WHERE job_id = ? AND chunk_id = ? AND worker_id = ?`,
		job, chunk, worker)
	if err != nil {
		return fmt.Errorf("release chunk %d of job %s: %w", chunk, job, err)
	}
	return nil
}

// ClaimRole makes worker the holder of role (sluice.RolePlan,
// sluice.RoleMerge) of job until now+ttl, if no other worker holds it
// unexpired; claiming a role held already renews it. The job need not
// exist yet.
func (d *DB) ClaimRole(ctx context.Context, job, role, worker string, ttl time.Duration) (bool, error) {
	now := d.now()
	res, err := d.db.ExecContext(ctx, `INSERT INTO job_roles (job_id, role, worker_id, expires_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (job_id, role) DO UPDATE SET worker_id = excluded.worker_id, expires_at = excluded.expires_at
		WHERE job_roles.expires_at <= ? OR job_roles.worker_id = excluded.worker_id`,
		job, role, worker, ns(now.Add(ttl)), ns(now))
	if err != nil {
		return false, fmt.Errorf("claim role %s of job %s: %w", role, job, err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// ReleaseRole gives up worker's hold on role (none if it holds none).
func (d *DB) ReleaseRole(ctx context.Context, job, role, worker string) error {
	_, err := d.db.ExecContext(ctx, `DELETE FROM job_roles WHERE job_id = ? AND role = ? AND worker_id = ?`, job, role, worker)
	if err != nil {
		return fmt.Errorf("release role %s of job %s: %w", role, job, err)
	}
	return nil
}

// Workers returns the workers registered on job, oldest first, each with
// the number of unexpired chunk leases it holds.
func (d *DB) Workers(ctx context.Context, job string) ([]sluice.Worker, error) {
	rows, err := d.db.QueryContext(ctx, `SELECT w.id, w.host, w.pid, w.started_at, w.heartbeat_at,
		(SELECT COUNT(*) FROM chunk_leases l WHERE l.job_id = w.job_id AND l.worker_id = w.id AND l.expires_at > ?)
		FROM workers w WHERE w.job_id = ? ORDER BY w.started_at, w.id`, ns(d.now()), job)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ws []sluice.Worker
	for rows.Next() {
		var w sluice.Worker
		var started, beat int64
		if err := rows.Scan(&w.ID, &w.Host, &w.PID, &started, &beat, &w.Leases); err != nil {
			return nil, err
		}
		w.Started, w.Heartbeat = fromNS(started), fromNS(beat)
		ws = append(ws, w)
	}
	return ws, rows.Err()
}
