//go:build unix

package routerevent

import (
	"syscall"
	"time"
)

// processCPUTime is user+system CPU time of the process; benchmarks use it
// to report a throughput that is robust to a shared, oversubscribed machine.
func processCPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
