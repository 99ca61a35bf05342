// Command sluice runs huge LLM batch workloads: it splits a JSONL file of
// requests into provider batches, submits and tracks them in SQLite, survives
// crashes, and merges every result back into one file.
package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"

	"github.com/mattn/go-sqlite3"
	"github.com/spf13/cobra"

	"github.com/sluice-batch/sluice/lifecycle"
	"github.com/sluice-batch/sluice/splitter"
	"github.com/sluice-batch/sluice/tracker"
)

// Exit codes (docs/contract.md).
const (
	exitOK       = 0 // every request succeeded and the output is written
	exitError    = 1 // an error stopped the run
	exitUsage    = 2 // bad usage or bad input
	exitStopped  = 3 // --deadline, --once or a signal stopped with work still running
	exitFailures = 4 // output written, but some requests failed permanently
)

// exitError carries an exit code up to main.
type codeError struct {
	code int
	err  error
}

func (e *codeError) Error() string { return e.err.Error() }
func (e *codeError) Unwrap() error { return e.err }

func withCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &codeError{code: code, err: err}
}

func usageErr(format string, args ...any) error {
	return withCode(exitUsage, fmt.Errorf(format, args...))
}

// silent is an exit code without a message (the summary said it all).
type silent int

func (s silent) Error() string { return fmt.Sprintf("exit %d", int(s)) }

func main() {
	// SLUICE_MEMPROFILE=FILE writes, at exit, a profile of what the command
	// allocated (go tool pprof -sample_index=alloc_space).
	// SLUICE_CPUPROFILE=FILE writes a CPU profile of the whole command
	// (scripts/bench-e2e.sh; read it with go tool pprof).
	if path := os.Getenv("SLUICE_CPUPROFILE"); path != "" {
		if f, err := os.Create(path); err != nil {
			fmt.Fprintln(os.Stderr, "sluice: SLUICE_CPUPROFILE:", err)
		} else if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			fmt.Fprintln(os.Stderr, "sluice: SLUICE_CPUPROFILE:", err)
		} else {
			code := execute(os.Args[1:])
			pprof.StopCPUProfile()
			f.Close()
			exit(code)
		}
	}
	exit(execute(os.Args[1:]))
}

// exit writes the memory profile, if asked for, and exits with code.
func exit(code int) {
	if path := os.Getenv("SLUICE_MEMPROFILE"); path != "" {
		writeMemProfile(path)
	}
	os.Exit(code)
}

func writeMemProfile(path string) {
	runtime.GC() // the profile is as of the last collection
	f, err := os.Create(path)
	if err == nil {
		err = pprof.Lookup("allocs").WriteTo(f, 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sluice: SLUICE_MEMPROFILE:", err)
	}
}

func execute(args []string) int {
	root := newRootCmd()
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	if err == nil {
		return exitOK
	}
	if isUsageError(err) {
		fmt.Fprintf(os.Stderr, "sluice: %v (see '%s --help')\n", err, cmd.CommandPath())
		return exitUsage
	}
	var s silent
	if errors.As(err, &s) {
		return int(s)
	}
	var se sqlite3.Error
	if errors.As(err, &se) && (se.Code == sqlite3.ErrBusy || se.Code == sqlite3.ErrLocked) && !strings.Contains(err.Error(), "locked by another process") {
		busy, _ := busyTimeout()
		err = fmt.Errorf("the state database is locked by another process (set SLUICE_DB_BUSY_TIMEOUT to wait longer than %s): %w", busy, err)
	}
	fmt.Fprintln(os.Stderr, "sluice: "+err.Error())
	var ce *codeError
	var le *splitter.LineError
	var lk *tracker.LockedError
	switch {
	case errors.As(err, &ce):
		return ce.code
	case errors.As(err, &le), errors.Is(err, splitter.ErrNoRequests), errors.Is(err, splitter.ErrCorrupt), errors.Is(err, splitter.ErrBelowMinimum),
		errors.Is(err, lifecycle.ErrBadInput):
		return exitUsage
	case errors.As(err, &lk):
		return exitError
	}
	return exitError
}

func newRootCmd() *cobra.Command {
	g := &globalFlags{}
	root := &cobra.Command{
		Use:   "sluice",
		Short: "Run huge LLM batch workloads through provider batch APIs, crash-safe",
		Long: `sluice splits a JSONL file of requests (the OpenAI batch input format) into
provider batches under each provider's limits, submits them with bounded
concurrency, tracks every file, batch and request in SQLite, survives
crashes and reboots, and merges every result back into one file keyed by the
original custom_ids, in input order.

` + exitCodesHelp,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version(),
		PersistentPreRunE: func(*cobra.Command, []string) error {
			_, err := g.checkLog()
			return err
		},
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.PersistentFlags().StringVar(&g.state, "state", "", "state directory holding the database, chunks and results (default $SLUICE_STATE, else $XDG_STATE_HOME/sluice or ~/.local/state/sluice)")
	root.PersistentFlags().StringVar(&g.db, "db", "", "tracker database: postgres://USER:PASSWORD@HOST:PORT/DBNAME (default $SLUICE_DB; without either, SQLite in the state directory); docs/scale-out.md")
	root.PersistentFlags().StringVar(&g.logFormat, "log-format", "auto", "log format: auto (console on a terminal, JSON lines otherwise), json, console")
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	root.AddCommand(newPlanCmd(g), newRunCmd(g), newStatusCmd(g), newReportCmd(g), newCancelCmd(g), newEmulateCmd(g), newProvidersCmd())
	markRunErrors(root)
	return root
}
