package e2e

import (
	"context"
	"errors"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/internal/queryapi"
	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/client"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// The Go client answers exactly what the indexer answers, over HTTP and
// over NATS, and maps the server's refusals to its typed errors.
func TestClientAnswersLikeTheIndexerOverHTTPAndNATS(t *testing.T) {
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	ix := startIndexer(t, nc, js, indexerConfig(t, nil))
	web := httptest.NewServer(queryapi.Handler(ix, ix.APIMetrics(), nil))
	defer web.Close()
	hc, err := client.NewHTTP(web.URL, web.Client())
	if err != nil {
		t.Fatal(err)
	}
	natsClient := client.NewNATS(srv.Connect(t), domain)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// No lane yet: both transports say ErrUnavailable.
	for name, c := range map[string]client.Matcher{"http": hc, "nats": natsClient} {
		testenv.WaitFor(t, settle, name+" match endpoint answers", func() bool {
			_, err := c.Match(ctx, api.MatchRequest{LocalHashes: []uint64{1}})
			return errors.Is(err, client.ErrUnavailable)
		})
	}

	startRelay(t, nc, js, relayConfig(t, "dc-a", "relay-a", nil))
	startRelay(t, nc, js, relayConfig(t, "dc-b", "relay-b", nil))
	w := newWorkload(t, []string{"dc-a", "dc-b"}, 300, 5)
	w.publish(t, js, 300)
	w.converge(t, ix)

	matched := 0
	for i, st := range w.steps {
		want, err := ix.Match(api.Query{Locals: st.Locals})
		if err != nil {
			t.Fatal(err)
		}
		req := api.MatchRequest{LocalHashes: make([]uint64, len(st.Locals))}
		for j, l := range st.Locals {
			req.LocalHashes[j] = uint64(l)
		}
		for name, c := range map[string]client.Matcher{"http": hc, "nats": natsClient} {
			got, err := c.Match(ctx, req)
			if err != nil {
				t.Fatalf("%s step %d: %v", name, i, err)
			}
			if !reflect.DeepEqual(withoutAges(got), withoutAges(want)) {
				t.Fatalf("%s step %d: client %+v, indexer %+v", name, i, got, want)
			}
			seqs := ckf.SequenceHashes(nil, st.Locals)
			hs := make([]uint64, len(seqs))
			for j, s := range seqs {
				hs[j] = uint64(s)
			}
			got, err = c.MatchSequenceHashes(ctx, hs)
			if err != nil || !reflect.DeepEqual(withoutAges(got), withoutAges(want)) {
				t.Fatalf("%s binary step %d: client %+v %v, indexer %+v", name, i, got, err, want)
			}
		}
		if want.Best != nil {
			matched++
		}
	}
	if matched == 0 {
		t.Fatal("no step matched any lane: the comparison proved nothing")
	}

	// Refusals arrive typed, with the field the server named.
	for name, c := range map[string]client.Matcher{"http": hc, "nats": natsClient} {
		_, err := c.Match(ctx, api.MatchRequest{Tokens: []uint32{1, 2}, BlockSize: api.MaxBlockSize + 1})
		var se *client.StatusError
		if !errors.Is(err, client.ErrBadRequest) || !errors.As(err, &se) || se.Field != "block_size" {
			t.Fatalf("%s: bad block size gave %v", name, err)
		}
	}
	big := api.MatchRequest{LocalHashes: make([]uint64, api.MaxRequestBytes/2)}
	if _, err := hc.Match(ctx, big); !errors.Is(err, client.ErrTooLarge) {
		t.Fatalf("http: oversized body gave %v", err)
	}
	// Over NATS the test server's max payload lets it through, and the
	// endpoint refuses it as HTTP does.
	if _, err := natsClient.Match(ctx, big); !errors.Is(err, client.ErrTooLarge) {
		t.Fatalf("nats: oversized body gave %v", err)
	}
}
