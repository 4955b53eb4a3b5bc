package relay

import (
	"context"
	"fmt"
	"strings"
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

// refAckReply is parseAckReply written the plain way (split, then index),
// as nats.go's Metadata reads the subject: the reference the fuzz target
// holds the in-place parser to.
func refAckReply(reply string) (ackMeta, bool) {
	toks := strings.Split(reply, ".")
	if len(toks) < 2 || toks[0] != "$JS" || toks[1] != "ACK" {
		return ackMeta{}, false
	}
	var seq, tm, pending int
	switch n := len(toks); {
	case n == 9:
		seq, tm, pending = 5, 7, 8
	case n >= 11:
		seq, tm, pending = 7, 9, 10
	default:
		return ackMeta{}, false
	}
	return ackMeta{streamSeq: ackNum(toks[seq]), pending: ackNum(toks[pending]),
		timestamp: time.Unix(0, int64(ackNum(toks[tm])))}, true
}

// FuzzParseAckReply: any reply subject, forged, truncated or with numbers
// past 64 bits, parses as the reference does and never panics.
func FuzzParseAckReply(f *testing.F) {
	for _, s := range []string{
		"$JS.ACK.S.C.1.42.7.1700000000123456789.3",
		"$JS.ACK.D.H.S.C.1.42.7.1700000000123456789.3.rnd",
		"$JS.ACK.S.C.1.99999999999999999999999.7.99999999999999999999.18446744073709551616",
		"$JS.ACK.......", "$JS.ACK", "$JS.ACKX.S.C.1.2.3.4.5", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, reply string) {
		got, ok := parseAckReply(reply)
		want, wantOK := refAckReply(reply)
		if ok != wantOK || got.streamSeq != want.streamSeq || got.pending != want.pending || !got.timestamp.Equal(want.timestamp) {
			t.Fatalf("%q: %+v, %v; the reference reads %+v, %v", reply, got, ok, want, wantOK)
		}
	})
}
