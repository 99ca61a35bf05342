package emulator

import (
	"testing"

	"github.com/sluice-batch/sluice/internal/testsrv"
)

// TestMain: most tests here wait (on batches that take their time, on
// the S3 and Cloud Storage servers), not on the CPU: more of them run at
// once than -parallel's default of GOMAXPROCS.
func TestMain(m *testing.M) {
	testsrv.Main(m, 8)
}
