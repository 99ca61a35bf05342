package testsrv

import (
	"flag"
	"os"
	"runtime"
	"strconv"
	"testing"
)

// Parallel sets -test.parallel to n (at least GOMAXPROCS) unless the
// command line gave -parallel: for a package whose tests mostly wait (on
// emulated batches, polls, subprocesses), not on the CPU, so more of them
// run at once than the default of GOMAXPROCS. Call it from TestMain before
// m.Run; it parses the flags.
func Parallel(n int) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		_ = flag.Set("test.parallel", strconv.Itoa(max(runtime.GOMAXPROCS(0), n)))
	}
}

// Main is a TestMain for such a package: Parallel(n), then the tests.
func Main(m *testing.M, n int) {
	Parallel(n)
	os.Exit(m.Run())
}
