package sluice

import "testing"

func TestChunkTokens(t *testing.T) {
	for _, c := range []struct {
		l    Limits
		want int64
	}{
		{Limits{}, 0},
		{Limits{MaxBatchTokens: 5000}, 5000},
		{Limits{MaxEnqueuedTokens: 2_000_000}, 1_600_000},
		{Limits{MaxBatchTokens: 1_000_000, MaxEnqueuedTokens: 2_000_000}, 1_000_000},
		{Limits{MaxBatchTokens: 3_000_000, MaxEnqueuedTokens: 2_000_000}, 1_600_000},
		{Limits{MaxEnqueuedTokens: 1}, 1},
	} {
		if got := c.l.ChunkTokens(); got != c.want {
			t.Errorf("%+v.ChunkTokens() = %d, want %d", c.l, got, c.want)
		}
	}
}
