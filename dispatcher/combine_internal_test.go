package dispatcher

import (
	"testing"

	"github.com/sluice-batch/sluice"
)

// TestMinimumFate: a pending chunk under the provider's minimum waits
// while another chunk of its URL and model is unfinished; the waiting
// chunks of one URL and model are combined, led by the first, as soon as
// a prefix of them reaches the minimum within the job's limits; and only
// when nothing can join does a chunk go alone (below_minimum_batch, or
// realtime). Other models, other URLs and ended chunks count for nothing.
func TestMinimumFate(t *testing.T) {
	t.Parallel()
	d := &Dispatcher{job: &sluice.Job{ID: "j", Limits: sluice.Limits{MinBatchRequests: 10, MaxBatchRequests: 15}}, rtChunks: map[int64]bool{}}
	ch := func(id int64, model string, n int, st sluice.ChunkState) *sluice.Chunk {
		return &sluice.Chunk{ID: id, URL: "/v1/chat/completions", Model: model, Requests: n, State: st}
	}
	for _, tc := range []struct {
		name string
		cs   []*sluice.Chunk
		want []fate // of cs[0], cs[1]
	}{
		{"alone", []*sluice.Chunk{ch(1, "m", 4, sluice.ChunkPending), ch(2, "m", 20, sluice.ChunkDone), ch(3, "n", 9, sluice.ChunkSubmitted)},
			[]fate{fateAlone}},
		{"a batch of the model live", []*sluice.Chunk{ch(1, "m", 4, sluice.ChunkPending), ch(2, "m", 20, sluice.ChunkSubmitted)},
			[]fate{fateWait}},
		{"a chunk of the model not yet sent", []*sluice.Chunk{ch(1, "m", 4, sluice.ChunkPending), ch(2, "m", 20, sluice.ChunkPending)},
			[]fate{fateWait}},
		{"together under the minimum, nothing else", []*sluice.Chunk{ch(1, "m", 4, sluice.ChunkPending), ch(2, "m", 5, sluice.ChunkPending)},
			[]fate{fateAlone, fateAlone}},
		{"together at the minimum", []*sluice.Chunk{ch(1, "m", 4, sluice.ChunkPending), ch(2, "m", 6, sluice.ChunkPending), ch(3, "m", 20, sluice.ChunkSubmitted)},
			[]fate{fateCombine, fateJoin}},
		{"over the job's limit together", []*sluice.Chunk{ch(1, "m", 9, sluice.ChunkPending), ch(2, "m", 9, sluice.ChunkPending)},
			[]fate{fateAlone, fateAlone}},
	} {
		for i, want := range tc.want {
			if got := d.minimumFate(tc.cs, tc.cs[i]); got != want {
				t.Errorf("%s: chunk %d: fate %d, want %d", tc.name, tc.cs[i].ID, got, want)
			}
		}
	}
}
