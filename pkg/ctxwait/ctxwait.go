// Package ctxwait waits for a duration or a context, whichever ends first.
package ctxwait

import (
	"context"
	"time"
)

// Sleep waits for d and reports true, or returns false as soon as ctx
// ends. A non-positive d returns at once, reporting whether ctx is alive.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
