package tracker_test

import (
	"context"
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
