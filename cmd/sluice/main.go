// Command sluice runs huge LLM batch workloads: it splits a JSONL file of
// requests into provider batches, submits and tracks them in SQLite, survives
// crashes, and merges every result back into one file.
package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"

	"github.com/spf13/cobra"

	"github.com/sluice-batch/sluice"
)

// Exit codes (docs/contract.md).
const (
	exitOK       = 0 // every request succeeded and the output is written
	exitError    = 1 // an error stopped the run
	exitUsage    = 2 // bad usage or bad input
	exitStopped  = 3 // --deadline, --once or a signal stopped with work still running
	exitFailures = 4 // output written, but some requests failed permanently
)

// exitCodes is the exit status of each code of a command's end
// (sluice.ErrorCodeOf): the one place codes become exit statuses.
var exitCodes = map[sluice.ErrorCode]int{
	"":                  exitOK,
	sluice.CodeInternal: exitError,
	sluice.CodeInvalid:  exitUsage,
	sluice.CodeStopped:  exitStopped,
	sluice.CodeFailures: exitFailures,
}

// exitCode is the exit status a command ending with err makes.
func exitCode(err error) int {
	if code, ok := exitCodes[sluice.ErrorCodeOf(err)]; ok {
		return code
	}
	return exitError
}

// withCode gives err the code whose exit status is exit (exitCodes).
func withCode(exit int, err error) error {
	for code, e := range exitCodes {
		if e == exit && code != "" {
			return sluice.WithCode(code, err)
		}
	}
	return err
}

func usageErr(format string, args ...any) error {
	return sluice.Errorf(sluice.CodeInvalid, format, args...)
}

// silent is an end of code without a message (the summary said it all).
func silent(code sluice.ErrorCode) error { return &sluice.Error{Code: code} }

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
	if !sluice.Silent(err) {
		fmt.Fprintln(os.Stderr, "sluice: "+explainBusy(err).Error())
	}
	return exitCode(err)
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
