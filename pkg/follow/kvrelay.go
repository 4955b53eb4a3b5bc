package follow

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"

	kvrelayv1 "github.com/ckfrelay/ckfrelay/dynamo/kvrelay/v1"
	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/consumer"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/client"
	"github.com/ckfrelay/ckfrelay/pkg/lease"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

// dynamo.kvrelay.v1 lanes (docs/kvrelay.md, "ckfrelay indexer over Dynamo
// pools"). Each configured source is one lane of the same table as the
// NATS lanes: a client.Follower mirrors the source's pool and this file's
// kvLane, its LaneSink, installs the snapshots and submits the deltas into
// the shared consumer.Pool exactly as a NATS lane runner does (Assign under
// a fresh local lease, InstallSnapshot, SubmitDelta, CompleteDrain).
//
// Lanes: the sources take the highest lanes (15, 14, ...) in their order,
// because relays register NATS lanes from the lowest free lane up. A lane
// map entry that names a source's lane name, or lands on a source's lane,
// is refused and logged (MetricLaneMapRejected{entry="kvrelay"}).
//
// Identity: a kvrelay pool belongs to a Dynamo indexer domain (digests of
// its model card and endpoint) that is not the indexer's, and the consumer
// manifest holds one domain. A source's lane is therefore configured as the
// pool (the indexer's domain, DcIDFromName(name)), like a NATS lane of that
// name, and each producer generation is translated onto it (incarnation,
// layout generation and CKF format kept), under a fresh local lease.
//
// Sequences: CBI1 allows an empty delta, which the pool refuses, so the pool
// sees its own contiguous sequence, advanced only by deltas with images;
// the follower checks the relay's.

// Defaults of the kvrelay settings.
const (
	// DefaultKvRelayStaleAfter marks a kvrelay lane stale when it has not
	// received a frame for this long: two and a half of a Dynamo relay's
	// 10 s pool heartbeats (the NATS lanes' 5 s would flap between them).
	DefaultKvRelayStaleAfter = 25 * time.Second
)

// Sources of a lane (api.LaneStatus.Source).
const (
	SourceNATS    = "nats"
	SourceKvRelay = "kvrelay"
)

// KvRelaySource is one dynamo.kvrelay.v1 relay followed as a lane.
type KvRelaySource struct {
	// Name is the lane's name (a DC name: 1..64 of [A-Za-z0-9_-]).
	Name string
	// Addr is the relay's HOST:PORT.
	Addr string
}

// KvRelayConfig configures the dynamo.kvrelay.v1 lanes.
type KvRelayConfig struct {
	Sources []KvRelaySource
	// Model is the canonical model id (or alias) whose pool each source
	// follows; required with Sources.
	Model string
	// BlockSize is the KV block size in tokens the indexer's queries use;
	// a pool of another kv_block_size is refused. Required with Sources.
	BlockSize uint32
	// AcceptLegacy also follows a pool whose only role is LEGACY when no
	// AGGREGATED pool registers the model (client.Config.AcceptLegacy).
	AcceptLegacy bool
	// TLS dials the relays with TLS (nil: plaintext).
	TLS *tls.Config
	// DialOptions are extra gRPC options (tests).
	DialOptions []grpc.DialOption
	// StaleAfter: see DefaultKvRelayStaleAfter.
	StaleAfter time.Duration
	// FrameTimeout, BackoffMin, BackoffMax: see client.Config (zero: its
	// defaults, 30 s and 500 ms..30 s).
	FrameTimeout, BackoffMin, BackoffMax time.Duration
}

func (k KvRelayConfig) validate() error {
	if len(k.Sources) == 0 {
		return nil
	}
	if len(k.Sources) > ckf.LaneCount {
		return configError("kvrelay.sources", "%d sources; a table has %d lanes", len(k.Sources), ckf.LaneCount)
	}
	if k.Model == "" {
		return configError("kvrelay.model", "a model is required with kvrelay sources")
	}
	if k.BlockSize == 0 {
		return configError("kvrelay.block_size", "the block size of the indexer's queries is required with kvrelay sources")
	}
	if k.StaleAfter < 0 {
		return configError("kvrelay.stale_after", "negative duration %s", k.StaleAfter)
	}
	seen := map[string]bool{}
	for _, s := range k.Sources {
		if err := wire.ValidateName("dc", s.Name); err != nil {
			return &Error{Kind: ErrInvalidConfig, Lane: -1, Field: "kvrelay.sources", Detail: fmt.Sprintf("name %q", s.Name), Err: err}
		}
		if seen[s.Name] {
			return configError("kvrelay.sources", "lane name %s is given twice", s.Name)
		}
		seen[s.Name] = true
		if _, _, err := net.SplitHostPort(s.Addr); err != nil {
			return configError("kvrelay.sources", "%s: address %q: want HOST:PORT", s.Name, s.Addr)
		}
	}
	return nil
}

// kvLane is a kvrelay lane: the runner's LaneSink. The follower's goroutine
// is the lane's run goroutine: it alone calls the sink and touches the
// fields below (and the runner's protocol fields, gen and localEpoch).
type kvLane struct {
	r   *laneRunner
	src KvRelaySource
	f   *client.Follower

	identity  ckf.ProducerIdentity // the generation, translated onto the lane's pool
	lease     ckf.LaneLease
	localSeq  uint64 // the pool's sequence of the lane
	installed bool
	// seen marks the buckets of the delta being translated (a bitset over
	// the lane, allocated at the first delta with a repeated bucket check).
	seen    []uint64
	touched []uint32
}

// kvLaneName reports whether name is a configured kvrelay source.
func (s *Service) kvLaneName(name string) (KvRelaySource, bool) {
	for _, src := range s.cfg.KvRelay.Sources {
		if src.Name == name {
			return src, true
		}
	}
	return KvRelaySource{}, false
}

// startKvLanes starts one lane per kvrelay source, from lane 15 down.
func (s *Service) startKvLanes() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, src := range s.cfg.KvRelay.Sources {
		lane := ckf.LaneCount - 1 - i
		s.startKvLaneLocked(lane, src)
	}
}

// startKvLaneLocked configures lane for src and starts its follower. s.mu held.
func (s *Service) startKvLaneLocked(lane int, src KvRelaySource) {
	log := s.log.With().Int("lane", lane).Str("dc", src.Name).Str("source", SourceKvRelay).Str("addr", src.Addr).Logger()
	lm := s.m.forLane(lane, src.Name)
	pool := ckf.PoolID{Domain: s.domainID, Dc: ckf.DcIDFromName(src.Name)}
	r := newLaneRunner(s, lane, src.Name, pool, wire.LaneSubjects{}, log, lm)
	kv := &kvLane{r: r, src: src}
	r.kv = kv
	k := s.cfg.KvRelay
	f, err := client.New(client.Config{Name: src.Name, Addr: src.Addr, Model: k.Model, AcceptLegacy: k.AcceptLegacy, Sink: kv, Load: kv,
		SubscriberBase: "ckfrelay-" + s.requester, TLS: k.TLS, DialOptions: k.DialOptions,
		FrameTimeout: k.FrameTimeout, BackoffMin: k.BackoffMin, BackoffMax: k.BackoffMax,
		Metrics: s.kvMetrics, Logger: log})
	kv.f = f
	if err == nil {
		if g := s.gen.Load(); g != nil {
			err = g.pool.ConfigureLane(lane, pool)
			if errors.Is(err, consumer.ErrWorkerFailed) || errors.Is(err, consumer.ErrPoolClosed) {
				s.poolFailedLocked(g)
				err = g.pool.Indexer().ConfigureLane(lane, pool)
			}
		}
	}
	s.runners[lane] = r
	s.heard[lane].Store(0)
	s.owners[lane].Store(nil)
	s.staleAfter[lane].Store(int64(k.StaleAfter))
	labels := *s.labels.Load()
	labels[lane] = laneLabel{dc: src.Name, pool: pool.String()}
	s.labels.Store(&labels)
	if err != nil {
		lm.fault(ErrLaneConfig.String())
		r.setStatus(PhaseRefused, laneError(ErrLaneConfig, lane, err, "kvrelay source %s", src.Name).Error())
		log.Error().Err(err).Msg("kvrelay lane refused")
		return
	}
	log.Info().Msg("kvrelay lane added")
	s.runnersWG.Add(1)
	go func() {
		defer s.runnersWG.Done()
		r.setStatus(PhaseBootstrapping, "")
		if err := f.Run(s.runnerCtx); err != nil {
			r.setStatus(PhaseRefused, err.Error())
			log.Error().Err(err).Msg("kvrelay lane stopped")
		}
	}()
}

// kvRefusesLocked reports a lane map entry that collides with a kvrelay
// lane (its name, or its lane), logging and counting it the first time.
// s.mu held.
func (s *Service) kvRefusesLocked(lane int, e *lease.LaneEntry) bool {
	src, byName := s.kvLaneName(e.DcName)
	r := s.runners[lane]
	byLane := r != nil && r.kv != nil && !byName
	if !byName && !byLane {
		return false
	}
	key := fmt.Sprintf("%d/%s", lane, e.DcName)
	if s.kvRefused[key] {
		return true
	}
	s.kvRefused[key] = true
	s.m.laneMapRejected.WithLabelValues("kvrelay").Inc()
	if byName {
		s.log.Error().Int("lane", lane).Str("dc", e.DcName).Str("kvrelay_addr", src.Addr).
			Msg("configuration error: the lane map names a NATS lane that --kvrelay-source also names; the NATS lane is refused (rename one of them)")
	} else {
		s.log.Error().Int("lane", lane).Str("dc", e.DcName).Str("kvrelay_source", r.dc).
			Msg("configuration error: the lane map put a NATS lane on a lane a kvrelay source holds; the NATS lane is refused (fewer kvrelay sources, or fewer DCs)")
	}
	return true
}

// sourceStatus fills the source fields of a lane's row. r.mu held.
func (r *laneRunner) sourceStatus(st *api.LaneStatus) {
	if r.kv == nil {
		st.Source = SourceNATS
		return
	}
	st.Source, st.Address = SourceKvRelay, r.kv.src.Addr
	if r.kv.f == nil {
		return // refused before it started
	}
	fs := r.kv.f.Status()
	st.Producer = fs.Producer
	if !fs.LastFrame.IsZero() {
		age := max(r.svc.now().Sub(fs.LastFrame).Milliseconds(), 0)
		st.LastFrameAgeMs = &age
	}
}

// Admit refuses a pool the table cannot hold: another CKF format than the
// table's (bucket count, seed, fingerprint bits, slots) or other query
// semantics than the indexer's queries (block size, hash format). Those
// refusals wrap client.ErrIncompatible: only a catalog change can lift
// them. A pool that cannot take the lane now (its worker failed and the
// rebuild waits, or it was closed mid-rebuild) is a passing failure, with
// a client.RetryHint that is ready once the pool generation is replaced.
func (k *kvLane) Admit(sel client.Selection) error {
	r := k.r
	qs := sel.Descriptor.GetQuerySemantics()
	if hf := qs.GetHashFormat(); hf != kvrelayv1.KvQueryHashFormat_KV_QUERY_HASH_FORMAT_DYNAMO_STANDARD_V1 {
		return k.refuse("query hash format %s: the indexer answers DYNAMO_STANDARD_V1 block hashes only", hf)
	}
	if bs := qs.GetKvBlockSize(); bs != r.svc.cfg.KvRelay.BlockSize {
		return k.refuse("kv_block_size %d: the indexer's queries use blocks of %d tokens", bs, r.svc.cfg.KvRelay.BlockSize)
	}
	_, err := k.pool(sel)
	return err
}

func (k *kvLane) refuse(format string, a ...any) error {
	err := laneError(ErrWrongFormat, k.r.lane, client.ErrIncompatible, format, a...)
	k.r.m.fault(ErrWrongFormat.String())
	k.r.setStatus(PhaseRefused, err.Error())
	return err
}

// pool returns the pool generation to install into, built with the
// selection's format when it is the first; another format is refused.
func (k *kvLane) pool(sel client.Selection) (*poolGen, error) {
	r := k.r
	format := sel.Key.CKF().Format
	g, err := r.svc.ensurePool(format)
	if err != nil {
		return nil, laneError(ErrLaneConfig, r.lane, err, "building the ingestion pool")
	}
	if have := g.pool.Indexer().Manifest().Format(); have != format {
		return nil, k.refuse("pool format (buckets %d, seed %#x, fingerprint bits %d, slots %d) differs from the table's (buckets %d, seed %#x, fingerprint bits %d, slots %d)",
			format.BucketCount, format.Seed, format.FingerprintBits, format.SlotsPerBucket, have.BucketCount, have.Seed, have.FingerprintBits, have.SlotsPerBucket)
	}
	if _, ok := g.pool.Indexer().Manifest().PoolID(r.lane); !ok {
		// The pool was built while this lane was refused: configure it now.
		if err := g.pool.ConfigureLane(r.lane, r.pool); err != nil {
			if errors.Is(err, consumer.ErrWorkerFailed) || errors.Is(err, consumer.ErrPoolClosed) {
				r.svc.poolFailed(g)
			}
			return nil, &client.RetryHint{Ready: g.replaced, Err: laneError(ErrLaneConfig, r.lane, err, "configure")}
		}
	}
	if g.laneDown(r.lane) {
		r.svc.poolFailed(g)
		return nil, &client.RetryHint{Ready: g.replaced,
			Err: laneError(ErrLaneConfig, r.lane, consumer.ErrWorkerFailed, "the lane's ingestion worker failed; the pool is being rebuilt")}
	}
	return g, nil
}

// Install assigns the generation under a fresh local lease and installs
// the snapshot; the lane is ready when it returns nil.
func (k *kvLane) Install(s client.Snapshot) error {
	r := k.r
	r.setStatus(PhaseBootstrapping, "")
	g, err := k.pool(s.Selection)
	if err != nil {
		return err
	}
	r.gen = g
	id := s.Selection.Key.CKF()
	id.Pool = r.pool
	r.localEpoch++
	ls := ckf.LaneLease{ConsumerInstance: r.svc.instance, PhysicalLane: uint8(r.lane), AssignmentEpoch: r.localEpoch}
	if err := g.pool.Assign(id, ls); err != nil {
		r.m.bootstrap("failed")
		return laneError(ErrAssign, r.lane, err, "assign incarnation %d", id.ProducerIncarnation)
	}
	snap := ckf.Snapshot{Identity: id, Lease: ls, Sequence: s.Sequence, Buckets: s.Words}
	out, err := g.pool.InstallSnapshot(&snap)
	if err == nil && out.Kind != consumer.OutcomeSnapshotInstalled {
		err = errors.New(out.String())
	}
	if err != nil {
		r.m.bootstrap("failed")
		return laneError(ErrInstall, r.lane, err, "install sequence %d", s.Sequence)
	}
	k.identity, k.lease, k.localSeq, k.installed = id, ls, s.Sequence, true
	// faultOutcome matches pool faults against the installed lease.
	r.cur = current{identity: id, epoch: id.ProducerIncarnation, lease: ls}
	r.setOwner(id, id.ProducerIncarnation)
	r.drainFaults()
	r.m.bootstrap("installed")
	r.setInstalled(id.ProducerIncarnation, s.Sequence)
	r.heardAt(r.svc.now())
	r.setStatus(PhaseActive, "")
	r.log.Info().Uint64("seq", s.Sequence).Uint64("incarnation", id.ProducerIncarnation).Msg("kvrelay snapshot installed")
	return nil
}

// Apply submits a delta with images; an empty one only moves the relay's
// sequence (the follower's).
func (k *kvLane) Apply(d client.Delta) error {
	r := k.r
	if err := k.healthy(); err != nil {
		return err
	}
	now := r.svc.now()
	n := d.Images.Len()
	if n > 0 {
		images := k.translate(d)
		cd := ckf.Delta{Identity: k.identity, Lease: k.lease, BaseSequence: k.localSeq, Sequence: k.localSeq + 1, Images: images}
		if err := r.gen.pool.SubmitDelta(&cd); err != nil {
			if errors.Is(err, consumer.ErrWorkerFailed) {
				r.svc.poolFailed(r.gen)
			}
			return fmt.Errorf("submit delta %d→%d: %w", d.BaseSequence, d.Sequence, err)
		}
		k.localSeq++
		r.m.deltas.Inc()
		r.m.images.Add(float64(len(images)))
	}
	r.setInstalled(k.identity.ProducerIncarnation, d.Sequence)
	r.heardAt(now)
	return nil
}

// translate copies the images (the pool reads them after SubmitDelta
// returns), keeping the last image of a repeated bucket: images are
// absolute, so the last one is the bucket's value, and the pool refuses
// repeats.
func (k *kvLane) translate(d client.Delta) []ckf.BucketImage {
	n := d.Images.Len()
	out := make([]ckf.BucketImage, 0, n)
	if k.seen == nil {
		k.seen = make([]uint64, (d.Selection.Key.BucketCount+63)/64)
	}
	dup := false
	for i := range n {
		im := d.Images.At(i)
		w, bit := im.Bucket/64, uint64(1)<<(im.Bucket%64)
		if int(w) >= len(k.seen) { // a new generation of more buckets
			k.clearSeen()
			k.seen = make([]uint64, (d.Selection.Key.BucketCount+63)/64)
		}
		if k.seen[w]&bit != 0 {
			dup = true
		} else if k.seen[w] == 0 {
			k.touched = append(k.touched, w)
		}
		k.seen[w] |= bit
		out = append(out, ckf.BucketImage{Bucket: uint64(im.Bucket), Value: im.Word})
	}
	k.clearSeen()
	if !dup {
		return out
	}
	// Rare: keep the last image per bucket, in order of last appearance.
	last := make(map[uint64]int, n)
	for i, im := range out {
		last[im.Bucket] = i
	}
	kept := out[:0]
	for i, im := range out {
		if last[im.Bucket] == i {
			kept = append(kept, im)
		}
	}
	return kept
}

func (k *kvLane) clearSeen() {
	for _, w := range k.touched {
		k.seen[w] = 0
	}
	k.touched = k.touched[:0]
}

// Heartbeat drains the lane at the pool's sequence: every admitted delta is
// applied, or the lane fails.
func (k *kvLane) Heartbeat(uint64) error {
	r := k.r
	if err := k.healthy(); err != nil {
		return err
	}
	res, err := r.gen.pool.CompleteDrain(ckf.DrainMarker{Lease: k.lease, ExpectedSequence: k.localSeq})
	if err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	if res.Kind != consumer.OutcomeDrainAcknowledged {
		return fmt.Errorf("drain at %d: %s", k.localSeq, res)
	}
	r.heardAt(r.svc.now())
	r.updateAge()
	return nil
}

// healthy reports a fault the pool raised for the installed lease since the
// last frame (delivered best-effort; the admission state is checked too).
func (k *kvLane) healthy() error {
	r := k.r
	g := r.gen
	if !k.installed || g == nil {
		return errors.New("no installed lane")
	}
	for {
		select {
		case gf := <-r.faults:
			if out, ok := r.faultOutcome(g, gf); ok {
				return fmt.Errorf("pool fault %s: %s", out.fault, out.detail)
			}
			continue
		case <-g.replaced:
			return errors.New("the ingestion pool was rebuilt")
		default:
		}
		break
	}
	if st, ok := g.pool.LaneState(r.lane); ok && st.State != consumer.AdmissionActive {
		return fmt.Errorf("admission state %s", st.State)
	}
	return nil
}

// Invalidate takes the lane out of the ready set at once.
func (k *kvLane) Invalidate(reason client.Reason, detail string) {
	r := k.r
	if g := r.svc.gen.Load(); g != nil {
		g.pool.Indexer().RetireLaneReadiness(r.lane)
	}
	k.installed = false
	r.m.fault("kvrelay_" + string(reason))
	phase := PhaseBackoff
	switch reason {
	case client.ReasonRefused, client.ReasonNoDescriptor, client.ReasonAmbiguous, client.ReasonWithdrawn:
		// Nothing to follow until the catalog changes.
		phase = PhaseRefused
	}
	r.setStatus(phase, detail)
}

// drainFaults drops queued faults of earlier leases.
func (r *laneRunner) drainFaults() {
	for {
		select {
		case <-r.faults:
		default:
			return
		}
	}
}

// staleFor is the stale threshold of lane.
func (s *Service) staleFor(lane int) time.Duration {
	if d := s.staleAfter[lane].Load(); d > 0 {
		return time.Duration(d)
	}
	return s.cfg.LaneStaleAfter
}

var _ client.LaneSink = (*kvLane)(nil)
