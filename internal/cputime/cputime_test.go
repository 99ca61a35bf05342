package cputime

import "testing"

// TestProcessCountsWork: spinning for a while shows up as CPU time.
func TestProcessCountsWork(t *testing.T) {
	t0 := Process()
	x := 0
	for i := 0; i < 200_000_000 && Process()-t0 < 20e6; i++ {
		x += i
	}
	if d := Process() - t0; d < 20e6 {
		t.Errorf("CPU time grew by %v after spinning, want at least 20ms", d)
	}
	_ = x
}
