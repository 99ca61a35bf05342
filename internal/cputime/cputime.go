// Package cputime reads the process's CPU time, which benchmarks report
// beside wall time: on a shared machine the CPU a piece of work costs is a
// steadier figure than how long it took (BENCHMARKS.md).
package cputime

import (
	"syscall"
	"time"
)

// Process is the user and system CPU time of the process so far (0 if the
// system does not tell).
func Process() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
