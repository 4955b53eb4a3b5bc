package client_test

import (
	"sync"
	"testing"
	"time"

	kvrelayv1 "github.com/ckfrelay/ckfrelay/dynamo/kvrelay/v1"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/client"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/server"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

// recLoad records the load a follower hands over.
type recLoad struct {
	mu      sync.Mutex
	kv      []client.KvLoad
	serving []client.ServingLoad
	keys    []kvrelay.ProducerKey
}

func (r *recLoad) KvPoolLoad(key kvrelay.ProducerKey, _ uint64, l client.KvLoad) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.kv = append(r.kv, l)
	r.keys = append(r.keys, key)
}

func (r *recLoad) ServingLoad(key kvrelay.ProducerKey, _ uint64, l client.ServingLoad) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.serving = append(r.serving, l)
	r.keys = append(r.keys, key)
}

func (r *recLoad) last() (client.KvLoad, client.ServingLoad, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.kv) == 0 || len(r.serving) == 0 {
		return client.KvLoad{}, client.ServingLoad{}, false
	}
	return r.kv[len(r.kv)-1], r.serving[len(r.serving)-1], true
}

func waitLoad(t *testing.T, r *recLoad, what string, ok func(client.KvLoad, client.ServingLoad) bool) {
	t.Helper()
	deadline := time.Now().Add(waitTotal)
	for time.Now().Before(deadline) {
		if kv, sv, have := r.last(); have && ok(kv, sv) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	kv, sv, _ := r.last()
	t.Fatalf("%s: last kv %+v serving %+v", what, kv, sv)
}

// §6.3–6.4's consumer rules: occupancy only with every expected rank
// observed and a known capacity, serving load only when COMPLETE; anything
// else is handed over as the neutral fallback, never as zero load.
func TestFollowerHandsOverOnlyCompleteLoad(t *testing.T) {
	pub := newTestPub()
	gen := pub.setGen(t, testSpec, 3, 1024)
	addr, _ := serveReal(t, pub, func(c *server.Config) { c.LoadWindow = 10 * time.Millisecond })
	rec := &recLoad{}
	startFollower(t, addr, newRecSink(t), func(c *client.Config) { c.Load = rec })

	waitLoad(t, rec, "no load known", func(kv client.KvLoad, sv client.ServingLoad) bool { return !kv.Complete && !sv.Complete })
	pub.SetLoad(server.PoolLoad{UsedBlocks: 30, TotalBlocks: 100, ObservedRanks: 2, ExpectedRanks: 2},
		&server.ServingLoad{ActivePrefillTokens: 900, ActiveDecodeBlocks: 12, Workers: 2, SourceTime: time.Now()})
	waitLoad(t, rec, "complete load", func(kv client.KvLoad, sv client.ServingLoad) bool {
		return kv == client.KvLoad{Complete: true, UsedBlocks: 30, TotalBlocks: 100, Ranks: 2} &&
			sv == client.ServingLoad{Complete: true, ActivePrefillTokens: 900, ActiveDecodeBlocks: 12, Workers: 2}
	})
	for name, l := range map[string]server.PoolLoad{
		"a rank missing":   {UsedBlocks: 30, TotalBlocks: 100, ObservedRanks: 1, ExpectedRanks: 2},
		"capacity unknown": {UsedBlocks: 30, TotalBlocks: 0, ObservedRanks: 2, ExpectedRanks: 2},
		"no ranks":         {UsedBlocks: 0, TotalBlocks: 100},
		// Past the wire's bounds (an underflowed counter): unknown, not a
		// queue that wraps or shuts the DC out.
		"used past the bound":     {UsedBlocks: wire.MaxLoadBlocks + 1, TotalBlocks: 100, ObservedRanks: 2, ExpectedRanks: 2},
		"capacity past the bound": {UsedBlocks: 30, TotalBlocks: 1<<64 - 1, ObservedRanks: 2, ExpectedRanks: 2},
	} {
		pub.SetLoad(l, nil)
		waitLoad(t, rec, name, func(kv client.KvLoad, sv client.ServingLoad) bool { return !kv.Complete && !sv.Complete })
	}
	for name, sl := range map[string]server.ServingLoad{
		"prefill past the bound": {ActivePrefillTokens: wire.MaxLoadTokens + 1, ActiveDecodeBlocks: 12, Workers: 2, SourceTime: time.Now()},
		"decode past the bound":  {ActivePrefillTokens: 900, ActiveDecodeBlocks: 1<<64 - 1, Workers: 2, SourceTime: time.Now()},
		"workers past the bound": {ActivePrefillTokens: 900, ActiveDecodeBlocks: 12, Workers: wire.MaxLoadWorkers + 1, SourceTime: time.Now()},
		// Sent DEGRADED: an estimate is not the pool's measured gauge.
		"prefill estimated": {ActivePrefillTokens: 900, ActiveDecodeBlocks: 12, Workers: 2, SourceTime: time.Now(), PrefillEstimated: true},
	} {
		pub.SetLoad(server.PoolLoad{UsedBlocks: 30, TotalBlocks: 100, ObservedRanks: 2, ExpectedRanks: 2}, &server.ServingLoad{ActivePrefillTokens: 900, ActiveDecodeBlocks: 12, Workers: 2, SourceTime: time.Now()})
		waitLoad(t, rec, name+": complete first", func(kv client.KvLoad, sv client.ServingLoad) bool { return kv.Complete && sv.Complete })
		pub.SetLoad(server.PoolLoad{UsedBlocks: 30, TotalBlocks: 100, ObservedRanks: 2, ExpectedRanks: 2}, &sl)
		waitLoad(t, rec, name, func(kv client.KvLoad, sv client.ServingLoad) bool { return kv.Complete && !sv.Complete })
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, k := range rec.keys {
		if k != gen.Key {
			t.Fatalf("load handed over for %v, following %v", k, gen.Key)
		}
	}
}

// loadRelay is a hostile relay whose KV load stream sends scripted windows
// (then holds the stream open); the serving stream is unimplemented.
type loadRelay struct {
	hostile
	windows []*kvrelayv1.KvPoolLoadUpdate
	mu      sync.Mutex
	opened  int
}

func (l *loadRelay) SubscribeKvPoolLoad(_ *kvrelayv1.SubscribeKvPoolLoadRequest, ss kvrelayv1.KvEventRelay_SubscribeKvPoolLoadServer) error {
	l.mu.Lock()
	l.opened++
	l.mu.Unlock()
	for _, u := range l.windows {
		if err := ss.Send(u); err != nil {
			return err
		}
	}
	<-ss.Context().Done()
	return nil
}

func (l *loadRelay) opens() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.opened
}

// A window that breaks the stream rules (here a window sequence that does
// not move) ends that stream alone: the load is handed over as missing,
// the stream is reopened, and the lane is never invalidated for it.
func TestABadLoadWindowReopensOnlyTheLoadStream(t *testing.T) {
	g := hostileGen(t, 1024, 7)
	win := func(seq uint64) *kvrelayv1.KvPoolLoadUpdate {
		return &kvrelayv1.KvPoolLoadUpdate{ProtocolVersion: 1, Relay: hostileRelay, WindowSequence: seq, WindowMs: 10, ContractMarker: kvrelayv1.ContractMarker,
			Pools: []*kvrelayv1.KvPoolLoadEntry{{Producer: g.Descriptor.Producer, KvUsedBlocks: 5, TotalKvBlocks: 50, KvObservedRanks: 1, KvExpectedRanks: 1}}}
	}
	lr := &loadRelay{hostile: hostile{catalog: []*kvrelayv1.KvPoolCatalogUpdate{catalogOf(1, g.Descriptor)}}, windows: []*kvrelayv1.KvPoolLoadUpdate{win(4), win(4)}}
	addr := serveFake(t, lr)
	rec := &recLoad{}
	sink := newRecSink(t)
	startFollower(t, addr, sink, func(c *client.Config) { c.Load = rec })
	deadline := time.Now().Add(waitTotal)
	for lr.opens() < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if lr.opens() < 3 {
		t.Fatalf("load stream opened %d times, want it reopened after each bad window", lr.opens())
	}
	rec.mu.Lock()
	var complete, missing int
	for _, l := range rec.kv {
		if l.Complete {
			complete++
		} else {
			missing++
		}
	}
	rec.mu.Unlock()
	if complete == 0 || missing == 0 {
		t.Fatalf("kv load handed over complete %d times and missing %d times; want both", complete, missing)
	}
	if sink.count("invalidate") != 0 {
		t.Fatal("a bad load window invalidated the lane")
	}
}
