//go:build linux

package consumer

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// hugePageSize is the x86-64 / arm64 transparent huge page size.
const hugePageSize = 2 << 20

// allocWords returns n zeroed words. Tables of at least one huge page are
// mapped straight from the kernel, aligned to 2 MiB, and advised
// MADV_HUGEPAGE: transparent huge pages are often madvise-only and Go's heap
// never asks for them, while a random probe into a 512 MiB table otherwise
// costs a page walk per row. The mapping is released by a cleanup attached
// to owner. Any failure (no mmap, THP disabled) falls back to the Go heap;
// advised reports whether the kernel accepted the advice.
// CKFRELAY_TABLE_HUGEPAGES=off keeps the table on the Go heap (an escape
// hatch, and the baseline of the huge-page benchmark).
func allocWords(owner *table, n uint64) (words []atomic.Uint64, advised bool) {
	size := n * 8
	if size < hugePageSize || size > uint64(^uint(0)>>1)-hugePageSize || os.Getenv(HugePagesEnv) == "off" {
		return make([]atomic.Uint64, n), false
	}
	mem, err := syscall.Mmap(-1, 0, int(size+hugePageSize), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		return make([]atomic.Uint64, n), false
	}
	base := uintptr(unsafe.Pointer(&mem[0]))
	off := int((hugePageSize - base%hugePageSize) % hugePageSize)
	aligned := mem[off : off+int(size)]
	advised = syscall.Madvise(aligned, syscall.MADV_HUGEPAGE) == nil
	// The table owns the mapping: no slice of it outlives the table.
	runtime.AddCleanup(owner, func(m []byte) { _ = syscall.Munmap(m) }, mem)
	return unsafe.Slice((*atomic.Uint64)(unsafe.Pointer(&aligned[0])), n), advised
}

// hugePageBytes returns how many bytes of [start, start+size) the kernel
// currently backs with transparent huge pages, from /proc/self/smaps
// (AnonHugePages of every mapping inside the range). 0 when unknown.
func hugePageBytes(start, size uintptr) uint64 {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return 0
	}
	defer f.Close()
	return smapsHugePageBytes(f, start, size)
}

// smapsHugePageBytes sums AnonHugePages over the mappings of an smaps
// listing that lie wholly inside [start, start+size).
func smapsHugePageBytes(r io.Reader, start, size uintptr) uint64 {
	end := start + size
	var total uint64
	inside := false
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Bytes()
		if lo, hi, ok := mappingRange(line); ok {
			inside = lo >= start && hi <= end
			continue
		}
		if rest, ok := bytes.CutPrefix(line, []byte("AnonHugePages:")); inside && ok {
			// "AnonHugePages:    2048 kB"
			num, _, _ := bytes.Cut(bytes.TrimSpace(rest), []byte(" "))
			if kb, err := strconv.ParseUint(string(num), 10, 64); err == nil {
				total += kb << 10
			}
		}
	}
	return total
}

// mappingRange parses an smaps header line "lo-hi perms ...".
func mappingRange(line []byte) (lo, hi uintptr, ok bool) {
	rng, _, ok := bytes.Cut(line, []byte(" "))
	if !ok {
		return 0, 0, false
	}
	loHex, hiHex, ok := bytes.Cut(rng, []byte("-"))
	if !ok {
		return 0, 0, false
	}
	a, err1 := strconv.ParseUint(string(loHex), 16, 64)
	b, err2 := strconv.ParseUint(string(hiHex), 16, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return uintptr(a), uintptr(b), true
}
