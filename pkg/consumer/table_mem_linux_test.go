//go:build linux

package consumer

import (
	"os"
	"strings"
	"testing"
	"unsafe"
)

// thpAvailable reports whether the kernel has transparent huge pages at all
// (without them MADV_HUGEPAGE is refused and every table stays on the heap).
func thpAvailable() bool {
	_, err := os.Stat("/sys/kernel/mm/transparent_hugepage/enabled")
	return err == nil
}

// bucketsOf returns the bucket count of a table of the given byte size.
func bucketsOf(bytes uint64) uint64 { return bytes / (16 * 8) }

// A table of at least one huge page is its own mapping, advised for huge
// pages and starting on a huge-page boundary, unless
// CKFRELAY_TABLE_HUGEPAGES=off; a smaller one stays on the heap. Either way
// every word of it is usable.
func TestTableMemoryPlacement(t *testing.T) {
	if !thpAvailable() {
		t.Skip("no transparent huge pages on this kernel")
	}
	tests := []struct {
		name    string
		bytes   uint64
		env     string
		advised bool
	}{
		{"one huge page", hugePageSize, "", true},
		{"two huge pages", 2 * hugePageSize, "on", true},
		// The kernel aligns a mapping of whole huge pages by itself; this
		// one it does not (the mapping is the table plus one huge page).
		{"one and a quarter huge pages", 5 * hugePageSize / 4, "", true},
		{"one and three quarter huge pages", 7 * hugePageSize / 4, "", true},
		{"below one huge page", hugePageSize / 2, "", false},
		{"smallest table", 16 * 8, "", false},
		{"huge pages off", 2 * hugePageSize, "off", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(HugePagesEnv, tt.env)
			buckets := bucketsOf(tt.bytes)
			tb, err := newTable(buckets)
			if err != nil {
				t.Fatal(err)
			}
			mem := tb.memory()
			if mem.Bytes != tt.bytes || mem.HugePagesAdvised != tt.advised {
				t.Fatalf("memory %+v; want %d bytes, advised %v", mem, tt.bytes, tt.advised)
			}
			if start := uintptr(unsafe.Pointer(&tb.words[0])); tt.advised && start%hugePageSize != 0 {
				t.Fatalf("advised table starts at %#x, not on a huge-page boundary", start)
			}
			if mem.HugePageBytes > mem.Bytes {
				t.Fatalf("%d huge-page bytes in a %d-byte table", mem.HugePageBytes, mem.Bytes)
			}
			for _, b := range []uint64{0, buckets / 2, buckets - 1} {
				for _, l := range []int{0, 15} {
					v := b<<8 | uint64(l) | 1<<63
					tb.StoreImage(b, l, v)
					if got := tb.LoadImage(b, l); got != v {
						t.Fatalf("bucket %d lane %d = %#x, want %#x", b, l, got, v)
					}
				}
			}
		})
	}
}

// Once every word of an advised table is written, the kernel reports huge
// pages inside it (read back from /proc/self/smaps), never more than the
// table holds, and none in an empty range.
func TestTableMemoryReportsHugePages(t *testing.T) {
	if !thpAvailable() {
		t.Skip("no transparent huge pages on this kernel")
	}
	mode, _ := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if len(mode) == 0 || string(mode) == "always madvise [never]\n" {
		t.Skip("transparent huge pages disabled")
	}
	t.Setenv(HugePagesEnv, "")
	tb, err := newTable(bucketsOf(4 * hugePageSize))
	if err != nil {
		t.Fatal(err)
	}
	for i := range tb.words {
		tb.words[i].Store(uint64(i) | 1)
	}
	mem := tb.memory()
	if !mem.HugePagesAdvised {
		t.Skip("the kernel refused MADV_HUGEPAGE")
	}
	if mem.HugePageBytes == 0 {
		// The kernel may have no free 2 MiB page to give (fragmented
		// memory): skip then, but only if smaps, read here on its own,
		// agrees that none backs the table.
		f, err := os.Open("/proc/self/smaps")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if n := smapsHugePageBytes(f, uintptr(unsafe.Pointer(&tb.words[0])), uintptr(mem.Bytes)); n != 0 {
			t.Fatalf("memory() reports no huge page, smaps shows %d bytes", n)
		}
		t.Skip("the kernel backed none of the advised table with huge pages")
	}
	if mem.HugePageBytes > mem.Bytes || mem.HugePageBytes%hugePageSize != 0 {
		t.Fatalf("%d of %d bytes on huge pages; want a positive whole number of huge pages", mem.HugePageBytes, mem.Bytes)
	}
	// Only mappings wholly inside the range count: an empty range at the
	// table's start holds none, though the table itself is backed.
	if got := hugePageBytes(uintptr(unsafe.Pointer(&tb.words[0])), 0); got != 0 {
		t.Fatalf("%d huge-page bytes in an empty range", got)
	}
}

func TestMappingRange(t *testing.T) {
	tests := []struct {
		line   string
		lo, hi uintptr
		ok     bool
	}{
		{"7f12a0000000-7f12a0400000 rw-p 00000000 00:00 0 ", 0x7f12a0000000, 0x7f12a0400000, true},
		{"00400000-0040b000 r-xp 00000000 08:01 1234   /bin/cat", 0x400000, 0x40b000, true},
		{"AnonHugePages:      2048 kB", 0, 0, false},
		{"Size: 4 kB", 0, 0, false},
		{"7f12a0000000-7f12a0400000", 0, 0, false}, // no space
		{"7f12a0000000+7f12a0400000 rw-p", 0, 0, false},
		{"7g12a0000000-7f12a0400000 rw-p", 0, 0, false},
		{"7f12a0000000-7f12z0400000 rw-p", 0, 0, false},
		{"", 0, 0, false},
	}
	for _, tt := range tests {
		lo, hi, ok := mappingRange([]byte(tt.line))
		if lo != tt.lo || hi != tt.hi || ok != tt.ok {
			t.Errorf("mappingRange(%q) = %#x, %#x, %v; want %#x, %#x, %v", tt.line, lo, hi, ok, tt.lo, tt.hi, tt.ok)
		}
	}
}

// TestSmapsHugePageBytes: only mappings wholly inside the range count, each
// with its AnonHugePages; other fields, other mappings and malformed
// values are ignored.
func TestSmapsHugePageBytes(t *testing.T) {
	const smaps = `7f0000000000-7f0000400000 rw-p 00000000 00:00 0
Size:               4096 kB
AnonHugePages:      4096 kB
7f0000400000-7f0000600000 rw-p 00000000 00:00 0
AnonHugePages:      2048 kB
7f0000600000-7f0000800000 rw-p 00000000 00:00 0
AnonHugePages:      bogus kB
7f0000800000-7f0000c00000 rw-p 00000000 00:00 0
AnonHugePages:      2048 kB
`
	cases := []struct {
		start, size uintptr
		want        uint64
	}{
		{0x7f0000000000, 0x800000, 6 << 20}, // first three (the third unreadable)
		{0x7f0000000000, 0x400000, 4 << 20}, // exactly the first
		{0x7f0000000000, 0x3fffff, 0},       // the first sticks out
		{0x7f0000400000, 0x800000, 4 << 20}, // second and fourth
		{0x7f0000000000, 0xc00000, 8 << 20}, // all
		{0x7f0000c00000, 0x100000, 0},       // none inside
		{0x7f0000000000, 0, 0},              // empty range
	}
	for _, c := range cases {
		if got := smapsHugePageBytes(strings.NewReader(smaps), c.start, c.size); got != c.want {
			t.Errorf("[%#x, +%#x): %d bytes, want %d", c.start, c.size, got, c.want)
		}
	}
}
