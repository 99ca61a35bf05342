package tracker_test

import (
	"context"
	"testing"

	"github.com/sluice-batch/sluice"
)

// testDigestRecordedWithTheIntent: the chunk's content digest written with
// an intent reads back, and a later transition keeps it (issue 21, item 1:
// Find adopts only what carries it).
func testDigestRecordedWithTheIntent(t *testing.T, db *testDB) {
	ctx := context.Background()
	planJob(t, db, "j", 3)
	cs, err := db.Chunks(ctx, "j")
	if err != nil || len(cs) != 1 || cs[0].Digest != "" {
		t.Fatalf("chunks = %v, %v; want one, without a digest until its first intent", cs, err)
	}
	c := cs[0]
	const dg = "0123456789abcdef0123456789abcdef"
	c.State, c.Digest = sluice.ChunkUploading, dg
	if err := db.UpdateChunk(ctx, c, sluice.ChunkPending); err != nil {
		t.Fatal(err)
	}
	c.State, c.FileID = sluice.ChunkUploaded, "file-1"
	if err := db.UpdateChunk(ctx, c, sluice.ChunkUploading); err != nil {
		t.Fatal(err)
	}
	got, err := db.Chunk(ctx, "j", c.ID)
	if err != nil || got.Digest != dg || got.FileID != "file-1" {
		t.Fatalf("chunk read back: %+v, %v; want digest %s", got, err, dg)
	}
}
