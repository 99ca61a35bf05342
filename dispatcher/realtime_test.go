package dispatcher_test

import (
	"testing"
	"time"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/emulator"
)

// TestRealtimeFallbackConcurrentCalls: the realtime fallback's calls run
// several at once and write their answers while the chunk's loop goes on
// choosing what to send. Under -race (`make test-race`) a read of the
// answers beside those writes is caught (it was: the loop read the map the
// calls wrote); in a plain run such a read could end the process (a
// concurrent map read and write). Every request is answered once, through
// the synchronous API.
func TestRealtimeFallbackConcurrentCalls(t *testing.T) {
	t.Parallel()
	r := newRig(t, "openai", openAILines(40), sluice.Limits{MaxBatchRequests: 20}, 3, emulator.Options{BatchTime: time.Hour})
	opts := r.options()
	opts.Concurrency = 8
	opts.FallbackAt = time.Now().Add(-time.Minute) // begun before the run
	r.run(opts)
	checkAllSucceeded(t, r, 0, 40, "")
	if st := r.emu.Stats(); st.BatchesCreated != 0 {
		t.Errorf("%d batches created after the fallback began; want every request sent synchronously", st.BatchesCreated)
	}
}
