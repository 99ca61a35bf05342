package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/mattn/go-sqlite3"
	"github.com/spf13/cobra"

	"github.com/sluice-batch/sluice"
)

// exitCodesHelp is the exit code table of README.md, shown by --help.
const exitCodesHelp = `Exit codes:
  0  every request succeeded and the output is written
  1  an error stopped the run (the network down for good, a full disk, a
     bad key, a locked state database); run again once it is fixed
  2  bad usage or bad input (unknown flag, missing argument or --out, --out
     naming the input, an empty or corrupt input, a bad line)
  3  stopped with work left (--deadline, --once, --max-cost, Ctrl-C): run
     the same command again (with a higher cap) to continue
  4  finished and the output is written, but some requests failed or some
     input lines were rejected (see the errors file)`

// ranError marks an error returned by a command's RunE: everything else
// cobra returns (an unknown command or flag, a bad flag value, a wrong
// number of arguments, a required flag not set) is bad usage, exit 2.
type ranError struct{ err error }

func (e *ranError) Error() string { return e.err.Error() }
func (e *ranError) Unwrap() error { return e.err }

// markRunErrors wraps the RunE of cmd and of every command under it, so
// execute can tell the command's own errors from cobra's usage errors.
func markRunErrors(cmd *cobra.Command) {
	if run := cmd.RunE; run != nil {
		cmd.RunE = func(c *cobra.Command, args []string) error {
			if err := run(c, args); err != nil {
				return &ranError{err}
			}
			return nil
		}
	}
	for _, sub := range cmd.Commands() {
		markRunErrors(sub)
	}
}

// isUsageError reports whether err came from cobra rather than a command.
func isUsageError(err error) bool {
	var re *ranError
	return !errors.As(err, &re)
}

// version is what `sluice --version` prints: the module version, the VCS
// commit the binary was built from (with "+dirty" when the tree had local
// changes), and the Go toolchain. A binary built outside a module or a VCS
// checkout says "(devel)" and "commit unknown".
func version() string {
	ver, commit, when, dirty := "(devel)", "", "", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v := bi.Main.Version; v != "" {
			ver = v
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.time":
				when = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "sluice %s", ver)
	switch {
	case commit == "":
		b.WriteString(" (commit unknown)")
	default:
		fmt.Fprintf(&b, " (commit %s", commit)
		if dirty && !strings.HasSuffix(ver, "+dirty") {
			b.WriteString("+dirty")
		}
		if when != "" {
			fmt.Fprintf(&b, ", %s", when)
		}
		b.WriteString(")")
	}
	fmt.Fprintf(&b, " %s %s/%s", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return b.String()
}

// stoppedBySignal turns the error of a run whose calls in flight a second
// signal cancelled into exit 3: the run was stopped with work left, and
// the next run reconciles what was in flight. It is not an error of the
// run ("context canceled", exit 1).
func stoppedBySignal(err error, cancelled bool) error {
	if err == nil || !cancelled || !errors.Is(err, context.Canceled) {
		return err
	}
	fmt.Fprintln(os.Stderr, "sluice: stopped by a second signal with work left; calls in flight were cancelled and the state is saved: run the same command again to continue")
	return silent(sluice.CodeStopped)
}

// explained is an error that already says what it is about (the state
// database's open, which explains a lock itself).
type explained struct{ err error }

func (e *explained) Error() string { return e.err.Error() }
func (e *explained) Unwrap() error { return e.err }

// explainBusy says, of SQLite's "database is locked" met past the open,
// that another process holds the state database and how to wait longer.
func explainBusy(err error) error {
	var se sqlite3.Error
	var ex *explained
	if !errors.As(err, &se) || se.Code != sqlite3.ErrBusy && se.Code != sqlite3.ErrLocked || errors.As(err, &ex) {
		return err
	}
	busy, _ := busyTimeout()
	return fmt.Errorf("the state database is locked by another process (set SLUICE_DB_BUSY_TIMEOUT to wait longer than %s): %w", busy, err)
}
