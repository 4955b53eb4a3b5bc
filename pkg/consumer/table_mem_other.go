//go:build !linux

package consumer

import "sync/atomic"

// allocWords returns n zeroed words from the Go heap: huge-page advice is
// Linux-only.
func allocWords(_ *table, n uint64) ([]atomic.Uint64, bool) {
	return make([]atomic.Uint64, n), false
}

// hugePageBytes is unknown off Linux.
func hugePageBytes(uintptr, uintptr) uint64 { return 0 }
