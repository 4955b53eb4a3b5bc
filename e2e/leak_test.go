package e2e

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves goroutines behind. nats.go's
// JetStream context parks one goroutine per connection that used async
// publish replies on a channel that is nil once the connection closed; it
// is the library's, not ours.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"),
		// nats-server's process-wide access-time ticker: it ends when the last
		// file store of any server stops, after the test's own goroutines.
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server/ats.Register.func1"))
}
