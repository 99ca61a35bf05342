package tracker_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/internal/testsrv"
	"github.com/sluice-batch/sluice/tracker"
)

// benchDBs are the backends a benchmark runs on, as sub-benchmarks
// db=sqlite and db=postgres (a fresh database on the test server,
// internal/testsrv): planning on PostgreSQL should not be slower.
var benchDBs = []struct {
	name string
	open func(b *testing.B) tracker.Backend
}{
	{"sqlite", func(b *testing.B) tracker.Backend {
		db, err := tracker.Open(context.Background(), filepath.Join(b.TempDir(), "s"))
		if err != nil {
			b.Fatal(err)
		}
		return db
	}},
	{"postgres", func(b *testing.B) tracker.Backend {
		db, err := tracker.OpenPostgres(context.Background(), testsrv.Postgres(b), filepath.Join(b.TempDir(), "s"))
		if err != nil {
			b.Fatal(err)
		}
		return db
	}},
}

// BenchmarkPlanRows records request rows as the splitter does: grouped by
// chunk, 512 per call when the sink takes batches, on each backend.
// PostgreSQL takes one COPY per call (one per row unbatched, a path the
// splitter does not use).
func BenchmarkPlanRows(b *testing.B) {
	for _, batched := range []bool{false, true} {
		for _, be := range benchDBs {
			b.Run(fmt.Sprintf("batched=%v/db=%s", batched, be.name), func(b *testing.B) {
				ctx := context.Background()
				db := be.open(b)
				defer db.Close()
				benchPlanRows(b, ctx, db, batched)
			})
		}
	}
}

func benchPlanRows(b *testing.B, ctx context.Context, db tracker.Backend, batched bool) {
	p, err := db.BeginPlan(ctx, &sluice.Job{ID: "j", Provider: "openai", Input: "/x", Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	rows := make([]sluice.Request, 0, 512)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := sluice.Request{Ordinal: int64(i), Line: int64(i + 1), CustomID: fmt.Sprintf("req-%x-%d", i*2654435761, i),
			Chunk: int64(i/5000 + 1), Index: i % 5000, Offset: int64(i) * 300, Length: 300, Tokens: 70}
		if !batched {
			if err := p.AddRequest(&r); err != nil {
				b.Fatal(err)
			}
			continue
		}
		rows = append(rows, r)
		if len(rows) == cap(rows) {
			if err := p.AddRequests(rows); err != nil {
				b.Fatal(err)
			}
			rows = rows[:0]
		}
	}
	if len(rows) > 0 {
		if err := p.AddRequests(rows); err != nil {
			b.Fatal(err)
		}
	}
	if err := p.Commit(ctx, sluice.Fingerprint{}, int64(b.N), 0); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkFinishChunk records the end of a 50,000-request chunk: every
// request's outcome in one transaction, as the dispatcher does, on each
// backend.
func BenchmarkFinishChunk(b *testing.B) {
	for _, be := range benchDBs {
		b.Run("db="+be.name, func(b *testing.B) { benchFinishChunk(b, be.open) })
	}
}

func benchFinishChunk(b *testing.B, open func(*testing.B) tracker.Backend) {
	// The dispatcher's context can be cancelled, as here.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const n = 50_000
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		db := open(b)
		p, _ := db.BeginPlan(ctx, &sluice.Job{ID: "j", Provider: "openai", Input: "/x", Dir: b.TempDir()})
		rows := make([]sluice.Request, n)
		fin := &sluice.Finish{From: sluice.ChunkPending}
		for k := range rows {
			rows[k] = sluice.Request{Ordinal: int64(k), Line: int64(k + 1), CustomID: fmt.Sprint("id-", k), Chunk: 1, Index: k}
			fin.Outcomes = append(fin.Outcomes, sluice.Outcome{Ordinal: int64(k), State: sluice.RequestSucceeded})
		}
		p.AddRequests(rows)
		p.AddChunk(&sluice.Chunk{ID: 1, URL: "u", Model: "m", Path: "p", Requests: n})
		p.Commit(ctx, sluice.Fingerprint{}, n, 0)
		cs, _ := db.Chunks(ctx, "j")
		fin.Chunk = cs[0]
		fin.Chunk.State = sluice.ChunkDone
		b.StartTimer()
		if err := db.FinishChunk(ctx, fin); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		db.Close()
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "us/request")
}
