package dispatcher

import (
	"slices"
	"testing"
	"time"

	"github.com/sluice-batch/sluice"
)

// TestByExpiry: due polls start soonest-expiring first, chunks with no
// known expiry last, ties in chunk order.
func TestByExpiry(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	cs := []*sluice.Chunk{
		{ID: 1},
		{ID: 2, ResultsExpireAt: t0.Add(2 * time.Hour)},
		{ID: 3, ResultsExpireAt: t0.Add(time.Hour)},
		{ID: 4},
		{ID: 5, ResultsExpireAt: t0.Add(time.Hour)},
	}
	slices.SortStableFunc(cs, byExpiry)
	var got []int64
	for _, c := range cs {
		got = append(got, c.ID)
	}
	if want := []int64{3, 5, 2, 1, 4}; !slices.Equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
}
