package dispatcher

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-batch/sluice"
)

// TestQueueMarkClearedOnlyByTheProbe (issue 21, item 3): a batch admitted
// beside another of its model before the provider refused that other for
// its enqueued-token queue, whose create returned only after the refusal
// set the model's queue-full mark (a slow create on a loaded machine), is
// no probe: its being taken into the queue does not clear the mark, and
// the refused batch is not sent again beside it (that second batch was
// refused too: TestEnqueuedTokenLimitEqualToBudgetFinishes counted 4
// refusals instead of 3 under load). Once it ended, the refused batch goes
// alone, the probe, and its being taken clears the mark.
func TestQueueMarkClearedOnlyByTheProbe(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := &Dispatcher{job: &sluice.Job{ID: "j", Limits: sluice.Limits{MaxEnqueuedTokens: 2000}},
		opts: Options{Clock: sluice.SystemClock{}}, queueFull: map[string]time.Time{}, alone: map[int64]bool{},
		probe: map[int64]time.Time{}, refusedRatio: map[string]float64{}}
	big := &sluice.Chunk{ID: 1, Model: "m", Requests: 59, EstTokens: 1593, State: sluice.ChunkSubmitted, SubmittedAt: d.now()}
	small := &sluice.Chunk{ID: 6, Model: "m", Requests: 1, EstTokens: 29, State: sluice.ChunkUploaded}
	s := &sched{d: d, busy: map[int64]step{}, chunks: []*sluice.Chunk{big, small}}
	s.reindex()
	if !s.admission(ctx).admit(small) {
		t.Fatal("the small chunk was not admitted beside the big one (1,622 of 2,000 tokens)")
	}
	// The provider refuses the big batch while the small one's create is
	// still in flight: the model's queue is marked full.
	big.State, big.BatchID = sluice.ChunkUploaded, ""
	d.setQueueFull("m")
	// The small batch's create returns after the mark, and the provider
	// takes it into its queue.
	small.State, small.BatchID, small.SubmittedAt = sluice.ChunkSubmitted, "b-small", d.now()
	d.queueTook(small)
	if _, full := d.queueMark("m"); !full {
		t.Error("a batch admitted before the queue-full mark cleared it when the provider took it")
	}
	if s.admission(ctx).admit(big) {
		t.Error("the refused batch was admitted again beside a live batch of its model while the queue is marked full")
	}
	// The small batch ends: the refused chunk goes alone, as the probe.
	small.State = sluice.ChunkDone
	if !s.admission(ctx).admit(big) {
		t.Fatal("the refused chunk was not sent alone once the model's batches drained")
	}
	big.State, big.BatchID, big.SubmittedAt = sluice.ChunkSubmitted, "b-big-2", d.now()
	d.queueTook(big)
	if _, full := d.queueMark("m"); full {
		t.Error("the probe was taken into the queue but the mark stays: the model's other chunks would wait for ever")
	}
}
