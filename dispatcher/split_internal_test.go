package dispatcher

import (
	"testing"

	"github.com/sluice-batch/sluice"
)

// TestRefusalRatioRestoredFromSplitChunks (issue 21, item 3): a resumed run
// takes back what the refusals of an earlier run taught from the chunks
// they split (failed token_limit_exceeded after a refusal alone, more than
// one request), and cuts the chunks not yet submitted by it, without being
// refused again. A chunk re-cut before submission (no refusal), a request
// alone and another model teach nothing.
func TestRefusalRatioRestoredFromSplitChunks(t *testing.T) {
	t.Parallel()
	d := &Dispatcher{job: &sluice.Job{ID: "j", Limits: sluice.Limits{MaxEnqueuedTokens: 2000}}, refusedRatio: map[string]float64{}}
	failed := func(model string, requests int, est int64, refusals int) *sluice.Chunk {
		return &sluice.Chunk{Model: model, Requests: requests, EstTokens: est, State: sluice.ChunkFailed,
			ErrorCode: sluice.CodeQueueFull, QueueRefusals: refusals}
	}
	d.restoreRefused([]*sluice.Chunk{
		failed("m", 59, 1600, 1), // split after a refusal alone: teaches 2 x 0.8 x 2000 / 1600
		failed("m", 30, 1580, 0), // re-cut before submission: no refusal
		failed("n", 1, 100, 3),   // a request alone over the limit
		failed("n", 40, 1000, 0), // re-cut
		{Model: "m", Requests: 58, EstTokens: 1583, State: sluice.ChunkPending},
	})
	if r, ok := d.ratio("m"); !ok || r != 2 {
		t.Errorf("ratio of m %v (%v), want 2", r, ok)
	}
	if _, ok := d.ratio("n"); ok {
		t.Error("model n learned a ratio from a request alone or a re-cut")
	}
	if got := d.cutTokens("m"); got != 800 {
		t.Errorf("cutTokens(m) = %d, want 800 (80%% of 2,000 at x2)", got)
	}
	if got := d.cutTokens("n"); got != 0 {
		t.Errorf("cutTokens(n) = %d, want 0 (the job's limits alone)", got)
	}
	pending := &sluice.Chunk{Model: "m", Requests: 58, EstTokens: 1583, State: sluice.ChunkPending}
	if !d.tooBig(pending) {
		t.Error("a pending chunk of 1,583 estimated tokens at x2 under 2,000 is not re-cut")
	}
	if d.tooBig(&sluice.Chunk{Model: "m", Requests: 1, EstTokens: 1583, State: sluice.ChunkPending}) {
		t.Error("a chunk of one request is re-cut")
	}
	if d.tooBig(&sluice.Chunk{Model: "m", Requests: 20, EstTokens: 800, State: sluice.ChunkPending}) {
		t.Error("a chunk of 800 estimated tokens at x2 under 2,000 is re-cut")
	}
	// Usage that taught more than the refusals wins.
	d.setUsage(map[string]sluice.Learned{"m": {EstTokens: 100, InputTokens: 250}})
	if r, _ := d.ratio("m"); r != 2.5 {
		t.Errorf("ratio of m %v with usage at x2.5, want 2.5", r)
	}
}
