package relay

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ckfrelay/ckfrelay/internal/replay"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/producer"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
	"github.com/ckfrelay/ckfrelay/testenv"
	"github.com/ckfrelay/ckfrelay/testenv/cputime"
)

// BenchmarkApplyMessage times the relay's input path per input message
// (metadata, subject, decode, tracing, exact-state apply) on real
// JetStream messages fetched from an embedded server before the timer
// starts, replayed from the Mooncake trace; a publication window is cut
// (its delta not published) every 64 messages, as under load. ns/op
// and cpu-ns/event are the figures to compare with the pipeline's CPU
// per event.
func BenchmarkApplyMessage(b *testing.B) {
	srv := testenv.StartServer(b)
	nc, js := srv.Connect(b), srv.JetStream(b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const dom, dc = "bench", "a"
	filter, err := wire.WorkerEventsFilter(dom, dc)
	if err != nil {
		b.Fatal(err)
	}
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "BENCHIN", Subjects: []string{filter}, Storage: jetstream.MemoryStorage})
	if err != nil {
		b.Fatal(err)
	}
	reqs, err := replay.LoadEmbedded()
	if err != nil {
		b.Fatal(err)
	}
	rp, err := replay.New(replay.Config{DCs: []string{dc}, WorkersPerDC: 3, CapacityBlocks: 384, Duplication: 1 << 10, Affinity: 0.7, Seed: 1}, reqs)
	if err != nil {
		b.Fatal(err)
	}
	const n = 4096
	events := 0
	for sent := 0; sent < n; {
		st, ok := rp.Next()
		if !ok {
			b.Fatal("replay exhausted")
		}
		if len(st.Events) == 0 {
			continue
		}
		data, err := json.Marshal(st.Events)
		if err != nil {
			b.Fatal(err)
		}
		subj, _ := wire.WorkerEventsSubject(dom, dc, st.Worker)
		if _, err := js.Publish(ctx, subj, data); err != nil {
			b.Fatal(err)
		}
		events += len(st.Events)
		sent++
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		b.Fatal(err)
	}
	msgs := make([]jetstream.Msg, 0, n)
	for len(msgs) < n {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			b.Fatal(err)
		}
		msgs = append(msgs, m)
	}
	cfg := DefaultConfig(dom, dc)
	cfg.CKF = ckf.NewConfig(1 << 15)
	cfg.CKF.PublishEveryNEvents = 1 << 62
	r, err := New(nc, js, cfg)
	if err != nil {
		b.Fatal(err)
	}
	state, err := producer.NewState(cfg.CKF)
	if err != nil {
		b.Fatal(err)
	}
	e := &epochRun{r: r, ctx: ctx, state: state}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cputime.Process()
	applied := 0
	for i := range b.N {
		applied += e.applyMessage(msgs[i%n])
		if i%64 == 63 {
			e.state.Flush()
			e.applySpans, e.oldestEvent = e.applySpans[:0], time.Time{}
		}
	}
	cpu := cputime.Process() - cpu0
	b.StopTimer()
	if applied > 0 {
		// The process's CPU time, robust to a shared machine (the server's
		// idle goroutines add little).
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(applied), "cpu-ns/event")
	}
	b.ReportMetric(float64(events)/n, "events/msg")
}
