package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// Why: under load the relays (which create KVEVENTS) start after the
// workload began publishing. The client retried the refused async
// publishes behind later ones, the stream held a removal before the store
// it follows, and the lane stayed below the replay's "exact" depth for
// good (TestTwoDCsAnswerTheExactDepthPerDC, TestAttackDeletedInputStream
// before any attack). The stream must hold the events in replay order
// however late it appears.
func TestWorkloadIsStoredInReplayOrderWhenTheInputStreamAppearsLate(t *testing.T) {
	srv := testenv.StartServer(t)
	js := srv.JetStream(t)
	w := newWorkload(t, []string{"dc-a", "dc-b"}, 1500, 1)
	created := make(chan error, 1)
	go func() {
		// Late enough that the first messages find no stream, early
		// enough that the rest of the burst is still being sent.
		time.Sleep(150 * time.Millisecond)
		_, err := streams.EnsureEvents(context.Background(), js, streams.Options{Memory: true})
		created <- err
	}()
	w.publish(t, js, 1500)
	if err := <-created; err != nil {
		t.Fatal(err)
	}

	var want [][]byte
	for _, st := range w.steps {
		if len(st.Events) == 0 {
			continue
		}
		b, err := json.Marshal(st.Events)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, streams.EventStream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	it, err := cons.Messages()
	if err != nil {
		t.Fatal(err)
	}
	defer it.Stop()
	for i, b := range want {
		m, err := it.Next(jetstream.NextMaxWait(10 * time.Second))
		if err != nil {
			t.Fatalf("message %d of %d: %v", i+1, len(want), err)
		}
		if !bytes.Equal(m.Data(), b) {
			t.Fatalf("stream message %d is not the replay's message %d: the input stream holds the events in another order", i+1, i+1)
		}
	}
}
