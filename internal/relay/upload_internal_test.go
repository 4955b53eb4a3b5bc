package relay

import (
	"testing"
	"time"
)

// A snapshot body's put is given time in proportion to its size: a 32 MiB
// lane (the 4,194,304-bucket shape) over a link at the configured floor
// must not hit a timeout sized for a small one.
func TestTheUploadTimeoutGrowsWithTheBody(t *testing.T) {
	var c Config
	for _, tc := range []struct {
		rate int64
		size int
		want time.Duration
	}{
		{0, 0, 30 * time.Second},
		{0, 32 << 20, 62 * time.Second},
		{1_250_000, 33_554_472, 30*time.Second + 26_843_577_600*time.Nanosecond},
		{1 << 30, 1 << 30, 31 * time.Second},
	} {
		c.UploadMinRate = tc.rate
		if got := c.uploadTimeout(tc.size); got != tc.want {
			t.Errorf("rate %d, %d bytes: %s, want %s", tc.rate, tc.size, got, tc.want)
		}
	}
}
