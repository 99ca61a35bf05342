package tracker_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/tracker"
)

// testRealtimeCalls: the realtime fallback's log of synchronous calls, on
// each backend. A call's intent is recorded once; its answer only while it
// is in flight, once; the calls read back by chunk and index, and the
// chunks that have calls, in order.
func testRealtimeCalls(t *testing.T, db *testDB) {
	ctx := context.Background()
	planJob(t, db, "j", 2)
	for _, k := range []struct {
		chunk int64
		index int
	}{{3, 1}, {3, 0}, {1, 0}} {
		if ok, err := db.RealtimeIntent(ctx, "j", k.chunk, k.index); err != nil || !ok {
			t.Fatalf("intent %d/%d: %v, %v", k.chunk, k.index, ok, err)
		}
	}
	if ok, err := db.RealtimeIntent(ctx, "j", 3, 1); err != nil || ok {
		t.Errorf("a second intent of 3/1: %v, %v; want not recorded", ok, err)
	}
	answer := sluice.RealtimeCall{Chunk: 3, Index: 1, Kind: sluice.ResultKind(1), Line: []byte(`{"id":"x"}`),
		Usage: sluice.Usage{InputTokens: 7, OutputTokens: 5}}
	if err := db.RealtimeAnswer(ctx, "j", answer); err != nil {
		t.Fatal(err)
	}
	if err := db.RealtimeAnswer(ctx, "j", answer); !errors.Is(err, tracker.ErrConflict) {
		t.Errorf("a second answer of 3/1: %v, want ErrConflict", err)
	}
	if err := db.RealtimeAnswer(ctx, "j", sluice.RealtimeCall{Chunk: 2, Index: 0}); !errors.Is(err, tracker.ErrConflict) {
		t.Errorf("an answer of a call never sent: %v, want ErrConflict", err)
	}
	chunks, err := db.RealtimeChunks(ctx, "j")
	if err != nil || len(chunks) != 2 || chunks[0] != 1 || chunks[1] != 3 {
		t.Errorf("RealtimeChunks = %v, %v; want [1 3]", chunks, err)
	}
	calls, err := db.RealtimeCalls(ctx, "j", 3)
	if err != nil || len(calls) != 2 {
		t.Fatalf("RealtimeCalls = %+v, %v", calls, err)
	}
	if c := calls[0]; c.Chunk != 3 || c.Index != 0 || c.State != sluice.RealtimeSending {
		t.Errorf("call 3/0 = %+v, want in flight", c)
	}
	if c := calls[1]; c.Index != 1 || c.State != sluice.RealtimeAnswered || c.Kind != answer.Kind ||
		string(c.Line) != string(answer.Line) || c.Usage != answer.Usage {
		t.Errorf("call 3/1 = %+v, want %+v answered", c, answer)
	}
	if other, err := db.RealtimeChunks(ctx, "other"); err != nil || len(other) != 0 {
		t.Errorf("RealtimeChunks of another job = %v, %v", other, err)
	}
}
