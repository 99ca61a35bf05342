package lifecycle_test

import (
	"testing"

	"github.com/sluice-batch/sluice/internal/testsrv"
)

// TestMain: most tests here wait (on emulated batches that take their
// time, polls, cancels), not on the CPU: more of them run at once than
// -parallel's default of GOMAXPROCS.
func TestMain(m *testing.M) {
	testsrv.Main(m, 8)
}
