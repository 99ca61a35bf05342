package tracker

import (
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

// Lock is an exclusive per-job lock: flock(2) on a file beside the
// database. The kernel releases it when the process dies, however it dies.
type Lock struct {
	f      *os.File
	shared bool
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
		return &Lock{f: f, shared: true}, nil
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &Lock{f: f}, nil
}

// Unlock releases the lock.
func (l *Lock) Unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	if !l.shared {
		l.f.Truncate(0)
	}
	err := l.f.Close() // closing the descriptor releases the flock
	l.f = nil
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
	return &Lock{f: f, shared: true}, true, nil // shared: no pid written
}
