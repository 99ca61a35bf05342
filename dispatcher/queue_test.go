package dispatcher_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/emulator"
)

// lateCreate is a provider whose create of one chunk (late) returns only
// once the tracker shows another chunk (refused) sent back for the
// provider's full queue: the order a loaded machine gives now and then.
// It records whether refused was created again while late's batch was
// live.
type lateCreate struct {
	sluice.Provider
	r              *rig
	late, refused  int64
	mu             sync.Mutex
	lateLive       bool
	heldFor        bool // late's create waited for the refusal to be recorded
	besideLateLive int  // creates of refused while late's batch was live
}

func (p *lateCreate) Create(ctx context.Context, ref sluice.BatchRef, fileID string) (sluice.Batch, error) {
	switch ref.Chunk {
	case p.late:
		if p.waitRefused(ctx) {
			p.mu.Lock()
			p.heldFor = true
			p.mu.Unlock()
		}
	case p.refused:
		p.mu.Lock()
		if p.lateLive {
			p.besideLateLive++
		}
		p.mu.Unlock()
	}
	b, err := p.Provider.Create(ctx, ref, fileID)
	if ref.Chunk == p.late && err == nil {
		p.mu.Lock()
		p.lateLive = true
		p.mu.Unlock()
	}
	return b, err
}

func (p *lateCreate) Poll(ctx context.Context, ref sluice.BatchRef, id string) (sluice.Batch, error) {
	b, err := p.Provider.Poll(ctx, ref, id)
	if ref.Chunk == p.late && err == nil && b.Status.Ended() {
		p.mu.Lock()
		p.lateLive = false
		p.mu.Unlock()
	}
	return b, err
}

// waitRefused waits until the tracker shows chunk refused sent back for
// the provider's full queue (up to 10s: false if it never was).
func (p *lateCreate) waitRefused(ctx context.Context) bool {
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		c, err := p.r.db.Chunk(ctx, p.r.job.ID, p.refused)
		if err == nil && c.ErrorCode == sluice.CodeQueueFull && (c.State == sluice.ChunkPending || c.State == sluice.ChunkUploaded) {
			return true
		}
	}
	return false
}

// TestLateCreateIsNoProbe (issue 21, item 3): a big chunk refused for the
// provider's enqueued-token queue while a small chunk of its model was
// being sent beside it marks the model's queue full. The small chunk's
// create returns only after that (a loaded machine): its batch being
// taken into the queue is no probe, and the refused chunk must not be sent
// again beside it, to be refused again (TestEnqueuedTokenLimitEqualToBudget-
// Finishes counted 4 refusals instead of 3 under load). It goes alone once
// the small batch has ended, and is split.
func TestLateCreateIsNoProbe(t *testing.T) {
	t.Parallel()
	var lines []string
	for i := 0; i < 20; i++ { // chunk 1: over the provider's limit by itself
		lines = append(lines, fmt.Sprintf(`{"custom_id":"q-%d","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","max_tokens":5,"messages":[{"role":"user","content":"question number %02d, asked at some length"}]}}`, i, i))
	}
	for i := 0; i < 20; i++ { // chunk 2, another model: takes the second slot of the first pass
		lines = append(lines, fmt.Sprintf(`{"custom_id":"e-%d","method":"POST","url":"/v1/embeddings","body":{"model":"text-embedding-3-small","input":"t%d"}}`, i, i))
	}
	// chunk 3: one request of chunk 1's model, sent beside it in the next pass
	lines = append(lines, `{"custom_id":"q-last","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","max_tokens":5,"messages":[{"role":"user","content":"one last question"}]}}`)
	r := newRig(t, "openai", lines, sluice.Limits{MaxBatchRequests: 20}, 1,
		emulator.Options{Seed: 1, EnqueuedTokenLimit: 400, BatchTime: 300 * time.Millisecond})
	chunks, err := r.db.Chunks(context.Background(), r.job.ID)
	if err != nil {
		t.Fatal(err)
	}
	p := &lateCreate{Provider: r.prov, r: r}
	for _, c := range chunks {
		switch {
		case c.Model == "gpt-4o-mini" && c.Requests == 20:
			p.refused = c.ID
		case c.Model == "gpt-4o-mini" && c.Requests == 1:
			p.late = c.ID
		}
	}
	if p.refused == 0 || p.late == 0 || len(chunks) != 3 {
		t.Fatalf("plan: %d chunks, big %d, small %d; want 3 with both", len(chunks), p.refused, p.late)
	}
	r.prov = p
	opts := r.options()
	opts.Concurrency = 2
	r.run(opts)
	ok, failed := checkNothingLost(t, r, 0)
	if ok != int64(len(lines)) || failed != 0 {
		t.Errorf("succeeded %d failed %d; want every request", ok, failed)
	}
	if !p.heldFor {
		t.Fatal("the small chunk's create never saw the big one refused: the test proves nothing")
	}
	if p.besideLateLive > 0 {
		t.Errorf("the refused chunk was created %d times while the small batch, admitted before the refusal, was live: refused again beside it", p.besideLateLive)
	}
}
