package cputime

import (
	"runtime"
	"testing"
)

func TestProcessCountsWork(t *testing.T) {
	if runtime.GOOS == "windows" || runtime.GOOS == "plan9" {
		t.Skip("no process CPU time here")
	}
	t0 := Process()
	x := uint64(1)
	for Process()-t0 <= 0 {
		for i := range 1 << 20 {
			x = x*6364136223846793005 + uint64(i)
		}
	}
	if x == 0 {
		t.Log(x) // keep the loop
	}
	if d := Process() - t0; d <= 0 {
		t.Fatalf("CPU time moved by %v after work", d)
	}
}
