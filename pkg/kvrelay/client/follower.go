package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	kvrelayv1 "github.com/ckfrelay/ckfrelay/dynamo/kvrelay/v1"
	"github.com/ckfrelay/ckfrelay/pkg/backoff"
	"github.com/ckfrelay/ckfrelay/pkg/cbi1"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay"
)

// Phases of a Follower (Status.Phase).
const (
	PhaseConnecting = "connecting"
	PhaseSelecting  = "selecting"
	PhaseAssembling = "assembling"
	PhaseInstalled  = "installed"
	PhaseRefused    = "refused"
	PhaseBackoff    = "backoff"
	PhaseStopped    = "stopped"
)

// Follower follows one pool of one relay into a LaneSink. Run it once.
type Follower struct {
	cfg Config
	log zerolog.Logger
	m   *Metrics

	mu sync.Mutex // guards st
	st Status
	// selected is the admitted selection being followed (nil: none), for
	// the load streams.
	selected atomic.Pointer[Selection]
}

// Status is a Follower's state for status pages.
type Status struct {
	Name, Addr string
	Phase      string
	// Producer is the followed producer key ("" before a selection).
	Producer string
	// Sequence is the installed (or last applied) sequence.
	Sequence uint64
	// LastFrame is when the last accepted frame arrived (local clock; zero:
	// none yet).
	LastFrame time.Time
	// LastFault is the last invalidation, "reason: detail".
	LastFault string
}

// New validates cfg and returns a Follower; it does no I/O.
func New(cfg Config) (*Follower, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	f := &Follower{cfg: cfg, m: cfg.Metrics,
		log: cfg.Logger.With().Str("component", "kvrelay-client").Str("source", cfg.Name).Str("addr", cfg.Addr).Logger()}
	f.st = Status{Name: cfg.Name, Addr: cfg.Addr, Phase: PhaseConnecting}
	return f, nil
}

// Status returns the current status. Safe for concurrent use.
func (f *Follower) Status() Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st
}

func (f *Follower) setStatus(fn func(*Status)) {
	f.mu.Lock()
	fn(&f.st)
	f.mu.Unlock()
}

// Run follows the pool until ctx ends, then returns nil; it fails only
// when the gRPC client cannot be built at all (a bad address).
func (f *Follower) Run(ctx context.Context) error {
	conn, err := grpc.NewClient("passthrough:///"+f.cfg.Addr, f.cfg.dialOptions()...)
	if err != nil {
		return fmt.Errorf("kvrelay client %s: %w", f.cfg.Name, err)
	}
	defer conn.Close()
	rc := kvrelayv1.NewKvEventRelayClient(conn)
	bo := &backoff.Backoff{Min: f.cfg.BackoffMin, Max: f.cfg.BackoffMax, Jitter: true, Rand: f.cfg.Rand}
	defer f.setStatus(func(s *Status) { s.Phase = PhaseStopped })
	defer f.installedGauge(0)
	for ctx.Err() == nil {
		start := f.cfg.Now()
		f.count(f.m.epochsFor(f.cfg.Name))
		f.epoch(ctx, rc, bo)
		if ctx.Err() != nil {
			return nil
		}
		if f.cfg.Now().Sub(start) >= f.cfg.BackoffMax {
			bo.Reset()
		}
		d := bo.Next()
		f.setStatus(func(s *Status) { s.Phase = PhaseBackoff })
		f.log.Debug().Dur("retry_in", d).Msg("connection epoch ended; reconnecting after backoff")
		select {
		case <-ctx.Done():
			return nil
		case <-f.cfg.After(d):
		}
	}
	return nil
}

// catalogMsg is one Recv of the catalog stream.
type catalogMsg struct {
	u       *kvrelayv1.KvPoolCatalogUpdate
	err     error
	trailer metadata.MD
}

// poolTask is a running pool stream; done receives its fault (already
// invalidated) or nil when it was stopped.
type poolTask struct {
	cancel context.CancelFunc
	done   chan *Fault
	sel    Selection
	start  time.Time
}

// epoch runs one connection epoch: the catalog stream and, while a
// descriptor is selected, its pool stream. It returns when the catalog
// stream fails or ctx ends; every fault has been invalidated by then.
func (f *Follower) epoch(ctx context.Context, rc kvrelayv1.KvEventRelayClient, bo *backoff.Backoff) {
	ectx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait() // after cancel (deferred below, runs first)
	defer cancel()
	f.setStatus(func(s *Status) { s.Phase = PhaseConnecting })
	// The relay's identity and protocol first (§2.1): a relay of another
	// contract fails here, before any state; every stream of the epoch must
	// then carry this identity.
	info, err := rc.GetRelayInfo(ectx, &kvrelayv1.RelayInfoRequest{ContractMarker: kvrelayv1.ContractMarker})
	if err != nil {
		f.fail(rpcFault("relay info", err, nil))
		return
	}
	if err := kvrelay.ValidateResponseEnvelope(info.GetProtocolVersion(), info.GetContractMarker(), info.GetRelay()); err != nil {
		f.fail(fault(ReasonContract, err, "relay info"))
		return
	}
	cat, err := rc.WatchKvPoolCatalog(ectx, &kvrelayv1.WatchKvPoolCatalogRequest{
		SubscriberId: f.cfg.SubscriberBase + "/catalog", ContractMarker: kvrelayv1.ContractMarker})
	if err != nil {
		f.fail(rpcFault("catalog", err, nil))
		return
	}
	updates := make(chan catalogMsg)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			u, err := cat.Recv()
			m := catalogMsg{u: u, err: err}
			if err != nil {
				m.trailer = cat.Trailer()
			}
			select {
			case updates <- m:
			case <-ectx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()

	if f.cfg.Load != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.loadStreams(ectx, rc, info.GetRelay())
		}()
	}
	defer f.selected.Store(nil)
	var (
		relay = info.GetRelay()
		rev   uint64
		last  *kvrelayv1.KvPoolCatalogSnapshot
		// judged is the outcome of the last judged catalog (selection key
		// and query semantics, or the fault), so repeats are not recounted.
		judged string
		// judgedKey is the producer key of the last judged selection.
		judgedKey *kvrelay.ProducerKey
		sel       *Selection // the selected, admitted descriptor
		pool      *poolTask
		retry     <-chan time.Time
		// pending is a selection whose Admit failed for a passing reason;
		// admitRetry (the backoff) or admitWake (the sink's hint) retries it.
		pending    *Selection
		admitRetry <-chan time.Time
		admitWake  <-chan struct{}
		stopped    = func() {
			if pool != nil {
				pool.cancel()
				<-pool.done
				pool = nil
			}
		}
	)
	defer stopped()
	start := func(s Selection) {
		retry = nil
		pctx, pcancel := context.WithCancel(ectx)
		t := &poolTask{cancel: pcancel, done: make(chan *Fault, 1), sel: s, start: f.cfg.Now()}
		pool = t
		wg.Add(1)
		go func() {
			defer wg.Done()
			flt := f.follow(pctx, rc, s)
			if flt != nil && pctx.Err() == nil {
				f.fail(flt)
			} else {
				flt = nil
			}
			t.done <- flt
		}()
	}
	// admit asks the sink to admit s and follows it when it does. A
	// refusal for good waits for the catalog to change; a passing failure
	// is retried after backoff, or earlier when the sink hints so.
	admit := func(s Selection, woken bool) {
		pending, admitRetry, admitWake = nil, nil, nil
		err := f.cfg.Sink.Admit(s)
		if err == nil {
			sel = &s
			f.selected.Store(sel)
			f.setStatus(func(st *Status) { st.Phase = PhaseAssembling; st.Producer = keyText(s.Key) })
			start(s)
			return
		}
		if errors.Is(err, ErrIncompatible) {
			f.fail(fault(ReasonRefused, err, "pool of dc_id %016x", s.Key.DcID))
			f.setStatus(func(st *Status) { st.Phase = PhaseRefused; st.Producer = keyText(s.Key) })
			return
		}
		d := bo.Next()
		f.fail(fault(ReasonAdmitFailed, err, "pool of dc_id %016x; retrying in %s", s.Key.DcID, d))
		f.setStatus(func(st *Status) { st.Phase = PhaseBackoff; st.Producer = keyText(s.Key) })
		pending, admitRetry = &s, f.cfg.After(d)
		var hint *RetryHint
		if errors.As(err, &hint) {
			admitWake = hint.Ready
			if woken {
				// A hint that is ready already after a woken retry would
				// spin: this retry waits for the backoff only.
				select {
				case <-hint.Ready:
					admitWake = nil
				default:
				}
			}
		}
	}
	for {
		var poolDone <-chan *Fault
		if pool != nil {
			poolDone = pool.done
		}
		select {
		case <-ctx.Done():
			return
		case flt := <-poolDone:
			// Invalidated already. The catalog stays open: a new producer
			// in it is followed at once, the same one after backoff.
			lasted := f.cfg.Now().Sub(pool.start)
			pool = nil
			if flt == nil {
				continue
			}
			if lasted >= f.cfg.BackoffMax {
				bo.Reset()
			}
			f.setStatus(func(s *Status) { s.Phase = PhaseBackoff })
			retry = f.cfg.After(bo.Next())
		case <-retry:
			retry = nil
			if sel != nil && pool == nil {
				start(*sel)
			}
		case <-admitRetry:
			admit(*pending, false)
		case <-admitWake:
			admit(*pending, true)
		case m := <-updates:
			if m.err != nil {
				stopped()
				f.fail(rpcFault("catalog", m.err, m.trailer))
				return
			}
			next, flt := f.judge(m.u, &relay, &rev, &last)
			if flt != nil && next == nil && isPlaneFault(flt.Reason) {
				stopped()
				f.fail(flt)
				return
			}
			outcome := ""
			if next != nil {
				qs := next.Descriptor.GetQuerySemantics()
				outcome = fmt.Sprintf("%v block_size=%d hash_format=%d", next.Key, qs.GetKvBlockSize(), qs.GetHashFormat())
			} else {
				outcome = string(flt.Reason) + flt.Detail
			}
			if outcome == judged {
				continue // a heartbeat or an unrelated change
			}
			judged = outcome
			hadPool := pool != nil || sel != nil || pending != nil
			prevKey := judgedKey
			judgedKey = nil
			stopped()
			sel, retry = nil, nil
			f.selected.Store(nil)
			pending, admitRetry, admitWake = nil, nil, nil
			if next == nil {
				if hadPool && flt.Reason == ReasonNoDescriptor {
					flt.Reason = ReasonWithdrawn // §4.4: drop the replica of a pool gone from the catalog
				}
				f.fail(flt)
				f.setStatus(func(s *Status) { s.Phase = PhaseRefused; s.Producer = "" })
				continue
			}
			judgedKey = &next.Key
			switch {
			case hadPool && prevKey != nil && *prevKey == next.Key:
				qs := next.Descriptor.GetQuerySemantics()
				f.fail(fault(ReasonSemanticsChanged, nil, "catalog revision %d gives the producer kv_block_size %d, hash format %s",
					rev, qs.GetKvBlockSize(), qs.GetHashFormat()))
			case hadPool:
				f.fail(fault(ReasonProducerChanged, nil, "catalog revision %d names producer incarnation %d layout %d",
					rev, next.Key.ProducerIncarnation, next.Key.LayoutGeneration))
			}
			bo.Reset() // a new producer or new semantics is new evidence
			admit(*next, false)
		}
	}
}

// isPlaneFault reports the catalog faults that invalidate the whole plane
// (the epoch ends) rather than only the selection.
func isPlaneFault(r Reason) bool {
	return r == ReasonCatalogInvalid || r == ReasonCatalogRegressed || r == ReasonRelayChanged
}

// judge checks one catalog update against the stream so far and selects
// the descriptor to follow. A nil selection comes with its fault: a plane
// fault (isPlaneFault) or why nothing is selectable.
func (f *Follower) judge(u *kvrelayv1.KvPoolCatalogUpdate, relay **kvrelayv1.RelayIdentity, rev *uint64, last **kvrelayv1.KvPoolCatalogSnapshot) (*Selection, *Fault) {
	perPool, err := kvrelay.ValidateCatalogUpdate(u)
	if err != nil {
		return nil, fault(ReasonCatalogInvalid, err, "revision %d", u.GetRevision())
	}
	first := *last == nil
	switch {
	case !proto.Equal(*relay, u.GetRelay()):
		return nil, fault(ReasonRelayChanged, nil, "catalog relay identity differs from the relay's (GetRelayInfo) or changed within the stream")
	case first:
	case u.GetRevision() < *rev:
		return nil, fault(ReasonCatalogRegressed, nil, "revision %d after %d", u.GetRevision(), *rev)
	case u.GetRevision() == *rev && !proto.Equal(u.GetSnapshot(), *last):
		return nil, fault(ReasonCatalogRegressed, nil, "revision %d repeated with other content", u.GetRevision())
	}
	*rev, *last = u.GetRevision(), u.GetSnapshot()

	var aggregated, legacy []int
	for i, d := range u.GetSnapshot().GetPools() {
		if perPool[i] != nil || !registers(d, f.cfg.Model) {
			continue // quarantined (§3.4) or another model
		}
		roles := d.GetPoolRoles()
		switch {
		case slices.Contains(roles, kvrelayv1.WorkerRole_WORKER_ROLE_AGGREGATED):
			aggregated = append(aggregated, i)
		case f.cfg.AcceptLegacy && len(roles) == 1 && roles[0] == kvrelayv1.WorkerRole_WORKER_ROLE_LEGACY:
			legacy = append(legacy, i)
		}
	}
	pick := aggregated
	if len(pick) == 0 {
		pick = legacy
	}
	switch len(pick) {
	case 0:
		return nil, fault(ReasonNoDescriptor, nil, "no valid descriptor of revision %d registers model %q with an accepted role", *rev, f.cfg.Model)
	case 1:
	default:
		return nil, fault(ReasonAmbiguous, nil, "%d descriptors of revision %d register model %q", len(pick), *rev, f.cfg.Model)
	}
	d := u.GetSnapshot().GetPools()[pick[0]]
	key, err := kvrelay.KeyOf(d.GetProducer())
	if err != nil { // unreachable: ValidateCatalogUpdate keyed it
		return nil, fault(ReasonCatalogInvalid, err, "selected descriptor")
	}
	return &Selection{Key: key, Descriptor: d, Relay: *relay}, nil
}

// registers reports whether d registers model as a canonical id or alias.
func registers(d *kvrelayv1.KvPoolDescriptor, model string) bool {
	for _, r := range d.GetRegistrations() {
		if r.GetCanonicalModelId() == model || slices.Contains(r.GetAliases(), model) {
			return true
		}
	}
	return false
}

// follow runs one pool stream of sel until it fails (the fault is
// returned, not yet invalidated) or ctx ends (nil).
func (f *Follower) follow(ctx context.Context, rc kvrelayv1.KvEventRelayClient, sel Selection) *Fault {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A stream that sends nothing (not even heartbeats) for FrameTimeout is
	// cut: its state cannot be vouched for.
	var stalled atomic.Bool
	timer := time.AfterFunc(f.cfg.FrameTimeout, func() { stalled.Store(true); cancel() })
	defer timer.Stop()
	st, err := rc.SubscribeKvPool(sctx, &kvrelayv1.SubscribeKvPoolRequest{
		SubscriberId: f.cfg.SubscriberBase + "/ckf", ExpectedProducer: sel.Descriptor.GetProducer(), ContractMarker: kvrelayv1.ContractMarker})
	if err != nil {
		return rpcFault("pool stream", err, nil)
	}
	asm, err := cbi1.NewAssembler(sel.Key.Format())
	if err != nil {
		return fault(ReasonBadFrame, err, "producer format")
	}
	// assembling: a snapshot's chunk 0 was accepted and its last chunk not
	// yet. cbi1's assembler restarts on a chunk 0 (the reference does); one
	// pool stream carries one snapshot, so here a second chunk 0 before the
	// first snapshot completes is out of order and fails (§5.3).
	var installed, assembling bool
	var seq uint64
	for {
		// The timer runs while the stream is awaited, not while the sink
		// works on a frame (a large install is not the relay's stall).
		timer.Reset(f.cfg.FrameTimeout)
		u, err := st.Recv()
		timer.Stop()
		if err != nil {
			switch {
			case ctx.Err() != nil:
				return nil
			case stalled.Load():
				return fault(ReasonStalled, nil, "no frame for %s (installed %t, sequence %d)", f.cfg.FrameTimeout, installed, seq)
			}
			return rpcFault("pool stream", err, st.Trailer())
		}
		fr, err := kvrelay.CheckFilterUpdate(sel.Key, u)
		if err != nil {
			if errors.Is(err, kvrelay.ErrProducerMismatch) {
				return fault(ReasonWrongProducer, err, "frame of sequence %d", u.GetSequence())
			}
			return fault(ReasonBadFrame, err, "frame kind %s sequence %d", u.GetKind(), u.GetSequence())
		}
		if !proto.Equal(u.GetRelay(), sel.Relay) {
			return fault(ReasonRelayChanged, nil, "pool stream relay identity differs from the catalog's")
		}
		kind := u.GetKind()
		switch kind {
		case kvrelayv1.FilterUpdateKind_FILTER_UPDATE_KIND_SNAPSHOT_CHUNK:
			if installed {
				return fault(ReasonChunkSequence, nil, "snapshot chunk at sequence %d after installation", u.GetSequence())
			}
			if assembling && fr.Chunk.Index == 0 {
				return fault(ReasonChunkSequence, nil, "chunk 0 of sequence %d while a snapshot was being assembled", u.GetSequence())
			}
			snap, done, err := asm.Add(fr)
			if err != nil {
				return fault(ReasonChunkSequence, err, "sequence %d", u.GetSequence())
			}
			assembling = !done
			if done {
				if err := f.cfg.Sink.Install(Snapshot{Selection: sel, Sequence: snap.Epoch, Words: snap.Words}); err != nil {
					return fault(ReasonSink, err, "install sequence %d", snap.Epoch)
				}
				installed, seq = true, snap.Epoch
				f.count(f.m.installsFor(f.cfg.Name))
				f.installedGauge(1)
				f.log.Info().Uint64("seq", seq).Str("producer", keyText(sel.Key)).Msg("kvrelay snapshot installed")
			}
		case kvrelayv1.FilterUpdateKind_FILTER_UPDATE_KIND_DELTA:
			if !installed || u.GetBaseSequence() != seq {
				return fault(ReasonGap, nil, "delta %d→%d at installed sequence %d (installed %t)", u.GetBaseSequence(), u.GetSequence(), seq, installed)
			}
			if err := f.cfg.Sink.Apply(Delta{Selection: sel, BaseSequence: u.GetBaseSequence(), Sequence: u.GetSequence(), Images: fr.Delta, SendTimeUs: u.GetSendTsUs()}); err != nil {
				return fault(ReasonSink, err, "delta %d→%d", u.GetBaseSequence(), u.GetSequence())
			}
			seq = u.GetSequence()
		case kvrelayv1.FilterUpdateKind_FILTER_UPDATE_KIND_HEARTBEAT:
			if !installed || u.GetSequence() != seq {
				return fault(ReasonHeartbeat, nil, "heartbeat at %d, installed sequence %d (installed %t)", u.GetSequence(), seq, installed)
			}
			if err := f.cfg.Sink.Heartbeat(seq); err != nil {
				return fault(ReasonSink, err, "heartbeat at %d", seq)
			}
		}
		now := f.cfg.Now()
		f.setStatus(func(s *Status) {
			s.LastFrame, s.Sequence = now, seq
			if installed {
				s.Phase = PhaseInstalled
			}
		})
		f.count(f.m.framesFor(f.cfg.Name, kind))
	}
}

// fail counts, logs and records flt and invalidates the lane.
func (f *Follower) fail(flt *Fault) {
	f.installedGauge(0)
	if f.m != nil {
		f.m.faults.WithLabelValues(f.cfg.Name, string(flt.Reason)).Inc()
	}
	f.log.Warn().Str("reason", string(flt.Reason)).Err(flt).Msg("kvrelay lane invalidated")
	f.setStatus(func(s *Status) { s.LastFault = flt.Error() })
	f.cfg.Sink.Invalidate(flt.Reason, flt.Error())
}

// rpcFault classifies a failed call or a stream's end by its status and
// reason trailer (§2.2); a clean end is a loss of state too.
func rpcFault(what string, err error, trailer metadata.MD) *Fault {
	if errors.Is(err, errEOF) {
		return fault(ReasonStreamEnd, nil, "%s ended", what)
	}
	st, _ := status.FromError(err)
	r := statusReason(st.Code(), kvrelay.ReasonFromTrailer(trailer))
	return fault(r, err, "%s", what)
}

func keyText(k kvrelay.ProducerKey) string {
	return fmt.Sprintf("dc_id=%016x incarnation=%d layout=%d cache=%x routing=%x buckets=%d seed=%#x",
		k.DcID, k.ProducerIncarnation, k.LayoutGeneration, k.CacheSemantics, k.RoutingScope, k.BucketCount, k.Seed)
}

func (f *Follower) installedGauge(v float64) {
	if f.m != nil {
		f.m.installed.WithLabelValues(f.cfg.Name).Set(v)
	}
}

func (f *Follower) count(c interface{ Inc() }) {
	if c != nil {
		c.Inc()
	}
}
