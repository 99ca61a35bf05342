package tracker_test

import (
	"testing"

	"github.com/sluice-batch/sluice/internal/testsrv"
)

// TestMain: most tests here wait on PostgreSQL (another process) or on
// SQLite's disk, not on the CPU: more of them run at once than
// -parallel's default of GOMAXPROCS.
func TestMain(m *testing.M) {
	testsrv.Main(m, 8)
}
