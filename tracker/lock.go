package tracker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ErrLocked is returned when another live process holds a job's lock.
var ErrLocked = errors.New("job is locked by another sluice process")

// LockedError names the process holding a job's lock.
type LockedError struct {
	Job string
	PID int // 0 when the holder did not write its pid yet
}

func (e *LockedError) Error() string {
	if e.PID > 0 {
		return fmt.Sprintf("job %s is being driven by another sluice process (pid %d); wait for it or stop it", e.Job, e.PID)
	}
	return fmt.Sprintf("job %s is being driven by another sluice process (or by workers started with --join: 'sluice status %s' lists them); wait for them, stop them, or start this one with --join too", e.Job, e.Job)
}

func (e *LockedError) Unwrap() error { return ErrLocked }

// Lock is a per-job lock that dies with its process: on SQLite flock(2)
// on a file beside the database, which the kernel releases when the
// process dies however it dies; on PostgreSQL a session advisory lock on a
// connection of its own, which the server releases when the connection
// drops (postgres_lock.go).
type Lock struct {
	release func() error
	// watch, on PostgreSQL, watches the lock's connection and takes the
	// lock back when it drops (postgres_lockwatch.go); nil for a lock that
	// lives as long as its process (flock).
	watch *pgLockWatch
}

// ErrLockLost is matched by the error of a lock lost while its process
// lived (LockLostError).
var ErrLockLost = errors.New("lost the job lock")

// LockLostError says why a job's lock was lost for good while its process
// ran: on PostgreSQL, the lock's connection dropped and the lock could not
// be taken back.
type LockLostError struct {
	Job   string
	Cause string // what happened to the connection
	Why   string // why it could not be taken back
}

func (e *LockLostError) Error() string {
	return fmt.Sprintf("lost the job lock of job %s: PostgreSQL connection dropped (%s); %s; this run stopped without calling the provider again",
		e.Job, e.Cause, e.Why)
}

func (e *LockLostError) Unwrap() error { return ErrLockLost }

// Wait returns nil while the lock is held. While it is being taken back
// after its connection dropped, it waits until it is (nil), until it is
// lost for good (its *LockLostError), or until ctx ends (ctx's error).
// A lock that cannot be lost returns nil at once. Every provider call of
// a run waits here first (lifecycle/lockgate.go).
func (l *Lock) Wait(ctx context.Context) error {
	if l == nil || l.watch == nil {
		return nil
	}
	return l.watch.wait(ctx)
}

// Drops counts the times the lock's connection dropped in this lock's
// life; 0 for a lock that cannot be lost.
func (l *Lock) Drops() int {
	if l == nil || l.watch == nil {
		return 0
	}
	return l.watch.dropCount()
}

// Verify checks the lock's connection now (unless a drop was seen
// already) and returns what the last drop was (taken back since or not):
// "" while it never dropped. A
// run that fails asks, so that a failure the database's going away caused
// names it even before the watcher's next look.
func (l *Lock) Verify(ctx context.Context) string {
	if l == nil || l.watch == nil {
		return ""
	}
	return l.watch.verify(ctx)
}

// Lost returns the lock's *LockLostError once it is lost for good, else
// nil.
func (l *Lock) Lost() error {
	if l == nil || l.watch == nil {
		return nil
	}
	return l.watch.lostErr()
}

// OnChange sets fn to be called, from the lock's watcher, when its
// connection drops (held false, cause), when it is taken back (held true)
// and when it is lost for good (held false, err a *LockLostError). A lock
// that cannot be lost never calls it.
func (l *Lock) OnChange(fn func(held bool, cause string, err error)) {
	if l != nil && l.watch != nil {
		l.watch.onChange(fn)
	}
}

// LockJob takes the job's lock without waiting.
func (d *DB) LockJob(job string) (*Lock, error) { return d.lockJob(job, false) }

// LockJobShared takes the job's lock shared with other workers of the job
// (`sluice run --join`; docs/scale-out.md, "Many workers") without
// waiting: any number of shared holders at once, none while LockJob's
// exclusive holder has it, and LockJob fails while any shared holder
// does. Leases, not this lock, keep the workers off each other's chunks.
func (d *DB) LockJobShared(job string) (*Lock, error) { return d.lockJob(job, true) }

func (d *DB) lockJob(job string, shared bool) (*Lock, error) {
	dir := filepath.Join(d.dir, "locks")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, job+".lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	how := syscall.LOCK_EX
	if shared {
		how = syscall.LOCK_SH
	}
	if err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB); err != nil {
		b, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			return nil, &LockedError{Job: job, PID: pid}
		}
		return nil, fmt.Errorf("lock job %s: %w", job, err)
	}
	if shared {
		// Many hold it: none writes its pid (the workers table names them),
		// and a pid left by a killed exclusive holder is stale.
		f.Truncate(0)
		return &Lock{release: f.Close}, nil
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &Lock{release: func() error {
		f.Truncate(0)
		return f.Close() // closing the descriptor releases the flock
	}}, nil
}

// LockHolder implements Backend: the pid written in the job's lock file,
// if that process is alive.
func (d *DB) LockHolder(_ context.Context, job string) int {
	b, err := os.ReadFile(filepath.Join(d.dir, "locks", job+".lock"))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return 0 // killed without cleaning up: the kernel freed the lock
	}
	return pid
}

// Unlock releases the lock.
func (l *Lock) Unlock() error {
	if l == nil || l.release == nil {
		return nil
	}
	if l.watch != nil {
		l.watch.close()
	}
	err := l.release()
	l.release = nil
	return err
}

// TryLockPlan takes the job's plan lock (a flock on locks/plan/JOB.lock,
// a file of its own beside the job's lock) without waiting: ok false when another process
// on this machine holds it. A worker plans only while it holds this lock
// as well as the job's plan role (docs/scale-out.md, "Many workers"): a
// planner's heartbeats can be starved of SQLite's write lock by its own
// plan's transactions for longer than a lease lives, and the kernel frees
// the flock the moment the planner dies, which no lease can tell.
func (d *DB) TryLockPlan(job string) (l *Lock, ok bool, err error) {
	dir := filepath.Join(d.dir, "locks", "plan")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, err
	}
	f, err := os.OpenFile(filepath.Join(dir, job+".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, false, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("plan lock of job %s: %w", job, err)
	}
	return &Lock{release: f.Close}, true, nil // no pid written
}
