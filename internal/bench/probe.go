package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// probePoll is how often a latency probe checks whether its message has
// arrived (the pipeline: Match answers it; raw JetStream: the pull
// consumer received it).
const probePoll = 25 * time.Microsecond

// awaitProbe checks seen every probePoll until it reports true and
// returns the time from start to that check. Both sides of every latency
// pair end their probes here, so both carry the same polling error.
// The pause between checks is a probeTimer, not time.Sleep: a Go timer
// shorter than a millisecond fires about a millisecond late when the
// process has nothing else to run, so a sleeping poller added up to 1 ms
// to a probe depending on what else the process happened to be doing.
// failed, when not nil, ends the wait with its error.
func awaitProbe(ctx context.Context, start time.Time, timeout time.Duration, seen func() bool, failed func() error) (time.Duration, error) {
	pt, err := newProbeTimer()
	if err != nil {
		return 0, err
	}
	defer pt.close()
	deadline := start.Add(timeout)
	for {
		if seen() {
			return time.Since(start), nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("bench: probe not seen within %s", timeout)
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if failed != nil {
			if err := failed(); err != nil {
				return 0, err
			}
		}
		if err := pt.sleep(probePoll); err != nil {
			return 0, err
		}
	}
}

// publishProbe publishes a probe without waiting for its acknowledgement
// (ackProbe takes it once the probe was seen): on either side the message
// may arrive before the PubAck does, and the poll starts at once.
func (e *Env) publishProbe(ctx context.Context, subj string, data []byte) (jetstream.PubAckFuture, error) {
	f, err := e.publishAsync(ctx, subj, data)
	if err != nil {
		return nil, fmt.Errorf("bench: publish probe: %w", err)
	}
	return f, nil
}

// ackProbe waits for a probe's acknowledgement.
func (e *Env) ackProbe(ctx context.Context, f jetstream.PubAckFuture) error {
	select {
	case <-f.Ok():
		return nil
	case err := <-f.Err():
		return fmt.Errorf("bench: publish probe: %w", err)
	case <-time.After(e.cfg.Timeout):
		return fmt.Errorf("bench: probe not acknowledged within %s", e.cfg.Timeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// received reports, without blocking, whether rc received a message.
func (rc *rawConsumer) received() bool {
	select {
	case <-rc.at:
		return true
	default:
		return false
	}
}
