package tracker_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluice-batch/sluice"
)

// testFinishChunkGivesNewChunkIDs: new chunks without an id get theirs in
// FinishChunk's transaction, one above the job's largest, and the requests
// moved to them by sluice.NewChunkRef land there: several workers can
// regroup at once without an id counter of their own. A new chunk's splits
// are recorded with it.
func testFinishChunkGivesNewChunkIDs(t *testing.T, db *testDB) {
	ctx := context.Background()
	c, a, b := retryTwo(t, db, 1)
	if a.ID != c.ID+1 || b.ID != c.ID+2 {
		t.Fatalf("new chunk ids %d, %d; want %d, %d", a.ID, b.ID, c.ID+1, c.ID+2)
	}
	for id, want := range map[int64]string{a.ID: "id-b", b.ID: "id-c"} {
		var got []string
		db.ChunkRequests(ctx, "j", id, func(r *sluice.Request) error { got = append(got, r.CustomID); return nil })
		if len(got) != 1 || got[0] != want {
			t.Errorf("chunk %d holds %v, want [%s]", id, got, want)
		}
	}
	// A split (dispatcher/split.go) is recorded with the new chunk.
	if got, err := db.Chunk(ctx, "j", b.ID); err != nil || got.Splits != 1 || got.Attempt != 2 {
		t.Errorf("chunk %d read back as %+v (%v); want attempt 2, 1 split", b.ID, got, err)
	}
	// The next end takes ids above those, whichever chunk it ends.
	a.State = sluice.ChunkFailed
	nc := &sluice.Chunk{Job: "j", Attempt: 3, URL: "u", Model: "m", Path: "c", State: sluice.ChunkPending, Requests: 1}
	if err := db.FinishChunk(ctx, &sluice.Finish{Chunk: a, From: sluice.ChunkPending,
		Moved: []sluice.Request{{Ordinal: 1, Chunk: sluice.NewChunkRef(0), Length: 5, Attempt: 3}}, NewChunks: []*sluice.Chunk{nc}}); err != nil {
		t.Fatal(err)
	}
	if nc.ID != b.ID+1 {
		t.Errorf("third new chunk id %d, want %d", nc.ID, b.ID+1)
	}
	cs, _ := db.Chunks(ctx, "j")
	if len(cs) != 4 {
		t.Errorf("%d chunks, want 4", len(cs))
	}
}

// testFinishChunkAlso: a finish's Also end further unsent chunks in the
// same transaction, their requests moved into the finish's new chunks
// (retries under the provider's minimum combined: dispatcher/combine.go);
// when one of them is no longer in its From state, nothing of the finish
// is recorded.
func testFinishChunkAlso(t *testing.T, db *testDB) {
	ctx := context.Background()
	_, a, b := retryTwo(t, db, 0)
	combine := func(from sluice.ChunkState) (*sluice.Chunk, error) {
		ea, eb := *a, *b
		ea.State, eb.State = sluice.ChunkDone, sluice.ChunkDone
		m := &sluice.Chunk{Job: "j", Attempt: 2, URL: "u", Model: "m", Path: "m", State: sluice.ChunkPending, Requests: 2}
		return m, db.FinishChunk(ctx, &sluice.Finish{Chunk: &ea, From: sluice.ChunkPending,
			Moved:     []sluice.Request{{Ordinal: 1, Chunk: sluice.NewChunkRef(0), Length: 5, Attempt: 2}},
			NewChunks: []*sluice.Chunk{m},
			Also: []*sluice.Finish{{Chunk: &eb, From: from,
				Moved: []sluice.Request{{Ordinal: 2, Chunk: sluice.NewChunkRef(0), Index: 1, Offset: 6, Length: 5, Attempt: 2}}}}})
	}
	if _, err := combine(sluice.ChunkSubmitted); err == nil {
		t.Fatal("a finish whose Also chunk is not in its From state was recorded")
	}
	if cs, _ := db.Chunks(ctx, "j"); len(cs) != 3 || cs[1].State != sluice.ChunkPending || cs[2].State != sluice.ChunkPending {
		t.Fatalf("a refused finish changed the chunks: %d chunks, states %s, %s", len(cs), cs[1].State, cs[2].State)
	}
	m, err := combine(sluice.ChunkPending)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	db.ChunkRequests(ctx, "j", m.ID, func(r *sluice.Request) error {
		got = append(got, fmt.Sprintf("%s@%d", r.CustomID, r.Index))
		return nil
	})
	if len(got) != 2 || got[0] != "id-b@0" || got[1] != "id-c@1" {
		t.Errorf("combined chunk %d holds %v, want [id-b@0 id-c@1]", m.ID, got)
	}
	for _, id := range []int64{a.ID, b.ID} {
		if ch, err := db.Chunk(ctx, "j", id); err != nil || ch.State != sluice.ChunkDone {
			t.Errorf("chunk %d: %+v (%v), want done", id, ch, err)
		}
		n := 0
		db.ChunkRequests(ctx, "j", id, func(*sluice.Request) error { n++; return nil })
		if n != 0 {
			t.Errorf("chunk %d still holds %d request(s)", id, n)
		}
	}
}

// retryTwo plans job j of 3 requests and ends its chunk c: the first
// request succeeded, the others moved to two new pending chunks of
// attempt 2, a and b (b with splits).
func retryTwo(t *testing.T, db *testDB, splits int) (c, a, b *sluice.Chunk) {
	t.Helper()
	ctx := context.Background()
	planJob(t, db, "j", 3)
	cs, _ := db.Chunks(ctx, "j")
	c = cs[0]
	c.State = sluice.ChunkDone
	a = &sluice.Chunk{Job: "j", Attempt: 2, URL: "u", Model: "m", Path: "a", State: sluice.ChunkPending, Requests: 1}
	b = &sluice.Chunk{Job: "j", Attempt: 2, Splits: splits, URL: "u", Model: "m", Path: "b", State: sluice.ChunkPending, Requests: 1}
	if err := db.FinishChunk(ctx, &sluice.Finish{Chunk: c, From: sluice.ChunkPending,
		Outcomes:  []sluice.Outcome{{Ordinal: 0, State: sluice.RequestSucceeded}},
		Moved:     []sluice.Request{{Ordinal: 1, Chunk: sluice.NewChunkRef(0), Length: 5, Attempt: 2}, {Ordinal: 2, Chunk: sluice.NewChunkRef(1), Length: 5, Attempt: 2}},
		NewChunks: []*sluice.Chunk{a, b}}); err != nil {
		t.Fatal(err)
	}
	return c, a, b
}
