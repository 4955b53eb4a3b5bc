package e2e

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// missCounters counts the calling OS thread's last-level cache read misses
// and dTLB read misses in user space while enabled (perf_event_open, one
// group so enabling and disabling is one system call each). The caller
// locks its goroutine to the thread that opened them; a counter set is
// used by that one goroutine.
type missCounters struct{ llc, dtlb int }

// openMissCounters opens the counters on the calling thread, disabled. A
// machine without a CPU performance monitoring unit (a VM that exposes
// none) refuses them: the error says why.
func openMissCounters() (*missCounters, error) {
	open := func(what string, cfg uint64, group int, flags uint64) (int, error) {
		attr := unix.PerfEventAttr{
			Type:   unix.PERF_TYPE_HW_CACHE,
			Config: cfg,
			Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
			Bits:   flags | unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv,
		}
		fd, err := unix.PerfEventOpen(&attr, 0, -1, group, unix.PERF_FLAG_FD_CLOEXEC)
		if err != nil {
			return -1, fmt.Errorf("perf_event_open %s: %w", what, err)
		}
		return fd, nil
	}
	const readMiss = unix.PERF_COUNT_HW_CACHE_OP_READ<<8 | unix.PERF_COUNT_HW_CACHE_RESULT_MISS<<16
	llc, err := open("LLC read misses", unix.PERF_COUNT_HW_CACHE_LL|readMiss, -1, unix.PerfBitDisabled)
	if err != nil {
		return nil, err
	}
	dtlb, err := open("dTLB read misses", unix.PERF_COUNT_HW_CACHE_DTLB|readMiss, llc, 0)
	if err != nil {
		unix.Close(llc)
		return nil, err
	}
	return &missCounters{llc: llc, dtlb: dtlb}, nil
}

// enable and disable count, or stop counting, both events.
func (c *missCounters) enable() error {
	return unix.IoctlSetInt(c.llc, unix.PERF_EVENT_IOC_ENABLE, unix.PERF_IOC_FLAG_GROUP)
}

func (c *missCounters) disable() error {
	return unix.IoctlSetInt(c.llc, unix.PERF_EVENT_IOC_DISABLE, unix.PERF_IOC_FLAG_GROUP)
}

// read returns both totals since the counters were opened.
func (c *missCounters) read() (llc, dtlb uint64, err error) {
	get := func(fd int) (uint64, error) {
		var buf [8]byte
		n, err := unix.Read(fd, buf[:])
		if err != nil {
			return 0, fmt.Errorf("read counter: %w", err)
		}
		if n != len(buf) {
			return 0, fmt.Errorf("read counter: %d bytes", n)
		}
		return binary.NativeEndian.Uint64(buf[:]), nil
	}
	if llc, err = get(c.llc); err != nil {
		return 0, 0, err
	}
	dtlb, err = get(c.dtlb)
	return llc, dtlb, err
}

func (c *missCounters) close() {
	unix.Close(c.dtlb)
	unix.Close(c.llc)
}
