package tracker

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/sluice-batch/sluice/internal/check"
)

// TestStatementsNamedInGoExist: every statement the package names
// (q("..."), partQ("...", ...), withDests("...", ...)) is in a dialect's
// files, and a statement only one database has is named only by its
// driver's code. A name missing would panic at its first use.
func TestStatementsNamedInGoExist(t *testing.T) {
	t.Parallel()
	sqlite, pg := dialect("sqlite"), dialect("postgres")
	named := regexp.MustCompile(`(sqliteStmts|pgStmts|stmts|[a-z]+)\.(?:q|partQ|withDests)\("([a-z0-9_]+)"[,)]`)
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range named.FindAllStringSubmatch(string(b), -1) {
			seen++
			_, inSQLite := sqlite[m[2]]
			_, inPG := pg[m[2]]
			switch {
			case m[1] == "sqliteStmts" && !inSQLite:
				t.Errorf("%s: SQLite has no statement %s", f, m[2])
			case m[1] == "pgStmts" && !inPG:
				t.Errorf("%s: PostgreSQL has no statement %s", f, m[2])
			case !inSQLite && !inPG:
				t.Errorf("%s: no statement %s in sql/", f, m[2])
			}
		}
	}
	if seen < 100 {
		t.Errorf("found %d statements named in Go; the pattern no longer matches the code", seen)
	}
	for name, q := range dialect("sqlite") {
		if regexp.MustCompile(`\$[0-9]`).MatchString(q) {
			t.Errorf("SQLite's %s has a numbered placeholder", name)
		}
	}
}

// TestNumbered: PostgreSQL's driver numbers ? placeholders in order,
// leaving quoted text alone.
func TestNumbered(t *testing.T) {
	t.Parallel()
	check.Table(t, "numbered", numbered, map[string]string{
		`UPDATE t SET a = ?, b = '?' WHERE c = ? AND d = "x?"`: `UPDATE t SET a = $1, b = '?' WHERE c = $2 AND d = "x?"`,
		`SELECT 1`:               `SELECT 1`,
		`SELECT $1 FROM t`:       `SELECT $1 FROM t`,
		`IN (?, ?, ?) AND x=?`:   `IN ($1, $2, $3) AND x=$4`,
		`WHERE s = 'it''s' OR ?`: `WHERE s = 'it''s' OR $1`,
	})
}
