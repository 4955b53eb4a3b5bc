package testenv

import "runtime"

// Goroutines returns the stacks of every goroutine, for a test to print
// when something did not stop: the hang is then diagnosable from the CI log.
func Goroutines() string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return string(buf[:n])
		}
		buf = make([]byte, 2*len(buf))
	}
}
