package relay

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ckfrelay/ckfrelay/testenv"
)

// TestParseAckReplyMatchesMetadata: on real JetStream messages the reply
// subject parses to the stream sequence, pending count and timestamp that
// jetstream's Metadata returns.
func TestParseAckReplyMatchesMetadata(t *testing.T) {
	srv := testenv.StartServer(t)
	js := srv.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ACKS", Subjects: []string{"acks.>"}, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	for i := range n {
		if _, err := js.Publish(ctx, fmt.Sprintf("acks.%d", i), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		want, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		got, ok := parseAckReply(m.Reply())
		if !ok || got.streamSeq != want.Sequence.Stream || got.pending != want.NumPending || !got.timestamp.Equal(want.Timestamp) {
			t.Fatalf("%q: parsed %+v, %v; Metadata %+v", m.Reply(), got, ok, want)
		}
	}
}

// TestParseAckReplyForms: both subject forms, the token counts nats.go
// refuses, and its reading of a non-numeric token as 0.
func TestParseAckReplyForms(t *testing.T) {
	ts := time.Unix(0, 1700000000123456789)
	ok := func(seq, pending uint64, tm time.Time) ackMeta {
		return ackMeta{streamSeq: seq, pending: pending, timestamp: tm}
	}
	for reply, want := range map[string]ackMeta{
		"$JS.ACK.S.C.1.42.7.1700000000123456789.3":             ok(42, 3, ts),
		"$JS.ACK.D.H.S.C.1.42.7.1700000000123456789.3":         ok(42, 3, ts),
		"$JS.ACK.D.H.S.C.1.42.7.1700000000123456789.3.rnd":     ok(42, 3, ts),
		"$JS.ACK.D.H.S.C.1.42.7.1700000000123456789.3.rnd.x.y": ok(42, 3, ts),
		"$JS.ACK._.H.S.C.1.4x.7.1700000000123456789.":          ok(0, 0, ts),
		"$JS.ACK.S.C.1.42.7..9":                                ok(42, 9, time.Unix(0, 0)),
	} {
		got, isOK := parseAckReply(reply)
		if !isOK || got.streamSeq != want.streamSeq || got.pending != want.pending || !got.timestamp.Equal(want.timestamp) {
			t.Errorf("%q: %+v, %v; want %+v", reply, got, isOK, want)
		}
	}
	for _, reply := range []string{
		"", "$JS.ACK", "$JS.ACK.S.C.1.42.7.9", "$JS.ACK.D.H.S.C.1.42.7.9",
		"$JS.ACK.S.C.1.42.7.1.2.3", "$JS.NAK.S.C.1.42.7.1700000000123456789.3", "_INBOX.a.b.c.d.e.f.g.h.i.j",
	} {
		if got, isOK := parseAckReply(reply); isOK {
			t.Errorf("%q accepted: %+v", reply, got)
		}
	}
}
