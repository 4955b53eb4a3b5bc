// Package cputime reads the CPU time of the test process, so that
// benchmarks can report a cost per operation that holds on a shared,
// oversubscribed machine, where wall time also counts the waits for a core.
// A benchmark reports per-operation figures only when Process moved.
package cputime
