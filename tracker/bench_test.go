package tracker_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/tracker"
)

// BenchmarkPlanRows records request rows as the splitter does: grouped by
// chunk, 512 per call when the sink takes batches.
func BenchmarkPlanRows(b *testing.B) {
	for _, batched := range []bool{false, true} {
		b.Run(fmt.Sprintf("batched=%v", batched), func(b *testing.B) {
			ctx := context.Background()
			db, err := tracker.Open(ctx, filepath.Join(b.TempDir(), "s"))
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
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
		})
	}
}

// BenchmarkFinishChunk records the end of a 50,000-request chunk of a
// 200,000-request job: every request's outcome in one transaction, as the
// dispatcher does, with (ledger=true, as in a run) or without the ledger
// rows of the successes.
func BenchmarkFinishChunk(b *testing.B) {
	for _, ledger := range []bool{false, true} {
		b.Run(fmt.Sprintf("ledger=%v", ledger), func(b *testing.B) { benchFinishChunk(b, ledger) })
	}
}

func benchFinishChunk(b *testing.B, ledger bool) {
	// The dispatcher's context can be cancelled, as here.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const n, per = 200_000, 50_000
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		db, err := tracker.Open(ctx, filepath.Join(b.TempDir(), "s"))
		if err != nil {
			b.Fatal(err)
		}
		p, _ := db.BeginPlan(ctx, &sluice.Job{ID: "j", Provider: "openai", Input: "/x", Dir: b.TempDir()})
		rows := make([]sluice.Request, n)
		fin := &sluice.Finish{From: sluice.ChunkPending}
		for k := range rows {
			rows[k] = sluice.Request{Ordinal: int64(k), Line: int64(k + 1), CustomID: fmt.Sprint("id-", k), Chunk: int64(k/per + 1), Index: k % per}
			if ledger {
				bk := sha256.Sum256([]byte(fmt.Sprint("body-", i, "-", k)))
				rows[k].BodyKey = bk[:16]
			}
			if k/per == 2 {
				fin.Outcomes = append(fin.Outcomes, sluice.Outcome{Ordinal: int64(k), State: sluice.RequestSucceeded,
					Offset: int64(k%per) * 700, Length: 700})
			}
		}
		p.AddRequests(rows)
		for c := 1; c <= n/per; c++ {
			p.AddChunk(&sluice.Chunk{ID: int64(c), URL: "u", Model: "m", Path: "p", Requests: per})
		}
		p.Commit(ctx, sluice.Fingerprint{}, n, 0)
		cs, _ := db.Chunks(ctx, "j")
		fin.Chunk = cs[2]
		fin.Chunk.State = sluice.ChunkDone
		b.StartTimer()
		if err := db.FinishChunk(ctx, fin); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		db.Close()
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*per), "us/request")
}

// BenchmarkChunkRequests reads one 50,000-request chunk of a 200,000-request
// job, as conclude does when a batch ends.
func BenchmarkChunkRequests(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const n, per = 200_000, 50_000
	db, err := tracker.Open(ctx, filepath.Join(b.TempDir(), "s"))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	p, err := db.BeginPlan(ctx, &sluice.Job{ID: "j", Provider: "openai", Input: "/x", Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	rows := make([]sluice.Request, 0, 512)
	for k := 0; k < n; k++ {
		rows = append(rows, sluice.Request{Ordinal: int64(k), Line: int64(k + 1), CustomID: fmt.Sprint("req-", k),
			Chunk: int64(k/per + 1), Index: k % per, Offset: int64(k%per) * 700, Length: 700, Tokens: 150})
		if len(rows) == cap(rows) || k == n-1 {
			if err := p.AddRequests(rows); err != nil {
				b.Fatal(err)
			}
			rows = rows[:0]
		}
	}
	for c := 1; c <= n/per; c++ {
		p.AddChunk(&sluice.Chunk{ID: int64(c), URL: "u", Model: "m", Path: "p", Requests: per})
	}
	if err := p.Commit(ctx, sluice.Fingerprint{}, n, 0); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		got := 0
		if err := db.ChunkRequests(ctx, "j", 3, func(*sluice.Request) error { got++; return nil }); err != nil || got != per {
			b.Fatal(got, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*per), "ns/request")
}

// BenchmarkExpected reads every (ordinal, custom_id) of a 200,000-request
// job in order, as the merge does.
func BenchmarkExpected(b *testing.B) {
	ctx := context.Background()
	const n = 200_000
	db, err := tracker.Open(ctx, filepath.Join(b.TempDir(), "s"))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	p, _ := db.BeginPlan(ctx, &sluice.Job{ID: "j", Provider: "openai", Input: "/x", Dir: b.TempDir()})
	rows := make([]sluice.Request, n)
	for k := range rows {
		rows[k] = sluice.Request{Ordinal: int64(k), Line: int64(k + 1), CustomID: fmt.Sprint("req-", k), Chunk: 1, Index: k}
	}
	p.AddRequests(rows)
	p.AddChunk(&sluice.Chunk{ID: 1, URL: "u", Model: "m", Path: "p", Requests: n})
	if err := p.Commit(ctx, sluice.Fingerprint{}, n, 0); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		got := 0
		if err := db.Expected(ctx, "j", func(o int64, id string) bool { got++; return o >= 0 }); err != nil || got != n {
			b.Fatal(got, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/request")
}
