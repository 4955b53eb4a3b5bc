package client

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	kvrelayv1 "github.com/ckfrelay/ckfrelay/dynamo/kvrelay/v1"
	"github.com/ckfrelay/ckfrelay/pkg/backoff"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

// The load streams (docs/kvrelay-v1.md §6.3–6.4). With Config.Load set, a
// connection epoch also subscribes SubscribeKvPoolLoad and
// SubscribeServingLoad and hands the followed producer's entry of every
// valid window to the LoadSink. The consumer rules:
//
//   - windows are complete: a producer absent from a window has no load, so
//     the sink gets an incomplete (neutral) value for it;
//   - KV occupancy is used only when kv_expected_ranks > 0, observed equals
//     expected and total_kv_blocks > 0; serving load only with status
//     COMPLETE and both pool token gauges;
//   - a window must carry the relay's identity and a window_sequence above
//     the last one; anything else (or a failed stream) tells the sink the
//     load is missing and reopens that stream alone, after backoff: a load
//     gap never invalidates the lane;
//   - freshness is the sink's business, by its local receive time.

// LoadSink receives the followed pool's load. Its methods are called from
// the load streams' goroutines, possibly concurrently with each other and
// with the LaneSink's.
type LoadSink interface {
	// KvPoolLoad receives one window's KV occupancy of the followed
	// producer (key); Complete false is the neutral fallback.
	KvPoolLoad(key kvrelay.ProducerKey, seq uint64, l KvLoad)
	// ServingLoad receives one window's serving load of the followed
	// producer; Complete false is the neutral fallback.
	ServingLoad(key kvrelay.ProducerKey, seq uint64, l ServingLoad)
}

// KvLoad is a pool's KV occupancy (§6.3).
type KvLoad struct {
	Complete    bool
	UsedBlocks  uint64
	TotalBlocks uint64
	// Ranks is the number of ranks (workers) the occupancy covers, every
	// one expected (kv_expected_ranks) when Complete.
	Ranks uint64
}

// ServingLoad is a pool's scheduler load (§6.4).
type ServingLoad struct {
	Complete            bool
	ActivePrefillTokens uint64
	ActiveDecodeBlocks  uint64
	// Workers is the pool's live workers (deployment.live_workers; 0:
	// unknown), the router's drain rate of the pool's queue.
	Workers uint64
}

// MetricLoadWindows counts load windows {source, stream=kv|serving,
// outcome=accepted|invalid|stream_error}.
const MetricLoadWindows = "ckf_kvrelay_client_load_windows_total"

// outcomeOutOfRange counts a window whose followed producer's entry holds
// a value past the wire's bounds (pkg/wire's MaxLoad*): that entry is read
// as unknown (the neutral fallback), never as a queue that wraps or
// shuts the DC out, and the stream goes on.
const outcomeOutOfRange = "out_of_range"

// errLoadWindow marks a window that breaks the stream rules.
var errLoadWindow = errors.New("kvrelay client: invalid load window")

// loadStreams runs both load streams until ctx ends.
func (f *Follower) loadStreams(ctx context.Context, rc kvrelayv1.KvEventRelayClient, relay *kvrelayv1.RelayIdentity) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		f.loadLoop(ctx, "kv", func(ctx context.Context) error { return f.kvLoadStream(ctx, rc, relay) })
	}()
	go func() {
		defer wg.Done()
		f.loadLoop(ctx, "serving", func(ctx context.Context) error { return f.servingLoadStream(ctx, rc, relay) })
	}()
	wg.Wait()
}

// loadLoop reopens one load stream after each failure, with its own
// backoff; each failure reports the load missing.
func (f *Follower) loadLoop(ctx context.Context, stream string, run func(context.Context) error) {
	bo := &backoff.Backoff{Min: f.cfg.BackoffMin, Max: f.cfg.BackoffMax, Jitter: true, Rand: f.cfg.Rand}
	for ctx.Err() == nil {
		err := run(ctx)
		if ctx.Err() != nil {
			return
		}
		f.loadCount(stream, "stream_error")
		f.log.Debug().Err(err).Str("stream", stream).Msg("kvrelay load stream ended; load missing until it is reopened")
		f.loadMissing(stream)
		select {
		case <-ctx.Done():
			return
		case <-f.cfg.After(bo.Next()):
		}
	}
}

// loadMissing hands the neutral fallback for stream to the sink.
func (f *Follower) loadMissing(stream string) {
	sel := f.selected.Load()
	if sel == nil {
		return
	}
	if stream == "kv" {
		f.cfg.Load.KvPoolLoad(sel.Key, 0, KvLoad{})
	} else {
		f.cfg.Load.ServingLoad(sel.Key, 0, ServingLoad{})
	}
}

func (f *Follower) loadCount(stream, outcome string) {
	if f.m != nil {
		f.m.loadWindows.WithLabelValues(f.cfg.Name, stream, outcome).Inc()
	}
}

// checkWindow checks what every load window must hold.
func checkWindow(version, marker uint32, got, relay *kvrelayv1.RelayIdentity, seq uint64, last *uint64, first *bool) error {
	if err := kvrelay.ValidateResponseEnvelope(version, marker, got); err != nil {
		return fmt.Errorf("%w: %w", errLoadWindow, err)
	}
	if !proto.Equal(got, relay) {
		return fmt.Errorf("%w: relay identity differs from the relay's", errLoadWindow)
	}
	if !*first && seq <= *last {
		return fmt.Errorf("%w: window %d after %d", errLoadWindow, seq, *last)
	}
	*first, *last = false, seq
	return nil
}

// producerEntry finds sel's entry among producers (validated and unique by
// key); -1 when absent. A duplicate key fails the window; an entry without
// a valid identity is skipped (quarantined).
func producerEntry(n int, producer func(int) *kvrelayv1.ProducerIdentity, sel *Selection) (int, error) {
	found := -1
	seen := map[kvrelay.ProducerKey]bool{}
	for i := range n {
		p := producer(i)
		if p == nil {
			return -1, fmt.Errorf("%w: entry %d has no producer", errLoadWindow, i)
		}
		if kvrelay.ValidateProducerIdentity(p) != nil {
			continue
		}
		k, err := kvrelay.KeyOf(p)
		if err != nil {
			continue
		}
		if seen[k] {
			return -1, fmt.Errorf("%w: producer repeated", errLoadWindow)
		}
		seen[k] = true
		if sel != nil && k == sel.Key {
			found = i
		}
	}
	return found, nil
}

func (f *Follower) kvLoadStream(ctx context.Context, rc kvrelayv1.KvEventRelayClient, relay *kvrelayv1.RelayIdentity) error {
	st, err := rc.SubscribeKvPoolLoad(ctx, &kvrelayv1.SubscribeKvPoolLoadRequest{
		SubscriberId: f.cfg.SubscriberBase + "/kv-load", ContractMarker: kvrelayv1.ContractMarker})
	if err != nil {
		return err
	}
	return followLoad(f, "kv", st.Recv, relay, nil, func(key kvrelay.ProducerKey, seq uint64, e *kvrelayv1.KvPoolLoadEntry) string {
		var l KvLoad
		outcome := "accepted"
		if e != nil && e.GetKvExpectedRanks() > 0 && e.GetKvObservedRanks() == e.GetKvExpectedRanks() && e.GetTotalKvBlocks() > 0 {
			l = KvLoad{Complete: true, UsedBlocks: e.GetKvUsedBlocks(), TotalBlocks: e.GetTotalKvBlocks(), Ranks: uint64(e.GetKvExpectedRanks())}
		}
		if l.UsedBlocks > wire.MaxLoadBlocks || l.TotalBlocks > wire.MaxLoadBlocks {
			l, outcome = KvLoad{}, outcomeOutOfRange
		}
		f.cfg.Load.KvPoolLoad(key, seq, l)
		return outcome
	})
}

func (f *Follower) servingLoadStream(ctx context.Context, rc kvrelayv1.KvEventRelayClient, relay *kvrelayv1.RelayIdentity) error {
	st, err := rc.SubscribeServingLoad(ctx, &kvrelayv1.SubscribeServingLoadRequest{
		SubscriberId: f.cfg.SubscriberBase + "/serving-load", ContractMarker: kvrelayv1.ContractMarker})
	if err != nil {
		return err
	}
	check := func(pools []*kvrelayv1.PoolServingLoad) error {
		for _, p := range pools {
			if p.GetLoad().GetStatus() == kvrelayv1.DataStatus_DATA_STATUS_UNSPECIFIED {
				return fmt.Errorf("%w: pool status UNSPECIFIED", errLoadWindow)
			}
		}
		return nil
	}
	return followLoad(f, "serving", st.Recv, relay, check, func(key kvrelay.ProducerKey, seq uint64, e *kvrelayv1.PoolServingLoad) string {
		var l ServingLoad
		outcome := "accepted"
		lv := e.GetLoad()
		tk := lv.GetTokens()
		// An unknown status is unsupported (neutral), not malformed.
		if e != nil && lv.GetStatus() == kvrelayv1.DataStatus_DATA_STATUS_COMPLETE && tk != nil && tk.ActivePrefillTokens != nil && tk.ActiveDecodeBlocks != nil {
			l = ServingLoad{Complete: true, ActivePrefillTokens: tk.GetActivePrefillTokens(), ActiveDecodeBlocks: tk.GetActiveDecodeBlocks(),
				Workers: e.GetDeployment().GetLiveWorkers()}
		}
		if l.ActivePrefillTokens > wire.MaxLoadTokens || l.ActiveDecodeBlocks > wire.MaxLoadBlocks || l.Workers > wire.MaxLoadWorkers {
			l, outcome = ServingLoad{}, outcomeOutOfRange
		}
		f.cfg.Load.ServingLoad(key, seq, l)
		return outcome
	})
}

// loadWindow is a load stream's update (KvPoolLoadUpdate,
// ServingLoadUpdate) with entries E.
type loadWindow[E loadEntry] interface {
	GetProtocolVersion() uint32
	GetContractMarker() uint32
	GetRelay() *kvrelayv1.RelayIdentity
	GetWindowSequence() uint64
	GetPools() []E
}

// loadEntry is one producer's entry of a load window.
type loadEntry interface {
	GetProducer() *kvrelayv1.ProducerIdentity
}

// followLoad reads one load stream's windows until it fails: each window's
// envelope and sequence are checked (checkWindow), its producers (no
// repeat) and, when check is set, its entries; a bad window ends the
// stream (counted invalid). deliver gets the selected producer's entry
// (the zero E when the window lacks it), nothing while no producer is
// selected, and names the window's outcome (accepted, or out_of_range
// when a value is past the wire's bounds and was read as unknown).
func followLoad[W loadWindow[E], E loadEntry](f *Follower, stream string, recv func() (W, error), relay *kvrelayv1.RelayIdentity,
	check func([]E) error, deliver func(key kvrelay.ProducerKey, seq uint64, e E) string) error {
	var last uint64
	first := true
	for {
		u, err := recv()
		if err != nil {
			return err
		}
		if err := checkWindow(u.GetProtocolVersion(), u.GetContractMarker(), u.GetRelay(), relay, u.GetWindowSequence(), &last, &first); err != nil {
			f.loadCount(stream, "invalid")
			return err
		}
		pools := u.GetPools()
		sel := f.selected.Load()
		i, err := producerEntry(len(pools), func(i int) *kvrelayv1.ProducerIdentity { return pools[i].GetProducer() }, sel)
		if err == nil && check != nil {
			err = check(pools)
		}
		if err != nil {
			f.loadCount(stream, "invalid")
			return err
		}
		if sel == nil {
			f.loadCount(stream, "accepted")
			continue
		}
		var e E
		if i >= 0 {
			e = pools[i]
		}
		f.loadCount(stream, deliver(sel.Key, u.GetWindowSequence(), e))
	}
}

func newLoadWindowsVec() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricLoadWindows,
		Help: "dynamo.kvrelay.v1 load windows by stream (kv, serving) and outcome (accepted, invalid, stream_error)."}, []string{"source", "stream", "outcome"})
}
