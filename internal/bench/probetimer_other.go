//go:build !linux

package bench

import "time"

// probeTimer sleeps between a probe's polls (a Go timer elsewhere than
// Linux; see the Linux version).
type probeTimer struct{}

func newProbeTimer() (*probeTimer, error) { return &probeTimer{}, nil }

func (*probeTimer) sleep(d time.Duration) error {
	time.Sleep(d)
	return nil
}

func (*probeTimer) close() {}

// probeTimerIsGoTimer: this platform's probeTimer is time.Sleep.
const probeTimerIsGoTimer = true
