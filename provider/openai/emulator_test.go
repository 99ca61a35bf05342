package openai_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/emulator"
	"github.com/sluice-batch/sluice/provider/httpx"
	"github.com/sluice-batch/sluice/provider/internal/ptest"
	"github.com/sluice-batch/sluice/provider/openai"
)

func startEmulator(t *testing.T, o emulator.Options) (*emulator.Server, string) {
	t.Helper()
	o.APIKey = testKey
	return ptest.Emulator(t, o, nil)
}

// stats reads GET /_emulator/stats.
func stats(t *testing.T, root string) emulator.Stats {
	t.Helper()
	return ptest.Stats(t, root)
}

func manyIDs(n int, prefix string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

func TestEmulatorFullCycle(t *testing.T) {
	_, root := startEmulator(t, emulator.Options{Seed: 11, LineErrorRate: 0.2})
	c := newClient(t, "openai", root+"/v1")
	ref := writeChunk(t, "job-e", 1, 1, manyIDs(50, "r")...)
	b, got := ptest.Cycle(t, c, ref)
	if b.Status != sluice.BatchCompleted || len(got) != 50 || b.Total != 50 {
		t.Fatalf("batch %+v, %d results", b, len(got))
	}
	kinds := map[sluice.ResultKind]int{}
	for _, r := range got {
		kinds[r.Kind]++
		if r.Kind == sluice.ResultSucceeded && r.Usage.InputTokens == 0 {
			t.Errorf("no usage: %+v", r)
		}
	}
	if kinds[sluice.ResultSucceeded] == 0 || kinds[sluice.ResultFailed]+kinds[sluice.ResultRetryable] == 0 {
		t.Fatalf("kinds %v", kinds)
	}
	if st := stats(t, root); st.FilesUploaded != 1 || st.BatchesCreated != 1 || st.RequestsProcessed != 50 {
		t.Fatalf("stats %+v", st)
	}
}

// TestEmulatorFaultsNoDuplicates: a third of the calls fail (429, 5xx, or a
// reset after the call took effect); every chunk completes and nothing is
// uploaded, created or run twice.
func TestEmulatorFaultsNoDuplicates(t *testing.T) {
	_, root := startEmulator(t, emulator.Options{Seed: 3, HTTPFaultRate: 0.35})
	c := newClient(t, "openai", root+"/v1", func(cfg *openai.Config) { cfg.Retry = httpx.Retry{MaxAttempts: 20} })
	for i := int64(1); i <= 8; i++ {
		ref := writeChunk(t, "job-f", i, 1, manyIDs(int(4+i), fmt.Sprintf("c%d", i))...)
		if _, got := ptest.Cycle(t, c, ref); len(got) != ref.Requests {
			t.Fatalf("chunk %d: %d results", i, len(got))
		}
	}
	st := stats(t, root)
	if st.FaultsReset == 0 || st.Faults429 == 0 || st.FilesUploaded != 8 || st.BatchesCreated != 8 || st.RequestsProcessedMoreThanOnce != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestEmulatorFindAfterCrash: a run that died after each step is
// reconciled by a new process from the emulator's listings.
func TestEmulatorFindAfterCrash(t *testing.T) {
	_, root := startEmulator(t, emulator.Options{Seed: 4, BatchTime: time.Hour})
	ctx := context.Background()
	first := newClient(t, "openai", root+"/v1")
	var refs []sluice.BatchRef
	var files, batches []string
	for i := int64(1); i <= 3; i++ {
		ref := writeChunk(t, "job-crash", i, 1, manyIDs(3, fmt.Sprintf("k%d", i))...)
		fileID, err := first.Upload(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		batchID := ""
		if i != 2 { // chunk 2 died between upload and create
			b, err := first.Create(ctx, ref, fileID)
			if err != nil {
				t.Fatal(err)
			}
			batchID = b.ID
		}
		refs, files, batches = append(refs, ref), append(files, fileID), append(batches, batchID)
	}
	second := newClient(t, "openai", root+"/v1")
	for i, ref := range refs {
		fileID, batchID, err := second.Find(ctx, ref)
		if err != nil || fileID != files[i] || batchID != batches[i] {
			t.Errorf("chunk %d: found %q %q %v, want %q %q", ref.Chunk, fileID, batchID, err, files[i], batches[i])
		}
	}
	next := refs[0]
	next.Attempt = 2
	if fileID, batchID, err := second.Find(ctx, next); err != nil || fileID != "" || batchID != "" {
		t.Errorf("attempt 2: %q %q %v", fileID, batchID, err)
	}
}

func TestEmulatorCancel(t *testing.T) {
	clock := httpx.NewFakeClock(time.Now())
	_, root := startEmulator(t, emulator.Options{Seed: 5, BatchTime: time.Hour, Now: clock.Now})
	ctx := context.Background()
	c := newClient(t, "openai", root+"/v1")
	ref := writeChunk(t, "job-x", 1, 1, manyIDs(6, "x")...)
	fileID, err := c.Upload(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Create(ctx, ref, fileID)
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(20 * time.Minute)
	if b, err = c.Cancel(ctx, b.ID); err != nil || b.Status != sluice.BatchCancelling {
		t.Fatalf("cancel %+v %v", b, err)
	}
	clock.Advance(10 * time.Minute)
	b, got := ptest.Finish(t, c, ref, b)
	if b.Status != sluice.BatchCancelled || len(got) != 6 {
		t.Fatalf("batch %+v, %d results", b, len(got))
	}
	for id, r := range got {
		if r.Kind == sluice.ResultFailed {
			t.Errorf("%s: %+v", id, r.Line)
		}
	}
	if err := c.Forget(ctx, ref, fileID); err != nil {
		t.Fatal(err)
	}
}

func TestEmulatorAzureStyle(t *testing.T) {
	_, root := startEmulator(t, emulator.Options{Seed: 6})
	c := newClient(t, "azure", root+"/openai/v1")
	ref := writeChunk(t, "job-az", 1, 1, "a", "b", "c")
	ref.URL = "/chat/completions"
	b, got := ptest.Cycle(t, c, ref)
	if b.Status != sluice.BatchCompleted || len(got) != 3 {
		t.Fatalf("batch %+v results %d", b, len(got))
	}
}
