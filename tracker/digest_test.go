package tracker_test

import (
	"context"
	"testing"
	"time"

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

// testPlanRecordsStoreKeyAndDigests: a plan's store key (sluice.Job.StoreKey)
// reads back with the job, and a chunk's file digest (Chunk.FileDigest)
// recorded when its file is written (at plan, or as a new chunk of a
// conclusion) reads back with the chunk, before any intent: what the dispatcher checks the file against
// (docs/scale-out.md, "Two plans, one store").
func testPlanRecordsStoreKeyAndDigests(t *testing.T, db *testDB) {
	ctx := context.Background()
	const dg1, dg2 = "11111111111111111111111111111111", "22222222222222222222222222222222"
	key := sluice.NewStoreKey("j")
	job := &sluice.Job{ID: "j", Provider: "openai", Input: "/in.jsonl", Dir: t.TempDir(), MaxAttempts: 3, StoreKey: key}
	p, err := db.BeginPlan(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := p.AddRequest(&sluice.Request{Ordinal: int64(i), Line: int64(i + 1), CustomID: "id-" + string(rune('a'+i)), Chunk: 1, Index: i}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.AddChunk(&sluice.Chunk{ID: 1, URL: "/v1/chat/completions", Model: "m", Path: "chunks/c1", Requests: 2, Bytes: 10, FileDigest: dg1}); err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(ctx, sluice.Fingerprint{Size: 10, ModTime: time.Unix(5, 0), Hash: "h"}, 2, 0); err != nil {
		t.Fatal(err)
	}
	if got, err := db.Job(ctx, "j"); err != nil || got.StoreKey != key || got.FilesKey() != key {
		t.Fatalf("job read back: %+v, %v; want store key %s", got, err, key)
	}
	if js, err := db.Jobs(ctx); err != nil || len(js) != 1 || js[0].StoreKey != key {
		t.Fatalf("jobs: %v, %v; want one with store key %s", js, err, key)
	}
	cs, err := db.Chunks(ctx, "j")
	if err != nil || len(cs) != 1 || cs[0].FileDigest != dg1 || cs[0].Digest != "" {
		t.Fatalf("chunks = %+v, %v; want one with file digest %s from the plan (and no digest before its first intent)", cs, err, dg1)
	}
	c := cs[0]
	c.State = sluice.ChunkDone
	nc := &sluice.Chunk{Job: "j", Attempt: 2, URL: "u", Model: "m", Path: "a", State: sluice.ChunkPending, Requests: 1, FileDigest: dg2}
	if err := db.FinishChunk(ctx, &sluice.Finish{Chunk: c, From: sluice.ChunkPending,
		Outcomes: []sluice.Outcome{{Ordinal: 0, State: sluice.RequestSucceeded}},
		Moved:    []sluice.Request{{Ordinal: 1, Chunk: sluice.NewChunkRef(0), Length: 5, Attempt: 2}}, NewChunks: []*sluice.Chunk{nc}}); err != nil {
		t.Fatal(err)
	}
	if got, err := db.Chunk(ctx, "j", nc.ID); err != nil || got.FileDigest != dg2 {
		t.Fatalf("new chunk read back: %+v, %v; want file digest %s", got, err, dg2)
	}
	// A job planned before store keys has none: its files are under jobs/ID.
	old := planJob(t, db, "old", 1)
	if got, _ := db.Job(ctx, old.ID); got.StoreKey != "" || got.FilesKey() != "jobs/old" {
		t.Fatalf("a job planned without a store key: %q, %q; want none, jobs/old", got.StoreKey, got.FilesKey())
	}
}
