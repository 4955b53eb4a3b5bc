//go:build !amd64

package consumer

import "unsafe"

// Without a prefetch instruction the table falls back to touching the rows
// with loads (see table.touchLanes); these are never called.

func prefetchRows(a, b unsafe.Pointer) {}

func prefetchLines(a, b unsafe.Pointer) {}

const hasPrefetch = false
