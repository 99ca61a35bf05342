package tracker

import (
	"context"
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

func destArgs(dests []string) []any {
	a := make([]any, len(dests))
	for i, d := range dests {
		a[i] = d
	}
	return a
}

// withDests puts a placeholder per destination in the named statement's
// (:dests).
func (c *core) withDests(name string, dests []string) string {
	return strings.Replace(c.stmts.q(name), "(:dests)", in(len(dests)), 1)
}

// RecordNotification implements Outbox.
func (c *core) RecordNotification(ctx context.Context, n Notification) (bool, error) {
	if n.CreatedAt.IsZero() {
		n.CreatedAt = c.now()
	}
	k, err := c.ex.exec(ctx, c.stmts.q("note_insert"), n.ID, n.Dest, n.Job, n.Type, n.Body, ns(n.CreatedAt), ns(n.CreatedAt))
	if err != nil {
		return false, fmt.Errorf("record notification %s: %w", n.ID, err)
	}
	return k == 1, nil
}

// ClaimNotification implements Outbox.
func (c *core) ClaimNotification(ctx context.Context, dests []string, owner string, lease time.Duration) (*Notification, error) {
	if len(dests) == 0 {
		return nil, nil
	}
	now := c.now()
	for range 8 { // another sender may win a candidate: take the next
		var cands [][2]string
		args := append(destArgs(dests), ns(now), ns(now))
		err := c.ex.query(ctx, c.withDests("note_candidates", dests), func(row scanner) error {
			var cand [2]string
			if err := row.Scan(&cand[0], &cand[1]); err != nil {
				return err
			}
			cands = append(cands, cand)
			return nil
		}, args...)
		if err != nil || len(cands) == 0 {
			return nil, err
		}
		for _, cand := range cands {
			k, err := c.ex.exec(ctx, c.stmts.q("note_claim"), owner, ns(now.Add(lease)), cand[0], cand[1], ns(now), ns(now))
			if err != nil {
				return nil, fmt.Errorf("claim notification %s: %w", cand[0], err)
			}
			if k == 1 {
				return c.notification(ctx, cand[0], cand[1])
			}
		}
	}
	return nil, nil
}

func (c *core) notifications(ctx context.Context, q string, args ...any) ([]Notification, error) {
	return collect(ctx, c.ex, q, func(row scanner) (Notification, error) {
		var n Notification
		var next, created, delivered int64
		err := row.Scan(&n.ID, &n.Dest, &n.Job, &n.Type, &n.Body, &n.State, &n.Attempts, &next, &created, &delivered, &n.LastError)
		n.NextAt, n.CreatedAt, n.DeliveredAt = fromNS(next), fromNS(created), fromNS(delivered)
		return n, err
	}, args...)
}

func (c *core) notification(ctx context.Context, id, dest string) (*Notification, error) {
	ns, err := c.notifications(ctx, c.stmts.q("note_get"), id, dest)
	if err != nil || len(ns) == 0 {
		return nil, errors.Join(err, fmt.Errorf("notification %s vanished after its claim", id))
	}
	return &ns[0], nil
}

// SettleNotification implements Outbox.
func (c *core) SettleNotification(ctx context.Context, n *Notification, owner, state string, next time.Time, msg string) error {
	var delivered int64
	if state == NoteDelivered {
		delivered = ns(c.now())
	}
	k, err := c.ex.exec(ctx, c.stmts.q("note_settle"), state, ns(next), msg, delivered, n.ID, n.Dest, owner)
	if err != nil {
		return fmt.Errorf("settle notification %s: %w", n.ID, err)
	}
	if k != 1 {
		return fmt.Errorf("settle notification %s: %w (its lease passed to another sender)", n.ID, ErrConflict)
	}
	return nil
}

// NotificationsDue implements Outbox.
func (c *core) NotificationsDue(ctx context.Context, dests []string) (int, time.Time, error) {
	if len(dests) == 0 {
		return 0, time.Time{}, nil
	}
	var n int64
	var at *int64
	err := c.ex.queryRow(ctx, c.withDests("note_due", dests), destArgs(dests)...).Scan(&n, &at)
	if err != nil || at == nil {
		return int(n), time.Time{}, err
	}
	return int(n), fromNS(*at), nil
}

// Notifications implements Outbox.
func (c *core) Notifications(ctx context.Context, job string) ([]Notification, error) {
	if job == "" {
		return c.notifications(ctx, c.stmts.q("notes_all"))
	}
	return c.notifications(ctx, c.stmts.q("notes_of_job"), job)
}
