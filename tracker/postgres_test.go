package tracker_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/internal/testsrv"
	"github.com/sluice-batch/sluice/migrations"
	"github.com/sluice-batch/sluice/tracker"
)

// Tests of the PostgreSQL backend's own mechanics; its contract is the
// conformance suite's (conformance_test.go).

func TestRedactDSN(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"postgres://u:s3cret@db:5432/jobs?sslmode=require": "postgres://u:xxxxx@db:5432/jobs?sslmode=require",
		"postgresql://u@db/jobs":                           "postgresql://u@db/jobs",
		"postgres://db/jobs?user=u&password=s3cret":        "postgres://db/jobs?password=xxxxx&user=u",
		"host=db user=u password=s3cret dbname=jobs":       "host=db user=u password=xxxxx dbname=jobs",
		"host=db password='s3 cret' dbname=jobs":           "host=db password=xxxxx dbname=jobs",
		"mysql://root:s3cret@localhost/x":                  "mysql://root:xxxxx@localhost/x",
		"postgres://u:s3cret@[bad":                         "postgres://...",
	} {
		if got := tracker.RedactDSN(in); got != want {
			t.Errorf("RedactDSN(%q) = %q, want %q", in, got, want)
		}
		if strings.Contains(tracker.RedactDSN(in), "s3") {
			t.Errorf("RedactDSN(%q) keeps the password", in)
		}
	}
}

// TestPostgresMigrations: versions land in any order and each once, even
// when several processes open a new database at once; a version this
// binary does not know is refused before anything is applied.
func TestPostgresMigrations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testsrv.Postgres(t)
	dir := filepath.Join(t.TempDir(), "state")
	gap := fstest.MapFS{"0001_a.sql": {Data: []byte("CREATE TABLE a (x int);")}, "0003_c.sql": {Data: []byte("CREATE TABLE c (x int);")}}
	ms, _ := migrations.Load(gap)
	// Opened by eight at once: the advisory lock applies each version once.
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db, err := tracker.OpenPostgresWith(ctx, dsn, dir, ms)
			if err == nil {
				db.Close()
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent opens: %v", err)
	}
	gap["0002_b.sql"] = &fstest.MapFile{Data: []byte("CREATE TABLE b (x int);")}
	ms, _ = migrations.Load(gap)
	db, err := tracker.OpenPostgresWith(ctx, dsn, dir, ms)
	if err != nil {
		t.Fatal(err)
	}
	var n, tables int
	db.Pool().QueryRow(ctx, `SELECT COUNT(*) FROM schema_migrations`).Scan(&n)
	db.Pool().QueryRow(ctx, `SELECT COUNT(*) FROM pg_tables WHERE tablename IN ('a', 'b', 'c')`).Scan(&tables)
	db.Close()
	if n != 3 || tables != 3 {
		t.Errorf("%d versions recorded, %d tables; want 3 and 3", n, tables)
	}
	_, err = tracker.OpenPostgresWith(ctx, dsn, dir, ms[:1])
	if err == nil || !strings.Contains(err.Error(), "newer than this sluice knows: upgrade sluice") {
		t.Errorf("a binary that knows fewer versions: %v, want refused", err)
	}
	// A failing migration leaves nothing of itself.
	bad := fstest.MapFS{"0001_a.sql": gap["0001_a.sql"], "0002_b.sql": gap["0002_b.sql"], "0003_c.sql": gap["0003_c.sql"],
		"0004_d.sql": {Data: []byte("CREATE TABLE d (x int); SELECT no_such_function();")}}
	ms, _ = migrations.Load(bad)
	if _, err := tracker.OpenPostgresWith(ctx, dsn, dir, ms); err == nil || !strings.Contains(err.Error(), "0004_d.sql") {
		t.Errorf("a failing migration: %v, want its name", err)
	}
	db, err = tracker.OpenPostgresWith(ctx, dsn, dir, ms[:3])
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.Pool().QueryRow(ctx, `SELECT COUNT(*) FROM pg_tables WHERE tablename = 'd'`).Scan(&tables)
	if tables != 0 {
		t.Error("a failed migration left its table")
	}
}

// TestPostgresSchemaMirrorsSQLite: every column the SQLite schema has
// after its migrations is in the PostgreSQL schema (offset is byte_offset
// there), so the two backends hold the same facts.
func TestPostgresSchemaMirrorsSQLite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lite := open(t)
	pg := openPostgres(t, testsrv.Postgres(t))
	// cols reads the one text column of rows into a set.
	cols := func(q string, rows interface {
		Next() bool
		Scan(...any) error
		Err() error
	}, err error) map[string]bool {
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		m := map[string]bool{}
		for rows.Next() {
			var s string
			rows.Scan(&s)
			m[s] = true
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return m
	}
	pgRows, err := pg.Pool().Query(ctx, `SELECT table_name || '.' || column_name FROM information_schema.columns WHERE table_schema = 'public'`)
	if err == nil {
		defer pgRows.Close()
	}
	pgCols := cols("pg", pgRows, err)
	liteRows, err := lite.SQL().Query(`SELECT m.name || '.' || p.name FROM sqlite_master m JOIN pragma_table_info(m.name) p
			WHERE m.type = 'table' AND m.name NOT IN ('schema_version')`)
	if err == nil {
		defer liteRows.Close()
	}
	liteCols := cols("sqlite", liteRows, err)
	if len(liteCols) < 50 {
		t.Fatalf("only %d SQLite columns found", len(liteCols))
	}
	// SQLite's paged plans (tracker/pages.go, migrations/0009): PostgreSQL
	// keeps a row per request, written by COPY, and needs none of these.
	sqliteOnly := map[string]bool{"request_pages.id": true, "request_pages.n": true, "request_pages.data": true,
		"jobs.paged": true, "chunks.first_ordinal": true, "chunks.last_ordinal": true, "chunks.paged": true,
		"chunks.overlaid": true, "chunks.id_sum": true, "chunks.id_mix": true, "ledger.chunk": true, "ledger.custom_id": true}
	for c := range liteCols {
		if sqliteOnly[c] {
			continue
		}
		pc := strings.Replace(c, ".offset", ".byte_offset", 1)
		if !pgCols[pc] {
			t.Errorf("SQLite column %s is not in the PostgreSQL schema (as %s)", c, pc)
		}
	}
}

// TestPostgresFinishChunkAllocatesIDs: new chunks with placeholder ids (0
// or less) get ids after the job's highest inside FinishChunk; two
// finishes of one job at once, each on its own connection, never hand out
// the same id (the job's row is locked while ids are allocated).
func TestPostgresFinishChunkAllocatesIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openPostgres(t, testsrv.Postgres(t))
	const chunks = 8
	p, err := db.BeginPlan(ctx, &sluice.Job{ID: "j", Provider: "openai", Input: "/in", Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	var rs []sluice.Request
	for c := 1; c <= chunks; c++ {
		for i := 0; i < 2; i++ {
			o := int64((c-1)*2 + i)
			rs = append(rs, sluice.Request{Ordinal: o, Line: o + 1, CustomID: fmt.Sprint("r", o), Chunk: int64(c), Index: i})
		}
		if err := p.AddChunk(&sluice.Chunk{ID: int64(c), URL: "u", Model: "m", Path: fmt.Sprint("c", c), Requests: 2}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.AddRequests(rs); err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(ctx, sluice.Fingerprint{}, int64(len(rs)), 0); err != nil {
		t.Fatal(err)
	}
	cs, _ := db.Chunks(ctx, "j")
	var wg sync.WaitGroup
	errs := make([]error, chunks)
	fins := make([]*sluice.Finish, chunks)
	for i, c := range cs {
		c.State = sluice.ChunkFailed
		o := int64(i * 2)
		fins[i] = &sluice.Finish{Chunk: c, From: sluice.ChunkPending,
			Moved: []sluice.Request{{Ordinal: o, Chunk: -1, Attempt: 2}, {Ordinal: o + 1, Chunk: -2, Attempt: 2}},
			NewChunks: []*sluice.Chunk{{ID: -1, Attempt: 2, URL: "u", Model: "m", Path: "a", Requests: 1, State: sluice.ChunkPending},
				{ID: -2, Attempt: 2, URL: "u", Model: "m", Path: "b", Requests: 1, State: sluice.ChunkPending}}}
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = db.FinishChunk(ctx, fins[i]) }()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	seen := map[int64]bool{}
	for _, f := range fins {
		for k, c := range f.NewChunks {
			if c.ID <= chunks || seen[c.ID] {
				t.Fatalf("new chunk id %d: want a fresh id past %d, each once", c.ID, chunks)
			}
			seen[c.ID] = true
			if f.Moved[k].Chunk != c.ID {
				t.Errorf("moved request names chunk %d, its new chunk is %d", f.Moved[k].Chunk, c.ID)
			}
			var n int
			db.ChunkRequests(ctx, "j", c.ID, func(*sluice.Request) error { n++; return nil })
			if n != 1 {
				t.Errorf("chunk %d has %d requests, want 1", c.ID, n)
			}
		}
	}
	if all, _ := db.Chunks(ctx, "j"); len(all) != 3*chunks {
		t.Errorf("%d chunks, want %d", len(all), 3*chunks)
	}
	// The other way to name them: new chunks with id 0, moved requests
	// naming NewChunks[i] as -1-i.
	c, err := db.Chunk(ctx, "j", fins[0].NewChunks[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	c.State = sluice.ChunkFailed
	f := &sluice.Finish{Chunk: c, From: sluice.ChunkPending,
		Moved:     []sluice.Request{{Ordinal: 0, Chunk: -1, Attempt: 3}},
		NewChunks: []*sluice.Chunk{{Attempt: 3, URL: "u", Model: "m", Path: "x", Requests: 1, State: sluice.ChunkPending}}}
	if err := db.FinishChunk(ctx, f); err != nil {
		t.Fatal(err)
	}
	if f.NewChunks[0].ID != 3*chunks+1 || f.Moved[0].Chunk != f.NewChunks[0].ID {
		t.Errorf("id 0 and ref -1: new chunk %d, moved to %d; want %d for both", f.NewChunks[0].ID, f.Moved[0].Chunk, 3*chunks+1)
	}
	if _, err := db.Chunk(ctx, "j", 999); !errors.Is(err, tracker.ErrNotFound) {
		t.Errorf("Chunk of a chunk that is not there: %v, want ErrNotFound", err)
	}
}
