package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/term"

	"github.com/sluice-batch/sluice/tracker"
)

type globalFlags struct {
	state     string
	db        string
	logFormat string
	logLevel  string
}

// stateDir resolves the state directory without a login shell's
// environment, so cron and systemd find the same jobs as the user.
func (g *globalFlags) stateDir() (string, error) {
	if g.state != "" {
		return filepath.Abs(g.state)
	}
	if s := os.Getenv("SLUICE_STATE"); s != "" {
		return filepath.Abs(s)
	}
	if s := os.Getenv("XDG_STATE_HOME"); s != "" && filepath.IsAbs(s) {
		return filepath.Join(s, "sluice"), nil
	}
	home := os.Getenv("HOME")
	if home == "" {
		u, err := user.Current()
		if err != nil {
			return "", fmt.Errorf("cannot find a home directory for the state; set --state or SLUICE_STATE: %w", err)
		}
		home = u.HomeDir
	}
	return filepath.Join(home, ".local", "state", "sluice"), nil
}

// dbURL is the tracker database the user chose: --db, else $SLUICE_DB;
// "" is SQLite in the state directory.
func (g *globalFlags) dbURL() string {
	if g.db != "" {
		return g.db
	}
	return os.Getenv("SLUICE_DB")
}

func (g *globalFlags) openDB(ctx context.Context) (tracker.Backend, error) {
	dir, err := g.stateDir()
	if err != nil {
		return nil, err
	}
	return openTracker(ctx, g.dbURL(), dir)
}

// openTracker opens the tracker: the PostgreSQL database dsn names
// (docs/scale-out.md, "PostgreSQL"), or with dsn "" the SQLite database in
// dir with the options the environment sets. Either way job files live in
// dir. A database that cannot be used is an error here, before any work;
// no error names the password.
func openTracker(ctx context.Context, dsn, dir string) (tracker.Backend, error) {
	switch {
	case dsn == "":
		busy, err := busyTimeout()
		if err != nil {
			return nil, err
		}
		db, err := tracker.OpenOptions(ctx, dir, tracker.Options{BusyTimeout: busy})
		if err != nil {
			return nil, &explained{err} // a locked database's error says so (tracker.LockedHint)
		}
		return db, nil
	case tracker.IsPostgresDSN(dsn):
		return tracker.OpenPostgres(ctx, dsn, dir)
	default:
		return nil, usageErr("--db %s: want a postgres:// (or postgresql://) URL, or none for SQLite in the state directory",
			tracker.RedactDSN(dsn))
	}
}

// busyTimeout is how long a statement waits for another process's lock on
// the state database: $SLUICE_DB_BUSY_TIMEOUT (a Go duration), else the
// tracker's default.
func busyTimeout() (time.Duration, error) {
	v := os.Getenv("SLUICE_DB_BUSY_TIMEOUT")
	if v == "" {
		return tracker.DefaultBusyTimeout, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, usageErr("SLUICE_DB_BUSY_TIMEOUT=%q: want a positive Go duration such as 30s", v)
	}
	return d, nil
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

// logger builds the process logger: a readable console on a terminal,
// zerolog JSON lines otherwise (cron, systemd, CI).
func (g *globalFlags) logger(w *os.File) (zerolog.Logger, error) {
	lvl, err := g.checkLog()
	if err != nil {
		return zerolog.Logger{}, err
	}
	var out io.Writer = w
	if a := terminalArea(w); a != nil {
		out = a // log lines scroll above the progress display
	}
	switch g.logFormat {
	case "json":
	case "console":
		out = zerolog.ConsoleWriter{Out: out, TimeFormat: "15:04:05"}
	case "auto", "":
		if isTerminal(w) {
			out = zerolog.ConsoleWriter{Out: out, TimeFormat: "15:04:05"}
		}
	}
	return zerolog.New(out).Level(lvl).With().Timestamp().Logger(), nil
}

// checkLog validates --log-level and --log-format, for every command
// (the root's PersistentPreRunE), whether it logs or not.
func (g *globalFlags) checkLog() (zerolog.Level, error) {
	lvl, err := zerolog.ParseLevel(strings.ToLower(g.logLevel))
	if err != nil || g.logLevel == "" {
		return lvl, usageErr("--log-level %q: want debug, info, warn or error", g.logLevel)
	}
	switch g.logFormat {
	case "json", "console", "auto", "":
		return lvl, nil
	}
	return lvl, usageErr("--log-format %q: want auto, json or console", g.logFormat)
}
