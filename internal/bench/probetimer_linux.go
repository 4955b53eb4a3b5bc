//go:build linux

package bench

import (
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// probeTimer sleeps between a probe's polls on a timerfd: the netpoller
// wakes the goroutine when the fd turns readable, tens of microseconds
// later, where a Go timer this short sleeps about a millisecond in a
// process with nothing else to run (the netpoller's own timeout is in
// whole milliseconds).
type probeTimer struct {
	fd  int
	f   *os.File
	buf [8]byte
}

func newProbeTimer() (*probeTimer, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("bench: probe timer: %w", err)
	}
	return &probeTimer{fd: fd, f: os.NewFile(uintptr(fd), "probe-timerfd")}, nil
}

// sleep waits d (d > 0).
func (t *probeTimer) sleep(d time.Duration) error {
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(d.Nanoseconds())}
	if err := unix.TimerfdSettime(t.fd, 0, &spec, nil); err != nil {
		return fmt.Errorf("bench: probe timer: %w", err)
	}
	if _, err := t.f.Read(t.buf[:]); err != nil {
		return fmt.Errorf("bench: probe timer: %w", err)
	}
	return nil
}

func (t *probeTimer) close() { _ = t.f.Close() }

// probeTimerIsGoTimer: this platform's probeTimer is time.Sleep.
const probeTimerIsGoTimer = false
