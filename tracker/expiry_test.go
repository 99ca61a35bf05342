package tracker_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-batch/sluice"
)

// testResultsExpiryRoundTrips: a chunk's ResultsExpireAt is written by
// UpdateChunk and read back by Chunk and Chunks, on both backends; zero
// stays zero.
func testResultsExpiryRoundTrips(t *testing.T, db *testDB) {
	ctx := context.Background()
	planJob(t, db, "j", 3)
	cs, err := db.Chunks(ctx, "j")
	if err != nil || len(cs) != 1 || !cs[0].ResultsExpireAt.IsZero() {
		t.Fatalf("chunks = %v, %v; want one, without a results expiry", cs, err)
	}
	c := cs[0]
	at := time.Date(2026, 12, 24, 7, 0, 0, 123456789, time.UTC)
	c.State, c.ResultsExpireAt = sluice.ChunkUploading, at
	if err := db.UpdateChunk(ctx, c, sluice.ChunkPending); err != nil {
		t.Fatal(err)
	}
	got, err := db.Chunk(ctx, "j", c.ID)
	if err != nil || !got.ResultsExpireAt.Equal(at) {
		t.Fatalf("chunk read back: results_expire_at %v, %v; want %v", got.ResultsExpireAt, err, at)
	}
	if cs, err := db.Chunks(ctx, "j"); err != nil || !cs[0].ResultsExpireAt.Equal(at) {
		t.Fatalf("chunks read back: %v; want results_expire_at %v", err, at)
	}
}
