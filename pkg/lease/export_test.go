package lease

import "time"

// SetClock replaces the coordinator's clock; call before sharing c.
func SetClock(c *Coordinator, now func() time.Time) { c.now = now }

// SetSnapshotRequestHook makes later WatchSnapshotRequests watchers call fn
// after handling each request; call before starting them.
func SetSnapshotRequestHook(c *Coordinator, fn func(counter uint64)) { c.snapReqSeen = fn }

// StopWatcher exposes stopWatcher to the external tests.
var StopWatcher = stopWatcher
