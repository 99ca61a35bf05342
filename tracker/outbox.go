package tracker

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// The notification outbox (migrations/0014_notifications.sql,
// docs/monitoring.md): an event is recorded once per destination before
// any delivery is tried; a sender claims one row at a time by a guarded
// update (state pending and due, or sending with an expired lease), so two
// workers never hold the same row, and a row a killed sender left in
// sending is claimed again once its lease expires. Delivery over HTTP is
// at least once: a kill after the receiver got the body but before
// SettleNotification leaves the row to be sent again, with the same id.

// Notification states.
const (
	NotePending   = "pending"
	NoteSending   = "sending"
	NoteDelivered = "delivered"
	NoteFailed    = "failed" // gave up after the last attempt
)

// Notification is one event for one destination.
type Notification struct {
	ID, Dest, Job, Type string
	Body                []byte
	State               string
	Attempts            int
	NextAt, CreatedAt   time.Time
	DeliveredAt         time.Time
	LastError           string
}

// Outbox is what the notifier needs of the tracker; *DB and *Postgres
// implement it.
type Outbox interface {
	// RecordNotification inserts n as pending unless a row of the same
	// id and destination is there; it reports whether it inserted.
	RecordNotification(ctx context.Context, n Notification) (bool, error)
	// ClaimNotification leases the oldest row due for one of dests to
	// owner until lease from now, counting an attempt; nil when none is due.
	ClaimNotification(ctx context.Context, dests []string, owner string, lease time.Duration) (*Notification, error)
	// SettleNotification ends owner's claim: state is NoteDelivered,
	// NoteFailed, or NotePending again to be tried at next.
	SettleNotification(ctx context.Context, n *Notification, owner, state string, next time.Time, errMsg string) error
	// NotificationsDue counts the rows of dests not yet settled and the
	// earliest time one of them may be claimed.
	NotificationsDue(ctx context.Context, dests []string) (int, time.Time, error)
	// Notifications returns the rows of job (all jobs when ""), oldest first.
	Notifications(ctx context.Context, job string) ([]Notification, error)
}

var (
	_ Outbox = (*DB)(nil)
	_ Outbox = (*Postgres)(nil)
)

// outboxSQL holds the statements, with ? placeholders; dialect rewrites
// them for PostgreSQL.
const (
	noteInsert = `INSERT INTO notifications (id, dest, job_id, type, body, state, next_at, created_at)
		VALUES (?, ?, ?, ?, ?, 'pending', ?, ?) ON CONFLICT (id, dest) DO NOTHING`
	noteDueWhere = `((state = 'pending' AND next_at <= ?) OR (state = 'sending' AND lease_until <= ?))`
	noteClaim    = `UPDATE notifications SET state = 'sending', lease_owner = ?, lease_until = ?, attempts = attempts + 1
		WHERE id = ? AND dest = ? AND ` + noteDueWhere
	noteSettle = `UPDATE notifications SET state = ?, next_at = ?, last_error = ?, delivered_at = ?,
		lease_owner = '', lease_until = 0 WHERE id = ? AND dest = ? AND lease_owner = ? AND state = 'sending'`
	noteCols = `id, dest, job_id, type, body, state, attempts, next_at, created_at, delivered_at, last_error`
)

// sqlRunner is what both dialects run statements through.
type sqlRunner struct {
	exec  func(ctx context.Context, q string, args ...any) (int64, error)
	query func(ctx context.Context, q string, scan func(scan func(...any) error) error, args ...any) error
	pg    bool
}

func (r sqlRunner) q(s string) string {
	if !r.pg {
		return s
	}
	var b strings.Builder
	n := 0
	for _, c := range s {
		if c == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

func in(n int) string { return "(" + strings.TrimSuffix(strings.Repeat("?, ", n), ", ") + ")" }

func destArgs(dests []string) []any {
	a := make([]any, len(dests))
	for i, d := range dests {
		a[i] = d
	}
	return a
}

func (r sqlRunner) record(ctx context.Context, n Notification, now time.Time) (bool, error) {
	if n.CreatedAt.IsZero() {
		n.CreatedAt = now
	}
	k, err := r.exec(ctx, r.q(noteInsert), n.ID, n.Dest, n.Job, n.Type, n.Body, ns(n.CreatedAt), ns(n.CreatedAt))
	if err != nil {
		return false, fmt.Errorf("record notification %s: %w", n.ID, err)
	}
	return k == 1, nil
}

func (r sqlRunner) claim(ctx context.Context, dests []string, owner string, lease time.Duration, now time.Time) (*Notification, error) {
	if len(dests) == 0 {
		return nil, nil
	}
	for range 8 { // another sender may win a candidate: take the next
		var cands [][2]string
		args := append(destArgs(dests), ns(now), ns(now))
		err := r.query(ctx, r.q(`SELECT id, dest FROM notifications WHERE dest IN `+in(len(dests))+` AND `+noteDueWhere+
			` ORDER BY created_at, id LIMIT 4`), func(scan func(...any) error) error {
			var c [2]string
			if err := scan(&c[0], &c[1]); err != nil {
				return err
			}
			cands = append(cands, c)
			return nil
		}, args...)
		if err != nil || len(cands) == 0 {
			return nil, err
		}
		for _, c := range cands {
			k, err := r.exec(ctx, r.q(noteClaim), owner, ns(now.Add(lease)), c[0], c[1], ns(now), ns(now))
			if err != nil {
				return nil, fmt.Errorf("claim notification %s: %w", c[0], err)
			}
			if k == 1 {
				return r.one(ctx, c[0], c[1])
			}
		}
	}
	return nil, nil
}

func (r sqlRunner) scanRows(ctx context.Context, q string, args ...any) ([]Notification, error) {
	var out []Notification
	err := r.query(ctx, r.q(q), func(scan func(...any) error) error {
		var n Notification
		var next, created, delivered int64
		if err := scan(&n.ID, &n.Dest, &n.Job, &n.Type, &n.Body, &n.State, &n.Attempts, &next, &created, &delivered, &n.LastError); err != nil {
			return err
		}
		n.NextAt, n.CreatedAt, n.DeliveredAt = fromNS(next), fromNS(created), fromNS(delivered)
		out = append(out, n)
		return nil
	}, args...)
	return out, err
}

func (r sqlRunner) one(ctx context.Context, id, dest string) (*Notification, error) {
	ns, err := r.scanRows(ctx, `SELECT `+noteCols+` FROM notifications WHERE id = ? AND dest = ?`, id, dest)
	if err != nil || len(ns) == 0 {
		return nil, errors.Join(err, fmt.Errorf("notification %s vanished after its claim", id))
	}
	return &ns[0], nil
}

func (r sqlRunner) settle(ctx context.Context, n *Notification, owner, state string, next time.Time, msg string, now time.Time) error {
	var delivered int64
	if state == NoteDelivered {
		delivered = ns(now)
	}
	k, err := r.exec(ctx, r.q(noteSettle), state, ns(next), msg, delivered, n.ID, n.Dest, owner)
	if err != nil {
		return fmt.Errorf("settle notification %s: %w", n.ID, err)
	}
	if k != 1 {
		return fmt.Errorf("settle notification %s: %w (its lease passed to another sender)", n.ID, ErrConflict)
	}
	return nil
}

func (r sqlRunner) due(ctx context.Context, dests []string) (int, time.Time, error) {
	if len(dests) == 0 {
		return 0, time.Time{}, nil
	}
	var n int
	var at sql.NullInt64
	err := r.query(ctx, r.q(`SELECT COUNT(*), MIN(CASE WHEN state = 'pending' THEN next_at ELSE lease_until END)
		FROM notifications WHERE dest IN `+in(len(dests))+` AND state IN ('pending', 'sending')`),
		func(scan func(...any) error) error { return scan(&n, &at) }, destArgs(dests)...)
	return n, fromNS(at.Int64), err
}

func (r sqlRunner) list(ctx context.Context, job string) ([]Notification, error) {
	if job == "" {
		return r.scanRows(ctx, `SELECT `+noteCols+` FROM notifications ORDER BY created_at, id, dest`)
	}
	return r.scanRows(ctx, `SELECT `+noteCols+` FROM notifications WHERE job_id = ? ORDER BY created_at, id, dest`, job)
}

func (d *DB) outbox() sqlRunner {
	return sqlRunner{
		exec: func(ctx context.Context, q string, args ...any) (int64, error) {
			res, err := d.db.ExecContext(ctx, q, args...)
			if err != nil {
				return 0, err
			}
			return res.RowsAffected()
		},
		query: func(ctx context.Context, q string, each func(func(...any) error) error, args ...any) error {
			rows, err := d.db.QueryContext(ctx, q, args...)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				if err := each(rows.Scan); err != nil {
					return err
				}
			}
			return rows.Err()
		},
	}
}

func (p *Postgres) outbox() sqlRunner {
	return sqlRunner{pg: true,
		exec: func(ctx context.Context, q string, args ...any) (int64, error) {
			tag, err := p.pool.Exec(ctx, q, args...)
			if err != nil {
				return 0, p.wrap(err)
			}
			return tag.RowsAffected(), nil
		},
		query: func(ctx context.Context, q string, each func(func(...any) error) error, args ...any) error {
			rows, err := p.pool.Query(ctx, q, args...)
			if err != nil {
				return p.wrap(err)
			}
			defer rows.Close()
			for rows.Next() {
				if err := each(rows.Scan); err != nil {
					return err
				}
			}
			return p.wrap(rows.Err())
		},
	}
}

// RecordNotification implements Outbox.
func (d *DB) RecordNotification(ctx context.Context, n Notification) (bool, error) {
	return d.outbox().record(ctx, n, d.now())
}

// ClaimNotification implements Outbox.
func (d *DB) ClaimNotification(ctx context.Context, dests []string, owner string, lease time.Duration) (*Notification, error) {
	return d.outbox().claim(ctx, dests, owner, lease, d.now())
}

// SettleNotification implements Outbox.
func (d *DB) SettleNotification(ctx context.Context, n *Notification, owner, state string, next time.Time, msg string) error {
	return d.outbox().settle(ctx, n, owner, state, next, msg, d.now())
}

// NotificationsDue implements Outbox.
func (d *DB) NotificationsDue(ctx context.Context, dests []string) (int, time.Time, error) {
	return d.outbox().due(ctx, dests)
}

// Notifications implements Outbox.
func (d *DB) Notifications(ctx context.Context, job string) ([]Notification, error) {
	return d.outbox().list(ctx, job)
}

// RecordNotification implements Outbox on PostgreSQL.
func (p *Postgres) RecordNotification(ctx context.Context, n Notification) (bool, error) {
	return p.outbox().record(ctx, n, p.now())
}

// ClaimNotification implements Outbox on PostgreSQL.
func (p *Postgres) ClaimNotification(ctx context.Context, dests []string, owner string, lease time.Duration) (*Notification, error) {
	return p.outbox().claim(ctx, dests, owner, lease, p.now())
}

// SettleNotification implements Outbox on PostgreSQL.
func (p *Postgres) SettleNotification(ctx context.Context, n *Notification, owner, state string, next time.Time, msg string) error {
	return p.outbox().settle(ctx, n, owner, state, next, msg, p.now())
}

// NotificationsDue implements Outbox on PostgreSQL.
func (p *Postgres) NotificationsDue(ctx context.Context, dests []string) (int, time.Time, error) {
	return p.outbox().due(ctx, dests)
}

// Notifications implements Outbox on PostgreSQL.
func (p *Postgres) Notifications(ctx context.Context, job string) ([]Notification, error) {
	return p.outbox().list(ctx, job)
}
