// Package migrations holds the tracker's schema as numbered SQL files,
// embedded in the binary. Each file is applied in its own transaction, in
// order, and recorded in the schema_version table; a duplicate version is
// an error at start. Versions may have gaps: numbers are handed out to
// branches of work in advance (docs/money.md names 0005 as the ledger's),
// and they land in any order, so the tracker applies every migration it has
// not recorded yet, whatever came before.
package migrations

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
)

//go:embed *.sql
var files embed.FS

// The PostgreSQL tracker's migrations are a numbered set of their own
// (postgres/NNNN_name.sql), recorded in its schema_migrations table: the
// two schemas evolve together but not step for step.
//
//go:embed postgres/*.sql
var pgFiles embed.FS

// Migration is one numbered schema change.
type Migration struct {
	Version int
	Name    string // file name
	SQL     string
}

// All returns the embedded migrations in order.
func All() ([]Migration, error) { return Load(files) }

// Postgres returns the embedded PostgreSQL migrations in order.
func Postgres() ([]Migration, error) {
	sub, err := fs.Sub(pgFiles, "postgres")
	if err != nil {
		return nil, err
	}
	return Load(sub)
}

// Load reads NNNN_name.sql files from fsys, in version order, and checks
// that no two share a version.
func Load(fsys fs.FS) ([]Migration, error) {
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, err
	}
	var ms []Migration
	for _, n := range names {
		num, _, ok := strings.Cut(n, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name must be NNNN_description.sql", n)
		}
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, err
		}
		ms = append(ms, Migration{Version: v, Name: n, SQL: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	for i, m := range ms {
		if i > 0 && m.Version == ms[i-1].Version {
			return nil, fmt.Errorf("migrations %s and %s have the same version %d", ms[i-1].Name, m.Name, m.Version)
		}
	}
	return ms, nil
}
