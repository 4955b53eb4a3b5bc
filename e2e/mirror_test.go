package e2e

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/internal/indexer"
	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/client"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// An in-process mirror follows the same lanes as the indexer and answers
// exactly what the indexer answers, without a network hop.
func TestMirrorAnswersExactlyLikeTheIndexer(t *testing.T) {
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	// Both run the pkg/domains host, as global-indexer does.
	ix := startIndexerHost(t, nc, js, indexerConfig(t, nil))
	m, err := client.NewMirror(srv.Connect(t), client.MirrorConfig{Domain: domain, Logger: logger(t).With().Str("proc", "mirror").Logger()})
	if err != nil {
		t.Fatal(err)
	}
	mirror := background(t, m.Run)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := m.Match(ctx, api.MatchRequest{LocalHashes: []uint64{1}}); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("mirror without lanes: %v, want ErrUnavailable", err)
	}

	startRelay(t, nc, js, relayConfig(t, "dc-a", "relay-a", nil))
	startRelay(t, nc, js, relayConfig(t, "dc-b", "relay-b", nil))
	w := newWorkload(t, []string{"dc-a", "dc-b"}, 300, 7)
	w.publish(t, js, 300)
	w.converge(t, ix)
	testenv.WaitFor(t, settle, "mirror lanes at the indexer's sequences", func() bool {
		want, got := ix.Lanes(), m.Lanes()
		if len(want) != len(got) {
			return false
		}
		for i := range want {
			if got[i].State != want[i].State || got[i].InstalledSequence != want[i].InstalledSequence || got[i].Epoch != want[i].Epoch {
				return false
			}
		}
		return true
	})

	hits := 0
	for i, st := range w.steps {
		want, err := ix.Match(api.Query{Locals: st.Locals})
		if err != nil {
			t.Fatal(err)
		}
		req := api.MatchRequest{LocalHashes: make([]uint64, len(st.Locals))}
		for j, l := range st.Locals {
			req.LocalHashes[j] = uint64(l)
		}
		got, err := m.Match(ctx, req)
		if err != nil || !reflect.DeepEqual(withoutAges(got), withoutAges(want)) {
			t.Fatalf("step %d: mirror %+v %v, indexer %+v", i, got, err, want)
		}
		seqs := ckf.SequenceHashes(nil, st.Locals)
		hs := make([]uint64, len(seqs))
		for j, s := range seqs {
			hs[j] = uint64(s)
		}
		if got, err = m.MatchSequenceHashes(ctx, hs); err != nil || !reflect.DeepEqual(withoutAges(got), withoutAges(want)) {
			t.Fatalf("step %d by sequence hashes: mirror %+v %v, indexer %+v", i, got, err, want)
		}
		if want.Best != nil {
			hits++
		}
	}
	if hits == 0 {
		t.Fatal("no step matched a lane: the comparison proved nothing")
	}
	var se *client.StatusError
	if _, err := m.Match(ctx, api.MatchRequest{Tokens: []uint32{1}, BlockSize: 0}); !errors.As(err, &se) || !errors.Is(err, client.ErrBadRequest) || se.Field != "block_size" {
		t.Fatalf("bad request through the mirror: %v", err)
	}
	// The mirror is not an indexer replica: it never joined the NATS
	// match service, so the micro PING finds the indexer alone.
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.PublishRequest("$SRV.PING."+indexer.MicroServiceName, inbox, nil); err != nil {
		t.Fatal(err)
	}
	pongs := 0
	for {
		if _, err := sub.NextMsg(time.Second); err != nil {
			break
		}
		pongs++
	}
	if pongs != 1 {
		t.Fatalf("%d %s services answered PING, want the indexer alone", pongs, indexer.MicroServiceName)
	}
	mirror.stop(t)
}
