//go:build !linux

package e2e

import "errors"

// missCounters is Linux's perf_event_open; elsewhere there are none.
type missCounters struct{}

func openMissCounters() (*missCounters, error) {
	return nil, errors.New("cache and TLB miss counters need Linux's perf_event_open")
}

func (*missCounters) enable() error                       { return nil }
func (*missCounters) disable() error                      { return nil }
func (*missCounters) read() (llc, dtlb uint64, err error) { return 0, 0, nil }
func (*missCounters) close()                              {}
