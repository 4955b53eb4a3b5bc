package relay_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ckfrelay/ckfrelay/internal/relay"
	"github.com/ckfrelay/ckfrelay/pkg/routerevent"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// TestASlowLaneCarriesLargeDeltas: when each delta publish costs a WAN
// round trip (a hook holds every delta 60 ms here), the relay must not
// spend a round trip on a delta of a few events. Before, a flush tick
// that fell during the publish, or the input's first lull after it, cut
// the next delta at once, so every real delta was followed by a tiny one:
// on a 150 ms link the relay applied 1,450 events/s of 10,000 offered.
func TestASlowLaneCarriesLargeDeltas(t *testing.T) {
	srv := testenv.StartServer(t)
	nc := srv.Connect(t)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(1<<14))
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig("a") // PublishInterval 2 ms: ticks fall during every publish
	cfg.HeartbeatInterval = time.Hour
	cfg.FlushEvents = 1 << 20
	const delay = 60 * time.Millisecond
	r, _ := startRelayWith(t, nc, js, cfg, func(r *relay.Relay) {
		relay.SetBeforePublish(r, func(k wire.MessageKind) error {
			if k == wire.KindDelta {
				time.Sleep(delay)
			}
			return nil
		})
	})
	testenv.WaitFor(t, 0, "active", func() bool { return r.Status().State == relay.StateActive })
	before := r.Status()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lanes, err := js.Stream(ctx, streams.LaneStream)
	if err != nil {
		t.Fatal(err)
	}
	subj, _ := wire.NewLaneSubjects(domain, "a")
	from, err := streams.LastLaneSequence(ctx, lanes, subj.Filter)
	if err != nil {
		t.Fatal(err)
	}

	// A steady stream, 20 single-event messages every 5 ms for about a
	// second and a half.
	const events = 6000
	evSubj, _ := wire.WorkerEventsSubject(domain, "a", 1)
	for i := range events {
		h := uint64(i+1) * 0x9E3779B97F4A7C15
		b, err := json.Marshal([]routerevent.RouterEvent{{WorkerID: 1, Event: routerevent.KvCacheEvent{EventID: uint64(i),
			Data: routerevent.EventData{Kind: routerevent.EventStored, Stored: routerevent.StoreData{Blocks: []routerevent.StoredBlock{{BlockHash: h, TokensHash: h}}}}}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.PublishAsync(evSubj, b); err != nil {
			t.Fatal(err)
		}
		if i%20 == 19 {
			time.Sleep(5 * time.Millisecond)
		}
	}
	<-js.PublishAsyncComplete()
	testenv.WaitFor(t, time.Minute, "every event applied", func() bool { return r.Status().Events-before.Events >= events })
	deltas := int(r.Status().Sequence - before.Sequence)

	cons, err := lanes.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj.Delta},
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from + 1})
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int
	for len(sizes) < deltas {
		msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("after %d of %d deltas: %v", len(sizes), deltas, err)
		}
		d, err := wire.DecodeDelta(msg.Data())
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, len(d.Images))
	}
	tiny := 0
	for _, n := range sizes[:len(sizes)-1] { // the last one takes what is left
		if n <= 5 {
			tiny++
		}
	}
	t.Logf("%d events in %d deltas, %d of them of at most 5 images: %v", events, deltas, tiny, sizes)
	if tiny > deltas/10 { // before: about half of them
		t.Fatalf("%d of %d deltas carried at most 5 images, each a round trip on a WAN lane: %v", tiny, deltas, sizes)
	}
}
