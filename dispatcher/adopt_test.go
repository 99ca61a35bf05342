package dispatcher_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/dispatcher"
	"github.com/sluice-batch/sluice/emulator"
)

// foundElsewhere is a provider whose Find answers a fixed batch and file,
// as a provider would that matched a batch by name only.
type foundElsewhere struct {
	sluice.Provider
	fileID, batchID string
}

func (f *foundElsewhere) Find(context.Context, sluice.BatchRef) (string, string, error) {
	return f.fileID, f.batchID, nil
}

// TestReconcileRefusesABatchOfAnotherFile: a chunk left creating after its
// upload was recorded adopts no batch made from another file, whatever the
// provider's Find says (issue 21, item 1): here a batch bought for other
// prompts under the same custom_ids. The chunk creates its own batch and
// every answer is to its own prompt.
func TestReconcileRefusesABatchOfAnotherFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lines := func(mark string) []string {
		var ls []string
		for i := 0; i < 6; i++ {
			ls = append(ls, fmt.Sprintf(`{"custom_id":"q-%d","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"%s prompt %d"}]}}`, i, mark, i))
		}
		return ls
	}
	r := newRig(t, "openai", lines("DDDD"), sluice.Limits{}, 3, emulator.Options{Seed: 1, BatchTime: 50 * time.Millisecond})
	chunks, err := r.db.Chunks(ctx, r.job.ID)
	if err != nil || len(chunks) != 1 {
		t.Fatalf("chunks %v %v, want one", chunks, err)
	}
	c := chunks[0]

	// Another run's batch: the same custom_ids, other prompts.
	other := c.Ref(r.job.Dir)
	other.Path = filepath.Join(t.TempDir(), "other.jsonl")
	if err := os.WriteFile(other.Path, []byte(strings.Join(lines("AAAA"), "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	otherFile, err := r.prov.Upload(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	otherBatch, err := r.prov.Create(ctx, other, otherFile)
	if err != nil {
		t.Fatal(err)
	}

	// This chunk: uploaded, then left creating by a run that died.
	c.State, c.IntentAt = sluice.ChunkUploading, time.Now().Add(-time.Hour)
	if err := r.db.UpdateChunk(ctx, c, sluice.ChunkPending); err != nil {
		t.Fatal(err)
	}
	if c.FileID, err = r.prov.Upload(ctx, c.Ref(r.job.Dir)); err != nil {
		t.Fatal(err)
	}
	c.State = sluice.ChunkUploaded
	if err := r.db.UpdateChunk(ctx, c, sluice.ChunkUploading); err != nil {
		t.Fatal(err)
	}
	c.State = sluice.ChunkCreating
	if err := r.db.UpdateChunk(ctx, c, sluice.ChunkUploaded); err != nil {
		t.Fatal(err)
	}

	prov := &foundElsewhere{Provider: r.prov, fileID: otherFile, batchID: otherBatch.ID}
	ctx2, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := dispatcher.New(r.db, prov, r.job, r.options()).Run(ctx2, nil)
	if err != nil || out != dispatcher.Finished {
		t.Fatalf("run: %v %v", out, err)
	}
	got, _ := r.merged()
	for i := 0; i < 6; i++ {
		id := fmt.Sprintf("q-%d", i)
		o := got[id]
		want := reversed(fmt.Sprintf("DDDD prompt %d", i))
		if o.Response == nil || !strings.Contains(string(o.Response.Body), want) {
			t.Fatalf("%s: %+v, want an answer holding %q", id, o, want)
		}
	}
}

func reversed(s string) string {
	r := []rune(s)
	for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
		r[i], r[j] = r[j], r[i]
	}
	return string(r)
}
