package tracker_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluice-batch/sluice"
)

func key(i int) []byte { return []byte(fmt.Sprintf("key-%012d", i)) }

// TestLedgerLookupInBatches: answers recorded when a chunk finishes are
// found by a later plan, each at its own index, across lookup batches;
// unknown keys, the plan's own job and failed requests give nothing; a
// deleted job takes its answers with it.
func testLedgerLookupInBatches(t *testing.T, db *testDB) {
	ctx := context.Background()
	const n = 700
	a := &sluice.Job{ID: "a", Provider: "openai", Input: "/a", Dir: t.TempDir(), MaxAttempts: 3}
	p, err := db.BeginPlan(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if err := p.AddRequest(&sluice.Request{Ordinal: int64(i), Line: int64(i + 1), CustomID: fmt.Sprint("a", i), Chunk: 1, Index: i, BodyKey: key(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.AddChunk(&sluice.Chunk{ID: 1, URL: "/v1/chat/completions", Model: "m", Path: "chunks/c1", Requests: n}); err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(ctx, sluice.Fingerprint{Size: 1, ModTime: time.Unix(1, 0)}, n, 0); err != nil {
		t.Fatal(err)
	}
	chunks, _ := db.Chunks(ctx, "a")
	c := chunks[0]
	c.State, c.ResultsPath = sluice.ChunkDone, "results/c000001-a1.results"
	f := &sluice.Finish{Chunk: c, From: sluice.ChunkPending}
	for i := 0; i < n; i++ {
		st := sluice.RequestSucceeded
		if i%7 == 3 {
			st = sluice.RequestFailed
		}
		f.Outcomes = append(f.Outcomes, sluice.Outcome{Ordinal: int64(i), State: st, Offset: int64(100 * i), Length: 90})
	}
	if err := db.FinishChunk(ctx, f); err != nil {
		t.Fatal(err)
	}

	b := &sluice.Job{ID: "b", Provider: "openai", Input: "/b", Dir: t.TempDir(), MaxAttempts: 3}
	pb, err := db.BeginPlan(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	// Keys in another order, with unknown ones among them.
	var keys [][]byte
	want := map[int]int{} // index in keys -> request of a
	for i := n + 99; i >= 0; i-- {
		if i < n && i%7 != 3 {
			want[len(keys)] = i
		}
		keys = append(keys, key(i))
	}
	got := map[int]sluice.Answer{}
	if err := pb.LookupReuse(keys, func(i int, ans sluice.Answer) error { got[i] = ans; return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d answers, want %d", len(got), len(want))
	}
	for i, r := range want {
		ans := got[i]
		if ans.CustomID != fmt.Sprint("a", r) || ans.Offset != int64(100*r) || ans.Length != 90 || ans.SourceJob != "a" ||
			ans.Results != filepath.Join(a.Dir, "results/c000001-a1.results") {
			t.Fatalf("key %d: answer %+v, want request a%d", i, ans, r)
		}
	}
	pb.Abort(ctx)
	if err := db.DeleteJob(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	left := db.count(t, `SELECT COUNT(*) FROM ledger`)
	if left != 0 {
		t.Errorf("%d ledger rows survive their job", left)
	}
}
