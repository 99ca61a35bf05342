package tracker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// The job lock's watcher on PostgreSQL (docs/scale-out.md, "The job lock
// when the database goes away"). A session advisory lock lives as long as
// its connection; the process holding it may outlive the connection (a
// server restart, a failover, a network cut, pg_terminate_backend). Then:
//
//   - the watcher, which asks the lock's connection every pgLockCheckEvery
//     whether its session still holds the lock, sees the drop and closes
//     the lock's gate: Lock.Wait blocks every provider call of the run;
//   - it takes the lock back on a new connection, trying for up to
//     pgRetakeWithin; if this process was the last to take the job
//     (job_locks' epoch is still the one it read), the gate opens again
//     and the run carries on;
//   - if another process took the job meanwhile (it holds the lock now, or
//     it bumped the epoch and left), or the server stays out of reach, the
//     lock is lost for good: Lock.Wait returns a *LockLostError and the run
//     stops with exit 1, naming the cause.
//
// The gate alone leaves a window: a drop not seen yet. The epoch closes
// it. Every chunk write of the holder (intent and outcome alike: Postgres
// UpdateChunk, FinishChunk) reads the job's epoch FOR SHARE in its own
// transaction and refuses unless it is the holder's, and an exclusive
// taking bumps the epoch under the row's lock, so it waits for a write in
// flight and every later write of the old holder fails. A provider call
// comes only after its intent is committed, so the old holder calls the
// provider for nothing the new one cannot see (a call in flight is the
// crash case: the new holder reconciles it, docs/crash-safety.md).

// pgLockCheckEvery is how often the watcher asks the lock's connection
// whether it still holds the lock.
var pgLockCheckEvery = 500 * time.Millisecond

// pgRetakeWithin is how long the watcher tries to take a dropped lock
// back (the server restarting, say) before giving up.
var pgRetakeWithin = 30 * time.Second

// pgLockWatch watches one held job lock.
type pgLockWatch struct {
	p      *Postgres
	job    string
	key    int64
	shared bool
	epoch  int64 // the epoch this holder fences its writes with

	mu      sync.Mutex
	conn    *pgx.Conn      // the lock's session; nil once lost for good
	held    bool           // false while being taken back, and once lost
	lost    *LockLostError // set once lost for good
	changed chan struct{}  // closed (and replaced) at each change
	cause   string         // what the last drop was; "" if none
	drops   int            // how many times the lock's connection dropped
	notify  func(held bool, cause string, err error)

	kick chan chan string // asks for a check now (verify)
	stop chan struct{}
	done chan struct{}
}

// watchLock starts watching the lock conn holds and registers it as job's
// fence.
func (p *Postgres) watchLock(job string, shared bool, conn *pgx.Conn, epoch int64) *pgLockWatch {
	w := &pgLockWatch{p: p, job: job, key: pgLockKey(job), shared: shared, epoch: epoch, conn: conn, held: true,
		changed: make(chan struct{}), kick: make(chan chan string), stop: make(chan struct{}), done: make(chan struct{})}
	p.fenceMu.Lock()
	if p.fences == nil {
		p.fences = map[string]*pgLockWatch{}
	}
	p.fences[job] = w
	p.fenceMu.Unlock()
	go w.run()
	return w
}

func (w *pgLockWatch) run() {
	defer close(w.done)
	t := time.NewTicker(pgLockCheckEvery)
	defer t.Stop()
	for {
		var reply chan string
		select {
		case <-w.stop:
			return
		case <-t.C:
		case reply = <-w.kick:
		}
		cause := w.check()
		if cause != "" {
			// Recorded before Verify hears of it: its caller reads Drops
			// next (lifecycle.Worker.Ride).
			w.set(false, cause, nil)
		}
		if reply != nil {
			reply <- cause
		}
		if cause == "" {
			continue
		}
		if !w.retake(cause) {
			return
		}
	}
}

// check asks the lock's session whether it still holds the lock: "" when
// it does, else what went wrong.
func (w *pgLockWatch) check() string {
	ctx, cancel := context.WithTimeout(context.Background(), max(4*pgLockCheckEvery, 2*time.Second))
	defer cancel()
	w.mu.Lock()
	conn := w.conn
	w.mu.Unlock()
	var ok bool
	hi, lo := pgLockHalves(w.key)
	err := conn.QueryRow(ctx, pgHoldsSQL, hi, lo).Scan(&ok)
	switch {
	case err != nil:
		conn.Close(context.Background())
		return w.p.wrap(err).Error()
	case !ok:
		conn.Close(context.Background())
		return "the server no longer counts the lock as this session's"
	}
	return ""
}

// pgHoldsSQL says whether this session holds the advisory lock of a key
// (its two 32-bit halves, as pg_locks shows them).
var pgHoldsSQL = pgStmts.q("lock_held")

func pgLockHalves(key int64) (int64, int64) {
	k := uint64(key)
	return int64(k >> 32), int64(k & 0xffffffff)
}

// retake tries to take the lock back on a new connection until it is
// held (true), lost to another process, or pgRetakeWithin has passed
// (false: lost for good).
func (w *pgLockWatch) retake(cause string) bool {
	deadline := time.Now().Add(pgRetakeWithin)
	wait := 100 * time.Millisecond
	for {
		why, final := w.retakeOnce()
		if why == "" {
			// The lock's connection seldom drops alone (a server restart, a
			// failover): the pool's idle connections are likely dead too,
			// and are replaced rather than failing their next query.
			w.p.pool.Reset()
			w.set(true, cause, nil)
			return true
		}
		if !final && time.Now().Before(deadline) {
			select {
			case <-w.stop:
				return false
			case <-time.After(wait):
			}
			wait = min(2*wait, time.Second)
			continue
		}
		if !final {
			why = fmt.Sprintf("could not take it back within %s: %s", pgRetakeWithin, why)
		}
		w.set(false, cause, &LockLostError{Job: w.job, Cause: cause, Why: why})
		return false
	}
}

// retakeOnce tries once: why is "" when the lock is this process's again;
// final says that trying again cannot help (another process took the
// job).
func (w *pgLockWatch) retakeOnce() (why string, final bool) {
	ctx, cancel := context.WithTimeout(context.Background(), max(4*pgLockCheckEvery, 5*time.Second))
	defer cancel()
	conn, ok, err := w.p.advisoryConn(ctx, w.key, w.shared)
	if err != nil {
		return err.Error(), false // the server is still away
	}
	if !ok {
		pid := w.p.LockHolder(ctx, w.job)
		if pid == os.Getpid() || pid == 0 && w.shared {
			// This process's dropped session, not ended yet by the server
			// (or, shared, a holder that cannot be named): try again.
			return "the server still counts the lock as the dropped session's", false
		}
		if pid > 0 {
			return fmt.Sprintf("another run holds it now (pid %d)", pid), true
		}
		return "another run holds it now", true
	}
	var epoch int64
	err = conn.QueryRow(ctx, pgStmts.q("lock_epoch"), w.job).Scan(&epoch)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		w.p.unlockConn(conn, w.key, w.shared)
		return w.p.wrap(err).Error(), false
	}
	if epoch != w.epoch {
		w.p.unlockConn(conn, w.key, w.shared)
		return "another run took the job meanwhile (its lock's epoch moved from " + fmt.Sprint(w.epoch) + " to " +
			fmt.Sprint(epoch) + ")", true
	}
	w.mu.Lock()
	w.conn = conn
	w.mu.Unlock()
	return "", false
}

// set records a change and tells the waiters and the notify function.
func (w *pgLockWatch) set(held bool, cause string, lost *LockLostError) {
	w.mu.Lock()
	if w.held && !held {
		w.drops++
	}
	w.held, w.cause = held, cause
	if lost != nil {
		w.lost, w.conn = lost, nil
	}
	close(w.changed)
	w.changed = make(chan struct{})
	fn := w.notify
	w.mu.Unlock()
	if fn != nil {
		var err error
		if lost != nil {
			err = lost
		}
		fn(held, cause, err)
	}
}

func (w *pgLockWatch) onChange(fn func(held bool, cause string, err error)) {
	w.mu.Lock()
	w.notify = fn
	w.mu.Unlock()
}

func (w *pgLockWatch) wait(ctx context.Context) error {
	for {
		w.mu.Lock()
		held, lost, ch := w.held, w.lost, w.changed
		w.mu.Unlock()
		switch {
		case lost != nil:
			return lost
		case held:
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// verify checks the lock's connection now, unless it is being taken back
// or lost, and returns the cause of the drop it found, else of the last
// one ("" while it never dropped). A drop it finds is counted (Drops) by
// the time it returns. (A lock taken back after an earlier drop is
// checked again: that drop's cause alone does not say the connection is
// sound now.)
func (w *pgLockWatch) verify(ctx context.Context) string {
	w.mu.Lock()
	held, cause := w.held, w.cause
	w.mu.Unlock()
	if !held && cause != "" {
		return cause
	}
	reply := make(chan string, 1)
	select {
	case w.kick <- reply:
	case <-w.done:
		return w.dropped()
	case <-ctx.Done():
		return w.dropped()
	}
	select {
	case c := <-reply:
		if c != "" {
			return c
		}
		return w.dropped()
	case <-ctx.Done():
		return w.dropped()
	}
}

func (w *pgLockWatch) dropCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.drops
}

func (w *pgLockWatch) dropped() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cause
}

// lostErr is the lock's *LockLostError once lost for good, else nil.
func (w *pgLockWatch) lostErr() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.lost != nil {
		return w.lost
	}
	return nil
}

// close stops the watcher and unregisters the fence.
func (w *pgLockWatch) close() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
	w.p.fenceMu.Lock()
	if w.p.fences[w.job] == w {
		delete(w.p.fences, w.job)
	}
	w.p.fenceMu.Unlock()
}

// release unlocks the lock (once the watcher stopped), if still held.
func (w *pgLockWatch) release() error {
	w.mu.Lock()
	conn := w.conn
	w.conn = nil
	w.mu.Unlock()
	if conn == nil || conn.IsClosed() {
		return nil
	}
	return w.p.unlockConn(conn, w.key, w.shared)
}

// fence refuses a chunk write of job, inside its transaction tx, unless
// this process's lock of the job is still the current taking of it (the
// epoch it read is job_locks'). The row is read FOR SHARE: an exclusive
// taking waits for this transaction, and once it committed its epoch this
// read sees it. Jobs this process holds no watched lock of (tests that
// write without a lock) are not fenced.
func (p *Postgres) fence(ctx context.Context, tx pgQuerier, job string) error {
	p.fenceMu.Lock()
	w := p.fences[job]
	p.fenceMu.Unlock()
	if w == nil {
		return nil
	}
	if err := w.lostErr(); err != nil {
		return err
	}
	var epoch int64
	err := tx.QueryRow(ctx, pgStmts.q("lock_fence"), job).Scan(&epoch)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	if epoch != w.epoch {
		cause := w.dropped()
		if cause == "" {
			cause = "not seen yet by its watcher"
		}
		return &LockLostError{Job: job, Cause: cause,
			Why: fmt.Sprintf("another run took the job since (its lock's epoch is %d, this run's %d)", epoch, w.epoch)}
	}
	return nil
}
