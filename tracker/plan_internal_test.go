package tracker

import (
	"bytes"
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-batch/sluice"
)

// TestChunkRequestsUsesTheIndex: reading a chunk's requests searches the
// requests_chunk index for the job's key and the chunk, in index order,
// rather than scanning every request of the database and sorting (what the
// statement did with the job's key as a subquery: ~25x slower at 1M rows).
func TestChunkRequestsUsesTheIndex(t *testing.T) {
	t.Parallel()
	got := queryPlan(t, chunkRequestsSQL, maxOrdinal, 1, 1)
	if !strings.Contains(got, "SEARCH requests USING INDEX requests_chunk") || strings.Contains(got, "TEMP B-TREE") {
		t.Errorf("query plan: %s", got)
	}
}

// TestSettleCheckReadsOnlyTheIndex: the check that a chunk's outcomes
// name every request left in it reads the requests_chunk index alone, not
// a row (settleCheckSQL).
func TestSettleCheckReadsOnlyTheIndex(t *testing.T) {
	t.Parallel()
	if got := queryPlan(t, settleCheckSQL, maxOrdinal, 1, 1); !strings.Contains(got, "SEARCH requests USING COVERING INDEX requests_chunk") {
		t.Errorf("query plan: %s", got)
	}
}

// queryPlan returns SQLite's plan for q on a new state database, its
// steps joined by "; ".
func queryPlan(t *testing.T, q string, args ...any) string {
	t.Helper()
	ctx := context.Background()
	d, err := Open(ctx, filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	rows, err := d.db.QueryContext(ctx, `EXPLAIN QUERY PLAN `+q, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(plan, "; ")
}

// TestLookupsSkippedOnAnEmptyLedger: a plan that begins with no answer in
// the ledger (the first job of a state directory) looks nothing up; one
// that begins with an answer does.
func TestLookupsSkippedOnAnEmptyLedger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, err := Open(ctx, filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	plan := func(id string) *Plan {
		w, err := d.BeginPlan(ctx, &sluice.Job{ID: id, Provider: "openai", Input: "/" + id, Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		p := w.(*Plan)
		if err := p.LookupReuse([][]byte{[]byte("0123456789abcdef")}, func(int, sluice.Answer) error { return nil }); err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := plan("a")
	if p.lookConn != nil {
		t.Error("a plan on an empty ledger opened its lookup connection")
	}
	p.Abort(ctx)
	if _, err := d.db.ExecContext(ctx, `INSERT INTO ledger (key, request, offset, length) VALUES (x'00', 1, 0, 1)`); err != nil {
		t.Fatal(err)
	}
	p = plan("b")
	if p.lookConn == nil {
		t.Error("a plan with answers in the ledger looked nothing up")
	}
	p.Abort(ctx)
}

// TestPageBytesAreFreshEachRow: eachPageEntry keeps a page's data (custom_id
// strings point into it) past the row it was scanned from, as the driver
// gave it (pageBlob), which database/sql allows a driver to reuse. The
// SQLite driver gives each row's blob a fresh Go copy; this holds it to
// that, so that a driver upgrade that reuses its buffers fails here, not in
// a run.
func TestPageBytesAreFreshEachRow(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("sqlite3", filepath.Join(t.TempDir(), "raw.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE t (id INTEGER PRIMARY KEY, b BLOB)`); err != nil {
		t.Fatal(err)
	}
	want := [][]byte{bytes.Repeat([]byte{1}, 5000), bytes.Repeat([]byte{2}, 5000), bytes.Repeat([]byte{3}, 70)}
	for i, b := range want {
		if _, err := db.Exec(`INSERT INTO t VALUES (?, ?)`, i, b); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := db.Query(`SELECT b FROM t ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	var kept []pageBlob
	for rows.Next() {
		var b pageBlob
		if err := rows.Scan(&b); err != nil {
			t.Fatal(err)
		}
		kept = append(kept, b)
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if !bytes.Equal(kept[i], want[i]) {
			t.Fatalf("row %d's blob changed after the next rows were read", i)
		}
	}
	// Text would come in a buffer database/sql reuses: refused.
	if err := new(pageBlob).Scan("text"); err == nil {
		t.Fatal("a page given as text was taken")
	}
}
