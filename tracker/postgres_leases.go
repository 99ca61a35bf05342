package tracker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-batch/sluice"
)

// Leases on PostgreSQL (leases.go has the model): the same rows and
// rules, and a claim never waits for another worker's claim in flight:
// it reads the lease row with SELECT ... FOR UPDATE SKIP LOCKED, so a row
// another transaction is claiming right now counts as taken.

// RegisterWorker implements the worker registry on PostgreSQL.
func (p *Postgres) RegisterWorker(ctx context.Context, job string, w sluice.Worker) error {
	now := p.now()
	if w.Started.IsZero() {
		w.Started = now
	}
	if w.Heartbeat.IsZero() {
		w.Heartbeat = now
	}
	_, err := p.pool.Exec(ctx, `INSERT INTO workers (job_id, id, host, pid, started_at, heartbeat_at)
		VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (job_id, id) DO UPDATE SET host = excluded.host, pid = excluded.pid,
		started_at = excluded.started_at, heartbeat_at = excluded.heartbeat_at`,
		job, w.ID, w.Host, w.PID, ns(w.Started), ns(w.Heartbeat))
	if err != nil {
		return fmt.Errorf("register worker %s of job %s: %w", w.ID, job, p.wrap(err))
	}
	return nil
}

// UnregisterWorker removes a leaving worker with its leases and roles.
func (p *Postgres) UnregisterWorker(ctx context.Context, job, worker string) error {
	return p.tx(ctx, func(tx pgx.Tx) error {
		for _, q := range []string{`DELETE FROM chunk_leases WHERE job_id = $1 AND worker_id = $2`,
			`DELETE FROM job_roles WHERE job_id = $1 AND worker_id = $2`,
			`DELETE FROM workers WHERE job_id = $1 AND id = $2`} {
			if _, err := tx.Exec(ctx, q, job, worker); err != nil {
				return fmt.Errorf("unregister worker %s of job %s: %w", worker, job, err)
			}
		}
		return nil
	})
}

// ForgetWorkers removes every worker, lease and role of job.
func (p *Postgres) ForgetWorkers(ctx context.Context, job string) error {
	return p.tx(ctx, func(tx pgx.Tx) error {
		for _, q := range []string{`DELETE FROM chunk_leases WHERE job_id = $1`, `DELETE FROM job_roles WHERE job_id = $1`,
			`DELETE FROM workers WHERE job_id = $1`} {
			if _, err := tx.Exec(ctx, q, job); err != nil {
				return fmt.Errorf("forget the workers of job %s: %w", job, err)
			}
		}
		return nil
	})
}

// Heartbeat records that worker is alive and extends its leases and
// roles to now+ttl; an unregistered worker gets ErrNotFound.
func (p *Postgres) Heartbeat(ctx context.Context, job, worker string, ttl time.Duration) error {
	now := p.now()
	until := ns(now.Add(ttl))
	return p.tx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE workers SET heartbeat_at = $1 WHERE job_id = $2 AND id = $3`, ns(now), job, worker)
		if err != nil {
			return fmt.Errorf("heartbeat of worker %s: %w", worker, err)
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("heartbeat of worker %s of job %s: %w", worker, job, ErrNotFound)
		}
		for _, q := range []string{`UPDATE chunk_leases SET expires_at = $1 WHERE job_id = $2 AND worker_id = $3`,
			`UPDATE job_roles SET expires_at = $1 WHERE job_id = $2 AND worker_id = $3`} {
			if _, err := tx.Exec(ctx, q, until, job, worker); err != nil {
				return fmt.Errorf("heartbeat of worker %s: %w", worker, err)
			}
		}
		return nil
	})
}

// pgClaim leases the row of table keyed (job, key) to worker until
// now+ttl if it is free, expired or the worker's own. The row is read
// FOR UPDATE SKIP LOCKED: one being claimed by another transaction is
// taken. A missing row is inserted; an insert that loses a race to
// another's insert (ON CONFLICT DO NOTHING) is a lost claim.
func (p *Postgres) pgClaim(ctx context.Context, table, keyCol string, job string, key any, worker string, ttl time.Duration) (bool, error) {
	now := p.now()
	won := false
	err := p.tx(ctx, func(tx pgx.Tx) error {
		var holder string
		var expires int64
		err := tx.QueryRow(ctx, `SELECT worker_id, expires_at FROM `+table+` WHERE job_id = $1 AND `+keyCol+` = $2
			FOR UPDATE SKIP LOCKED`, job, key).Scan(&holder, &expires)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			tag, err := tx.Exec(ctx, `INSERT INTO `+table+` (job_id, `+keyCol+`, worker_id, expires_at) VALUES ($1, $2, $3, $4)
				ON CONFLICT DO NOTHING`, job, key, worker, ns(now.Add(ttl)))
			won = err == nil && tag.RowsAffected() == 1
			return err
		case err != nil:
			return err
		case holder != worker && expires > ns(now):
			return nil // held by another, unexpired
		}
		_, err = tx.Exec(ctx, `UPDATE `+table+` SET worker_id = $1, expires_at = $2 WHERE job_id = $3 AND `+keyCol+` = $4`,
			worker, ns(now.Add(ttl)), job, key)
		won = err == nil
		return err
	})
	return won, err
}

// ClaimChunk leases chunk's next step to worker (leases.go).
func (p *Postgres) ClaimChunk(ctx context.Context, job string, chunk int64, worker string, ttl time.Duration) (bool, error) {
	ok, err := p.pgClaim(ctx, "chunk_leases", "chunk_id", job, chunk, worker, ttl)
	if err != nil {
		return false, fmt.Errorf("claim chunk %d of job %s: %w", chunk, job, err)
	}
	return ok, nil
}

// ReleaseChunk gives up worker's lease on chunk.
func (p *Postgres) ReleaseChunk(ctx context.Context, job string, chunk int64, worker string) error {
	_, err := p.pool.Exec(ctx, `DELETE FROM chunk_leases WHERE job_id = $1 AND chunk_id = $2 AND worker_id = $3`, job, chunk, worker)
	if err != nil {
		return fmt.Errorf("release chunk %d of job %s: %w", chunk, job, p.wrap(err))
	}
	return nil
}

// ClaimRole makes worker the holder of role of job (leases.go).
func (p *Postgres) ClaimRole(ctx context.Context, job, role, worker string, ttl time.Duration) (bool, error) {
	ok, err := p.pgClaim(ctx, "job_roles", "role", job, role, worker, ttl)
	if err != nil {
		return false, fmt.Errorf("claim role %s of job %s: %w", role, job, err)
	}
	return ok, nil
}

// ReleaseRole gives up worker's hold on role.
func (p *Postgres) ReleaseRole(ctx context.Context, job, role, worker string) error {
	_, err := p.pool.Exec(ctx, `DELETE FROM job_roles WHERE job_id = $1 AND role = $2 AND worker_id = $3`, job, role, worker)
	if err != nil {
		return fmt.Errorf("release role %s of job %s: %w", role, job, p.wrap(err))
	}
	return nil
}

// Workers returns the workers of job, oldest first, with their unexpired
// chunk leases counted.
func (p *Postgres) Workers(ctx context.Context, job string) ([]sluice.Worker, error) {
	rows, err := p.pool.Query(ctx, `SELECT w.id, w.host, w.pid, w.started_at, w.heartbeat_at,
		(SELECT COUNT(*) FROM chunk_leases l WHERE l.job_id = w.job_id AND l.worker_id = w.id AND l.expires_at > $1)
		FROM workers w WHERE w.job_id = $2 ORDER BY w.started_at, w.id`, ns(p.now()), job)
	if err != nil {
		return nil, p.wrap(err)
	}
	defer rows.Close()
	var ws []sluice.Worker
	for rows.Next() {
		var w sluice.Worker
		var started, beat, leases int64
		if err := rows.Scan(&w.ID, &w.Host, &w.PID, &started, &beat, &leases); err != nil {
			return nil, err
		}
		w.Started, w.Heartbeat, w.Leases = fromNS(started), fromNS(beat), int(leases)
		ws = append(ws, w)
	}
	return ws, p.wrap(rows.Err())
}

// PruneWorkers removes the workers of job whose last heartbeat is before
// before and that hold no unexpired lease or role (leases.go).
func (p *Postgres) PruneWorkers(ctx context.Context, job string, before time.Time) (int, error) {
	now := ns(p.now())
	tag, err := p.pool.Exec(ctx, `DELETE FROM workers WHERE job_id = $1 AND heartbeat_at < $2
		AND NOT EXISTS (SELECT 1 FROM chunk_leases l WHERE l.job_id = workers.job_id AND l.worker_id = workers.id AND l.expires_at > $3)
		AND NOT EXISTS (SELECT 1 FROM job_roles r WHERE r.job_id = workers.job_id AND r.worker_id = workers.id AND r.expires_at > $3)`,
		job, ns(before), now)
	if err != nil {
		return 0, fmt.Errorf("prune the workers of job %s: %w", job, p.wrap(err))
	}
	return int(tag.RowsAffected()), nil
}
