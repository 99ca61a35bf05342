package lifecycle

import (
	"testing"

	"github.com/sluice-batch/sluice"
	"github.com/sluice-batch/sluice/internal/check"
)

// TestCanonicalModelMap: one map, however it is spelled, is recorded one
// way, so that giving it again is no change.
func TestCanonicalModelMap(t *testing.T) {
	t.Parallel()
	check.Table(t, "CanonicalModelMap", CanonicalModelMap, map[string]string{
		"":                     "",
		"b=y, a=x":             "a=x,b=y",
		" a = x ,b=y,":         "a=x,b=y",
		"gpt-4o-mini=claude-x": "gpt-4o-mini=claude-x",
		"not a map":            "not a map",
	})
}

// TestFootprint: a job may be planned again only while planned or running
// with nothing at the provider; the message names a few batches and their
// count.
func TestFootprint(t *testing.T) {
	t.Parallel()
	running := &sluice.Job{State: sluice.JobRunning}
	if !Replaceable(running, Footprint{}) || Replaceable(&sluice.Job{State: sluice.JobDone}, Footprint{}) {
		t.Error("Replaceable: want a running job with nothing at the provider only")
	}
	for _, f := range []Footprint{{Batches: 1, BatchIDs: []string{"b"}}, {Files: 1}, {Intents: 1}, {Settled: 1}, {Retries: 1}} {
		if f.Empty() || Replaceable(running, f) {
			t.Errorf("%+v: empty or replaceable", f)
		}
	}
	f := Footprint{Batches: 5, BatchIDs: []string{"b1", "b2", "b3"}, Intents: 1}
	if got, want := f.String(), "5 batches (b1, b2, b3, ...), 1 chunk whose upload or create may have landed"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
