package bridge_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves goroutines behind (every
// bridge session closes its sockets and waits for its readers). Ignored,
// both the libraries': nats.go's parked async-reply goroutine (see
// e2e/leak_test.go), and zmq4's PUB writer, which its Close never stops
// (only the fake engine uses PUB; the bridge uses SUB and DEALER).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"),
		goleak.IgnoreAnyFunction("github.com/go-zeromq/zmq4.(*pubMWriter).run"),
		// nats-server's process-wide access-time ticker (see e2e/leak_test.go).
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server/ats.Register.func1"))
}
