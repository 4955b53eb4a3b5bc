//go:build !linux

package bench

import "time"

// processRSS is unknown off Linux.
func processRSS() uint64 { return 0 }

// processCPU is unknown off Linux.
func processCPU() time.Duration { return 0 }
