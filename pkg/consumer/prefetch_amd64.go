package consumer

import "unsafe"

// Software prefetches (PREFETCHT0). Unlike a load, a prefetch retires
// without waiting for its line, so a query can request every row it will
// need soon and keep hashing while the misses are in flight; Go has no
// prefetch intrinsic outside the runtime. They read nothing the program
// sees and never fault, so they are safe under the weak-read contract.

// prefetchRows requests both 64-byte lines of two 128-byte table rows.
//
//go:noescape
func prefetchRows(a, b unsafe.Pointer)

// prefetchLines requests one 64-byte line at each of a and b.
//
//go:noescape
func prefetchLines(a, b unsafe.Pointer)

const hasPrefetch = true
